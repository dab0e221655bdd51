package redisserver

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// slots is the number of Redis Cluster hash slots.
const slots = 16384

// Cluster is a Redis Cluster of masters (and optional replicas), each a
// redis-server with cluster mode on, on free loopback ports, killed when
// the test ends.
type Cluster struct {
	tb       testing.TB
	Masters  []*Server
	Replicas []*Server
	ids      map[*Server]string // node id by server

	mu      sync.Mutex // guards clients
	clients map[*Server]*goredis.Client
}

// StartShardedCluster starts masters nodes, gives node i the i-th equal
// range of the 16384 hash slots, joins them (CLUSTER MEET) and waits until
// every node reports cluster_state:ok and knows every other.
func StartShardedCluster(tb testing.TB, masters int) *Cluster {
	tb.Helper()
	ctx := context.Background()
	c := &Cluster{tb: tb, ids: map[*Server]string{}, clients: map[*Server]*goredis.Client{}}
	for i := range masters {
		s := startClusterNode(tb)
		c.Masters = append(c.Masters, s)
		c.ids[s] = c.nodeID(s)
		lo, hi := i*slots/masters, (i+1)*slots/masters-1
		c.do(s, "cluster", "addslotsrange", lo, hi)
	}
	for _, s := range c.Masters[1:] {
		c.do(s, "cluster", "meet", "127.0.0.1", c.Masters[0].port)
	}
	c.waitConsistent(ctx)
	return c
}

func startClusterNode(tb testing.TB) *Server {
	tb.Helper()
	return start(tb, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "2000", "--repl-diskless-sync-delay", "0")
}

// AddReplica starts a node replicating master i and waits until the
// primary reports it online (so WAIT counts it).
func (c *Cluster) AddReplica(i int) *Server {
	c.tb.Helper()
	m := c.Masters[i]
	r := startClusterNode(c.tb)
	c.ids[r] = c.nodeID(r)
	c.Replicas = append(c.Replicas, r)
	c.do(r, "cluster", "meet", "127.0.0.1", m.port)
	deadline := time.Now().Add(startTimeout)
	// The replica must know the master before it can replicate it.
	for {
		err := c.client(r).Do(context.Background(), "cluster", "replicate", c.ids[m]).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("redisserver: CLUSTER REPLICATE %s on %s: %v", m.Addr(), r.Addr(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mc := c.client(m)
	for {
		info, err := mc.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "port="+strconv.Itoa(r.port)+",state=online") {
			break
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("redisserver: replica %s of %s not online within %s: %v\n%s", r.Addr(), m.Addr(), startTimeout, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.waitConsistent(context.Background())
	return r
}

// waitConsistent waits until every node reports cluster_state:ok, knows
// every node, and maps every slot to the same master as the others.
func (c *Cluster) waitConsistent(ctx context.Context) {
	c.tb.Helper()
	all := append(append([]*Server{}, c.Masters...), c.Replicas...)
	deadline := time.Now().Add(3 * startTimeout)
	for {
		ok, why := true, ""
		var first string
		for _, s := range all {
			info, err := c.client(s).ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") ||
				!strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(all))+"\r") {
				ok, why = false, fmt.Sprintf("%s: %v %s", s.Addr(), err, info)
				break
			}
			m, err := c.slotMap(ctx, s)
			if err != nil {
				ok, why = false, fmt.Sprintf("%s: CLUSTER SLOTS: %v", s.Addr(), err)
				break
			}
			if first == "" {
				first = m
			} else if m != first {
				ok, why = false, fmt.Sprintf("%s maps slots as %s, another node as %s", s.Addr(), m, first)
				break
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("redisserver: cluster not consistent within %s: %s", 3*startTimeout, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// slotMap renders s's view of which master port serves which slot range.
func (c *Cluster) slotMap(ctx context.Context, s *Server) (string, error) {
	ranges, err := c.client(s).ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	parts := make([]string, 0, len(ranges))
	for _, r := range ranges {
		if len(r.Nodes) == 0 {
			return "", fmt.Errorf("slots %d-%d have no node", r.Start, r.End)
		}
		parts = append(parts, fmt.Sprintf("%d-%d:%s", r.Start, r.End, r.Nodes[0].Addr))
	}
	// CLUSTER SLOTS lists ranges in no fixed order.
	slices.Sort(parts)
	return strings.Join(parts, ","), nil
}

// client returns the cluster's plain client of node s (one per node,
// closed at cleanup).
func (c *Cluster) client(s *Server) *goredis.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.clients[s]; ok {
		return cl
	}
	cl := s.Client()
	c.clients[s] = cl
	return cl
}

func (c *Cluster) do(s *Server, args ...any) {
	c.tb.Helper()
	if err := c.client(s).Do(context.Background(), args...).Err(); err != nil {
		c.tb.Fatalf("redisserver: %s: %v: %v", s.Addr(), args, err)
	}
}

func (c *Cluster) nodeID(s *Server) string {
	c.tb.Helper()
	id, err := c.client(s).Do(context.Background(), "cluster", "myid").Text()
	if err != nil {
		c.tb.Fatalf("redisserver: %s: CLUSTER MYID: %v", s.Addr(), err)
	}
	return id
}

// Addrs are the masters' host:port addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Masters))
	for i, s := range c.Masters {
		out[i] = s.Addr()
	}
	return out
}

// URL is the ledger URL: redis+cluster://host:port,host:port,...
func (c *Cluster) URL() string { return "redis+cluster://" + strings.Join(c.Addrs(), ",") }

// Client returns a cluster client seeded with every master, closed at
// cleanup.
func (c *Cluster) Client() *goredis.ClusterClient {
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs()})
	c.tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// MasterOf returns the index in Masters of the node serving slot, as that
// node's own CLUSTER SLOTS says.
func (c *Cluster) MasterOf(ctx context.Context, slot int) (int, error) {
	ranges, err := c.client(c.Masters[0]).ClusterSlots(ctx).Result()
	if err != nil {
		return -1, err
	}
	for _, r := range ranges {
		if slot >= r.Start && slot <= r.End && len(r.Nodes) > 0 {
			for i, s := range c.Masters {
				if s.Addr() == r.Nodes[0].Addr {
					return i, nil
				}
			}
		}
	}
	return -1, fmt.Errorf("slot %d: no master serves it", slot)
}

// Migration reports a MigrateSlot's progress.
type Migration struct {
	Keys    int           // keys moved
	Elapsed time.Duration // from IMPORTING to the slot's new owner set everywhere
}

// MigrateSlot moves slot from its master to Masters[to] as redis-cli
// --cluster reshard does: CLUSTER SETSLOT IMPORTING on the target,
// MIGRATING on the source, MIGRATE of every key (one at a time, pause
// after each, so that clients meet the slot mid-move), then SETSLOT NODE
// on the target, the source and every other master.
func (c *Cluster) MigrateSlot(ctx context.Context, slot, to int, pause time.Duration) (Migration, error) {
	from, err := c.MasterOf(ctx, slot)
	if err != nil {
		return Migration{}, err
	}
	if from == to {
		return Migration{}, fmt.Errorf("slot %d is on master %d already", slot, to)
	}
	src, dst := c.Masters[from], c.Masters[to]
	sc, dc := c.client(src), c.client(dst)
	start := time.Now()
	if err := dc.Do(ctx, "cluster", "setslot", slot, "importing", c.ids[src]).Err(); err != nil {
		return Migration{}, fmt.Errorf("SETSLOT %d IMPORTING on %s: %w", slot, dst.Addr(), err)
	}
	if err := sc.Do(ctx, "cluster", "setslot", slot, "migrating", c.ids[dst]).Err(); err != nil {
		return Migration{}, fmt.Errorf("SETSLOT %d MIGRATING on %s: %w", slot, src.Addr(), err)
	}
	var m Migration
	for {
		keys, err := sc.ClusterGetKeysInSlot(ctx, slot, 1).Result()
		if err != nil {
			return m, fmt.Errorf("GETKEYSINSLOT %d on %s: %w", slot, src.Addr(), err)
		}
		if len(keys) == 0 {
			break
		}
		if err := sc.Migrate(ctx, "127.0.0.1", strconv.Itoa(dst.port), keys[0], 0, 5*time.Second).Err(); err != nil {
			return m, fmt.Errorf("MIGRATE %q to %s: %w", keys[0], dst.Addr(), err)
		}
		m.Keys++
		if pause > 0 {
			select {
			case <-ctx.Done():
				return m, ctx.Err()
			case <-time.After(pause):
			}
		}
	}
	// The target first, so that it answers for the slot before the source
	// starts redirecting there (as redis-cli does).
	for _, s := range append([]*Server{dst, src}, c.others(src, dst)...) {
		if err := c.client(s).Do(ctx, "cluster", "setslot", slot, "node", c.ids[dst]).Err(); err != nil {
			return m, fmt.Errorf("SETSLOT %d NODE on %s: %w", slot, s.Addr(), err)
		}
	}
	m.Elapsed = time.Since(start)
	return m, nil
}

// others are the masters other than a and b.
func (c *Cluster) others(a, b *Server) []*Server {
	var out []*Server
	for _, s := range c.Masters {
		if s != a && s != b {
			out = append(out, s)
		}
	}
	return out
}
