package chaos

// The run's Redis Sentinel deployment (topology.ledger redis-sentinel): a
// primary, topology.redis_replicas replicas of it and three Sentinels
// monitoring it, each a redis-server on a free loopback port without
// persistence. Routers and reservers reach the primary through the
// Sentinels (redis+sentinel://), with topology.wait_replicas as the URL's
// wait_replicas. The fault failover_redis SIGKILLs whichever server is
// primary and waits until a replica reports itself promoted (ROLE master);
// the Sentinels then announce it and the clients follow. When a failover
// stalls replication first (its `for`), each replica replicates through a
// fault proxy (proxy.go) that holds the stream for the stall and drops
// what it held at the kill: the promoted replica lacks those writes, as a
// lagging replica does (a SIGSTOPped one would not: the kernel keeps
// receiving for it). The Sentinels' failover timeout is long so that they
// do not "fix" a replica's master address back to the primary's own.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/freeport"
)

// sentinelMaster is the master name the Sentinels monitor.
const sentinelMaster = "leasehold"

// Sentinel timing: a primary silent for sentinelDownAfter is down, and a
// failover that has not completed in sentinelFailoverTimeout is retried.
const (
	sentinelDownAfter       = time.Second
	sentinelFailoverTimeout = 60 * time.Second
	sentinelCount           = 3
)

// redisNode is one redis-server (a data node or a Sentinel).
type redisNode struct {
	proc
	addr string
}

// sentinelSet is a Sentinel deployment: data nodes (data[0] the first
// primary) and the Sentinels.
type sentinelSet struct {
	data      []*redisNode
	sentinels []*redisNode
	primary   int // index in data of the current primary
	// links are the replicas' fault proxies to the first primary (nil
	// unless a failover stalls replication).
	links []*Proxy
}

// redisBinary finds redis-server: Binaries.RedisServer, REDIS_SERVER, PATH.
func (c *cluster) redisBinary() (string, error) {
	bin := c.bins.RedisServer
	if bin == "" {
		bin = os.Getenv("REDIS_SERVER")
	}
	if bin == "" {
		bin = "redis-server"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return "", fmt.Errorf("chaos: topology.ledger %s needs redis-server >= 7 (apt-get install redis-server, or set REDIS_SERVER): %w", c.sc.Topology.Ledger, err)
	}
	return path, nil
}

// startSentinel starts the data nodes, waits until every replica is
// online, then starts the Sentinels and waits until each knows the
// primary, its replicas and the other Sentinels.
func (c *cluster) startSentinel(ctx context.Context) error {
	bin, err := c.redisBinary()
	if err != nil {
		return err
	}
	s := &sentinelSet{}
	c.sentinel = s
	newNode := func(name string, pre []string, extra ...string) (*redisNode, error) {
		port, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(c.dir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if pre != nil {
			conf := filepath.Join(dir, "sentinel.conf")
			if err := os.WriteFile(conf, []byte(strings.Join(pre, "\n")+"\n"), 0o644); err != nil {
				return nil, err
			}
			pre = []string{conf, "--sentinel"}
		}
		n := &redisNode{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
		n.proc = proc{name: name, bin: bin, logPath: c.logPath(name),
			args: append(append(pre, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
				"--dir", dir, "--daemonize", "no"), extra...)}
		if err := n.start(); err != nil {
			return nil, err
		}
		return n, waitPing(ctx, &n.proc, n.addr)
	}
	// Full syncs start at once rather than after Redis's 5 s default delay.
	fastSync := []string{"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}
	primary, err := newNode("redis-0", nil, fastSync...)
	if err != nil {
		return err
	}
	s.data = append(s.data, primary)
	_, pport, _ := net.SplitHostPort(primary.addr)
	for i := range c.sc.Topology.RedisReplicas {
		of := pport
		if c.sc.stallsReplication() {
			link, err := NewProxy(primary.addr)
			if err != nil {
				return err
			}
			s.links = append(s.links, link)
			_, of, _ = net.SplitHostPort(link.Addr())
		}
		r, err := newNode(fmt.Sprintf("redis-%d", i+1), nil, append(fastSync, "--replicaof", "127.0.0.1", of)...)
		if err != nil {
			return err
		}
		s.data = append(s.data, r)
	}
	if err := waitReplicasOnline(ctx, primary.addr, c.sc.Topology.RedisReplicas); err != nil {
		return err
	}
	quorum := sentinelCount/2 + 1
	conf := []string{
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %s %d", sentinelMaster, pport, quorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", sentinelMaster, sentinelDownAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s %d", sentinelMaster, sentinelFailoverTimeout.Milliseconds()),
		fmt.Sprintf("sentinel parallel-syncs %s %d", sentinelMaster, max(1, c.sc.Topology.RedisReplicas)),
	}
	for i := range sentinelCount {
		n, err := newNode(fmt.Sprintf("sentinel-%d", i), conf)
		if err != nil {
			return err
		}
		s.sentinels = append(s.sentinels, n)
	}
	return s.waitKnown(ctx, c.sc.Topology.RedisReplicas)
}

// stallsReplication reports whether a failover_redis of sc stalls
// replication first.
func (sc *Scenario) stallsReplication() bool {
	for _, f := range sc.Faults {
		if f.Kind == FaultFailoverRedis && f.For > 0 {
			return true
		}
	}
	return false
}

// waitPing waits until addr answers PING while p runs.
func waitPing(ctx context.Context, p *proc, addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if redisPing(addr) == nil {
			return nil
		}
		if !p.running() || time.Now().After(deadline) {
			return fmt.Errorf("%s on %s did not answer PING: %s", p.name, addr, p.logTail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitReplicasOnline waits until the primary at addr reports n replicas
// online (so WAIT counts them).
func waitReplicasOnline(ctx context.Context, addr string, n int) error {
	rc := goredis.NewClient(&goredis.Options{Addr: addr})
	defer rc.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		info, err := rc.Info(ctx, "replication").Result()
		if err == nil && strings.Count(info, ",state=online,") >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("primary %s: %d replicas not online within 15s: %v\n%s", addr, n, err, info)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitKnown waits until every Sentinel sees the primary with its replicas
// and the other Sentinels, so that a failover can be authorised at once.
func (s *sentinelSet) waitKnown(ctx context.Context, replicas int) error {
	deadline := time.Now().Add(30 * time.Second) // Sentinels say hello every 2 s
	for _, n := range s.sentinels {
		sc := goredis.NewSentinelClient(&goredis.Options{Addr: n.addr})
		for {
			m, err := sc.Master(ctx, sentinelMaster).Result()
			if err == nil && m["num-other-sentinels"] == strconv.Itoa(sentinelCount-1) && m["num-slaves"] == strconv.Itoa(replicas) {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				_ = sc.Close()
				return fmt.Errorf("sentinel %s does not see the primary with %d replicas and %d other sentinels: %v %v", n.addr, replicas, sentinelCount-1, m, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = sc.Close()
	}
	return nil
}

// url is the ledger URL through the Sentinels.
func (s *sentinelSet) url(waitReplicas int) string {
	addrs := make([]string, len(s.sentinels))
	for i, n := range s.sentinels {
		addrs[i] = n.addr
	}
	u := "redis+sentinel://" + strings.Join(addrs, ",") + "/" + sentinelMaster
	if waitReplicas > 0 {
		u += "?wait_replicas=" + strconv.Itoa(waitReplicas) + "&wait_timeout=500ms"
	}
	return u
}

// nodes are every process of the deployment.
func (s *sentinelSet) nodes() []*redisNode {
	return append(append([]*redisNode{}, s.data...), s.sentinels...)
}

// failover SIGKILLs the primary and polls the other data nodes' ROLE every
// 5 ms until one is master; it returns the old and the new primary and
// when each step happened. With stall > 0 the replication links hold
// every byte for that long before the kill and drop them at it, so the
// promoted replica lacks what the primary acknowledged meanwhile, as a
// failover loses a lagging replica's backlog (only the first primary's
// replicas have links).
func (s *sentinelSet) failover(ctx context.Context, stall time.Duration) (old, promoted *redisNode, killed, at time.Time, err error) {
	old = s.data[s.primary]
	if stall > 0 {
		if len(s.links) == 0 || s.primary != 0 {
			return old, nil, time.Now(), time.Time{}, fmt.Errorf("a replication stall needs the first primary's replication links")
		}
		for _, l := range s.links {
			l.Set(ModeDrop, 0)
		}
		sleep(ctx, stall)
	}
	killed = time.Now()
	old.kill()
	for _, l := range s.links {
		l.Set(ModeReset, 0)
	}
	clients := map[*redisNode]*goredis.Client{}
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	for i, n := range s.data {
		if i != s.primary {
			clients[n] = goredis.NewClient(&goredis.Options{Addr: n.addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		}
	}
	deadline := killed.Add(sentinelDownAfter + 2*sentinelFailoverTimeout)
	for {
		for i, n := range s.data {
			c := clients[n]
			if c == nil {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			role, rerr := c.Do(cctx, "role").Slice()
			cancel()
			if rerr == nil && len(role) > 0 && role[0] == "master" {
				s.primary = i
				return old, n, killed, time.Now(), nil
			}
		}
		if time.Now().After(deadline) {
			return old, nil, killed, time.Time{}, fmt.Errorf("no replica promoted within %s of the kill", time.Since(killed).Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return old, nil, killed, time.Time{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
