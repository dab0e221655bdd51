package redisserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Sentinels are Redis Sentinels (redis-server --sentinel) monitoring one
// primary under a master name, each on its own free loopback port, killed
// when the test ends.
type Sentinels struct {
	tb     testing.TB
	Master string
	nodes  []*Server
}

// SentinelConfig tunes StartSentinels; zero fields take the defaults.
type SentinelConfig struct {
	// Master is the master name (default "leasehold").
	Master string
	// Count is how many Sentinels run (default 3); the quorum is a majority.
	Count int
	// DownAfter is down-after-milliseconds: how long the primary must not
	// answer before a Sentinel deems it down (default 1s).
	DownAfter time.Duration
	// FailoverTimeout is failover-timeout (default 5s).
	FailoverTimeout time.Duration
}

func (c SentinelConfig) withDefaults() SentinelConfig {
	if c.Master == "" {
		c.Master = "leasehold"
	}
	if c.Count == 0 {
		c.Count = 3
	}
	if c.DownAfter == 0 {
		c.DownAfter = time.Second
	}
	if c.FailoverTimeout == 0 {
		c.FailoverTimeout = 5 * time.Second
	}
	return c
}

// StartSentinels starts cfg.Count Sentinels monitoring primary and waits
// until each knows the primary, its replicas (replicas of them, as many as
// the primary has now) and every other Sentinel, so that a failover can be
// authorised at once.
func StartSentinels(tb testing.TB, primary *Server, cfg SentinelConfig) *Sentinels {
	tb.Helper()
	cfg = cfg.withDefaults()
	ctx := context.Background()
	pc := goredis.NewClient(&goredis.Options{Addr: primary.Addr()})
	replicas, err := connectedReplicas(ctx, pc)
	_ = pc.Close()
	if err != nil {
		tb.Fatalf("redisserver: primary %s: %v", primary.Addr(), err)
	}
	quorum := cfg.Count/2 + 1
	s := &Sentinels{tb: tb, Master: cfg.Master}
	for range cfg.Count {
		conf := func(dir string, port int) ([]string, error) {
			path := filepath.Join(dir, "sentinel-"+strconv.Itoa(port)+".conf")
			body := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d\n"+
				"sentinel down-after-milliseconds %s %d\n"+
				"sentinel failover-timeout %s %d\n"+
				"sentinel parallel-syncs %s 1\n",
				cfg.Master, primary.port, quorum,
				cfg.Master, cfg.DownAfter.Milliseconds(),
				cfg.Master, cfg.FailoverTimeout.Milliseconds(),
				cfg.Master)
			return []string{path, "--sentinel"}, os.WriteFile(path, []byte(body), 0o644)
		}
		s.nodes = append(s.nodes, startWith(tb, conf, nil))
	}
	deadline := time.Now().Add(3 * startTimeout) // Sentinels say hello every 2s
	for _, n := range s.nodes {
		c := goredis.NewSentinelClient(&goredis.Options{Addr: n.Addr()})
		for {
			m, err := c.Master(ctx, cfg.Master).Result()
			if err == nil && m["num-other-sentinels"] == strconv.Itoa(cfg.Count-1) && m["num-slaves"] == strconv.Itoa(replicas) {
				break
			}
			if time.Now().After(deadline) {
				_ = c.Close()
				tb.Fatalf("redisserver: sentinel %s does not see the primary, its %d replicas and %d other sentinels: %v %v", n.Addr(), replicas, cfg.Count-1, m, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = c.Close()
	}
	return s
}

// connectedReplicas is connected_slaves from the primary's INFO replication.
func connectedReplicas(ctx context.Context, c *goredis.Client) (int, error) {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("INFO replication has no connected_slaves")
}

// Addrs are the Sentinels' host:port addresses.
func (s *Sentinels) Addrs() []string {
	out := make([]string, len(s.nodes))
	for i, n := range s.nodes {
		out[i] = n.Addr()
	}
	return out
}

// URL is the ledger URL of the primary they monitor:
// redis+sentinel://host:port,host:port,.../MASTER.
func (s *Sentinels) URL() string {
	return "redis+sentinel://" + strings.Join(s.Addrs(), ",") + "/" + s.Master
}

// MasterAddr asks the Sentinels, in turn, which address is the primary.
func (s *Sentinels) MasterAddr(ctx context.Context) (string, error) {
	var last error
	for _, n := range s.nodes {
		c := goredis.NewSentinelClient(&goredis.Options{Addr: n.Addr()})
		addr, err := c.GetMasterAddrByName(ctx, s.Master).Result()
		_ = c.Close()
		if err == nil && len(addr) == 2 {
			return net.JoinHostPort(addr[0], addr[1]), nil
		}
		last = err
	}
	return "", fmt.Errorf("no sentinel names the primary of %s: %v", s.Master, last)
}

// SwitchMaster subscribes to +switch-master on every Sentinel and returns
// a channel that receives the new primary's address and the time the
// first Sentinel announced it, once; stop unsubscribes.
func (s *Sentinels) SwitchMaster(ctx context.Context) (switched <-chan Switch, stop func()) {
	out := make(chan Switch, 1)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, len(s.nodes))
	var subs []*goredis.PubSub
	var clients []*goredis.SentinelClient
	for _, n := range s.nodes {
		c := goredis.NewSentinelClient(&goredis.Options{Addr: n.Addr()})
		ps := c.Subscribe(ctx, "+switch-master")
		clients, subs = append(clients, c), append(subs, ps)
		// Each subscription is confirmed before SwitchMaster returns, so no
		// switch after it is missed.
		if _, err := ps.Receive(ctx); err != nil {
			s.tb.Errorf("redisserver: subscribe +switch-master on %s: %v", n.Addr(), err)
		}
	}
	for _, ps := range subs {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				msg, err := ps.ReceiveMessage(ctx)
				if err != nil {
					return
				}
				// "<master name> <old ip> <old port> <new ip> <new port>"
				f := strings.Fields(msg.Payload)
				if len(f) == 5 && f[0] == s.Master {
					select {
					case out <- Switch{Addr: net.JoinHostPort(f[3], f[4]), At: time.Now()}:
					default:
					}
				}
			}
		}()
	}
	return out, func() {
		cancel()
		for _, ps := range subs {
			_ = ps.Close()
		}
		for range subs {
			<-done
		}
		for _, c := range clients {
			_ = c.Close()
		}
	}
}

// Switch is one +switch-master announcement.
type Switch struct {
	Addr string    // the new primary
	At   time.Time // when the first Sentinel announced it
}

// WaitRole polls ROLE on addr every 5ms until it answers role, and returns
// when it first did; it fails the test after timeout.
func WaitRole(tb testing.TB, addr, role string, timeout time.Duration) time.Time {
	tb.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		v, err := c.Do(ctx, "role").Slice()
		cancel()
		if err == nil && len(v) > 0 && v[0] == role {
			return time.Now()
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redisserver: %s not %s within %s (ROLE %v, %v)", addr, role, timeout, v, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
