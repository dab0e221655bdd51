package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/ledger"
	lhredis "github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
	"github.com/leasehold/leasehold/internal/testutil/slow"
)

// TestTopologyClusterConformance runs the conformance suite on a real
// three-master Redis Cluster with a replica per master, once with the
// suite's pool on each master (its slot moved there between passes), the
// second pass with every change acknowledged by the master's replica
// (wait_replicas=1: the script and WAIT go to the slot's master).
func TestTopologyClusterConformance(t *testing.T) {
	slow.Topologies(t)
	c := redisserver.StartShardedCluster(t, 3)
	for i := range c.Masters {
		c.AddReplica(i)
	}
	cc := c.Client()
	ctx := context.Background()
	// The suite names its pool "p": every ledger's keys share the {p} tag.
	slot := int(cc.ClusterKeySlot(ctx, "x:{p}:state").Val())
	for i := range c.Masters {
		wait := 0
		if i == 1 {
			wait = 1
		}
		if at, err := c.MasterOf(ctx, slot); err != nil {
			t.Fatal(err)
		} else if at != i {
			// The previous pass deleted its keys: the slot moves empty.
			if _, err := c.MigrateSlot(ctx, slot, i, 0); err != nil {
				t.Fatalf("move slot %d to master %d: %v", slot, i, err)
			}
			cc.ReloadState(ctx)
		}
		t.Run(fmt.Sprintf("master-%d/wait_replicas=%d", i, wait), func(t *testing.T) {
			var mu sync.Mutex
			var prefixes []string
			lose := func(ctx context.Context, p string) {
				deleteClusterKeys(t, ctx, cc, p)
				mu.Lock()
				prefixes = append(prefixes, p)
				mu.Unlock()
			}
			conformanceOn(t, "redis+cluster", cc, wait, lose)
			// Every ledger of the pass used a fresh prefix "t<n>".
			deleteClusterKeys(t, ctx, cc, "t")
		})
	}
}

// deleteClusterKeys deletes every key under prefix on every master.
func deleteClusterKeys(t testing.TB, ctx context.Context, cc *goredis.ClusterClient, prefix string) {
	t.Helper()
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	})
	if err != nil {
		t.Fatalf("delete keys %s*: %v", prefix, err)
	}
}

// retried is an error the cluster client hands back while a slot moves
// (MOVED, ASK, TRYAGAIN after its own redirects are spent) or a connection
// fails: the outcome is unknown, and the call is retried with the same
// arguments, which every ledger call allows.
func retried(err error) bool {
	var re goredis.Error
	return err != nil && !errors.Is(err, ledger.ErrRejected) && (errors.As(err, &re) || errors.Is(err, context.DeadlineExceeded))
}

// TestTopologyClusterMigrateUnderLoad spreads six pools over a
// three-master cluster (two on each) and runs closed-loop Acquire and
// Release on every pool from four holders each while two pools' slots are
// migrated to another master key by key (MIGRATE, with a pause between
// keys, so calls meet the slot half moved: ASK, TRYAGAIN, then MOVED).
// Every call whose outcome is unknown is retried with its arguments. No
// grant may be lost or doubled: each request id has exactly one lease,
// every lease id one request; the leases still held at the end are exactly
// the ones each pool lists; the pool counted one grant per request id and
// one release per released lease; totals equal rows; the epoch did not
// move (a migration loses nothing). Once with asynchronous replication,
// once with wait_replicas=1 (a replica per master; the ledger follows
// MOVED and ASK itself there).
func TestTopologyClusterMigrateUnderLoad(t *testing.T) {
	slow.Topologies(t)
	for _, wait := range []int{0, 1} {
		t.Run(fmt.Sprintf("wait_replicas=%d", wait), func(t *testing.T) { migrateUnderLoad(t, wait) })
	}
}

func migrateUnderLoad(t *testing.T, wait int) {
	c := redisserver.StartShardedCluster(t, 3)
	if wait > 0 {
		for i := range c.Masters {
			c.AddReplica(i)
		}
	}
	cc := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := newPrefix()
	l := lhredis.New(cc, lhredis.Options{Options: noWindow, Prefix: prefix, WaitReplicas: wait, WaitTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = l.Close() })

	// Two pools on each master.
	var pools []ledger.PoolID
	onMaster := map[ledger.PoolID]int{}
	per := map[int]int{}
	for i := 0; len(pools) < 6; i++ {
		p := ledger.PoolID(fmt.Sprintf("pool-%d", i))
		slot := int(cc.ClusterKeySlot(ctx, prefix+":{"+string(p)+"}:state").Val())
		m, err := c.MasterOf(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		if per[m] < 2 {
			per[m]++
			pools = append(pools, p)
			onMaster[p] = m
		}
	}
	epochs := map[ledger.PoolID]ledger.Epoch{}
	for _, p := range pools {
		spec := basicSpec()
		spec.Name = p
		for i := range spec.Engines {
			spec.Engines[i].KVTokens, spec.Engines[i].Slots = 1<<30, 1<<20
		}
		epochs[p] = mustConfigure(t, l, spec)
	}

	type grant struct {
		lease    ledger.Lease
		released bool
	}
	var (
		mu       sync.Mutex
		grants   = map[ledger.PoolID]map[ledger.RequestID]*grant{}
		byLease  = map[ledger.LeaseID]ledger.RequestID{}
		doubled  []string
		kinds    = map[string]int{} // retried errors by their first word
		unknowns atomic.Int64
		calls    atomic.Int64
	)
	for _, p := range pools {
		grants[p] = map[ledger.RequestID]*grant{}
	}
	// call runs f until its outcome is known.
	call := func(what string, f func() error) {
		for {
			calls.Add(1)
			err := f()
			if err == nil {
				return
			}
			if !retried(err) || ctx.Err() != nil {
				t.Errorf("%s: %v", what, err)
				cancel()
				return
			}
			unknowns.Add(1)
			mu.Lock()
			kinds[firstWord(err)]++
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range pools {
		for w := range 4 {
			holder := ledger.HolderID(fmt.Sprintf("h%d", w))
			wg.Add(1)
			go func() {
				defer wg.Done()
				call("KeepAlive", func() error { _, err := l.KeepAlive(ctx, p, holder, time.Hour); return err })
				for n := 0; ctx.Err() == nil; n++ {
					select {
					case <-stop:
						return
					default:
					}
					id := ledger.RequestID(fmt.Sprintf("%s-%d", holder, n))
					r := req(string(holder), string(id), 100, 1)
					r.Pool = p
					var g ledger.Grant
					call("Acquire", func() error { var err error; g, err = l.Acquire(ctx, r); return err })
					if ctx.Err() != nil {
						return
					}
					mu.Lock()
					if prev, ok := byLease[g.Lease.ID]; ok && prev != id {
						doubled = append(doubled, fmt.Sprintf("lease %s granted to %s and %s", g.Lease.ID, prev, id))
					}
					byLease[g.Lease.ID] = id
					grants[p][id] = &grant{lease: g.Lease}
					mu.Unlock()
					if n%4 == 3 {
						continue // held to the end
					}
					call("Release", func() error { _, err := l.Release(ctx, g.Lease.Ref(), ledger.Usage{}); return err })
					mu.Lock()
					grants[p][id].released = true
					mu.Unlock()
				}
			}()
		}
	}

	// Move one pool of master 0 to master 1, then one of master 2 to
	// master 0, while the load runs.
	time.Sleep(time.Second)
	var moved []ledger.PoolID
	for _, mv := range []struct{ from, to int }{{0, 1}, {2, 0}} {
		var p ledger.PoolID
		for _, q := range pools {
			if onMaster[q] == mv.from {
				p = q
				break
			}
		}
		slot := int(cc.ClusterKeySlot(ctx, prefix+":{"+string(p)+"}:state").Val())
		before := calls.Load()
		m, err := c.MigrateSlot(ctx, slot, mv.to, 20*time.Millisecond)
		if err != nil {
			t.Fatalf("migrate %s's slot %d from master %d to %d: %v", p, slot, mv.from, mv.to, err)
		}
		t.Logf("%s (slot %d) moved from master %d to %d: %d keys in %s, %d calls meanwhile",
			p, slot, mv.from, mv.to, m.Keys, m.Elapsed.Round(time.Millisecond), calls.Load()-before)
		if m.Keys < 5 {
			t.Errorf("%s's slot held %d keys, want its pool's (state, sets, leases...)", p, m.Keys)
		}
		moved = append(moved, p)
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("%d calls, %d retried after an unknown outcome: %v", calls.Load(), unknowns.Load(), kinds)
	if unknowns.Load() == 0 {
		t.Error("no call met a slot in motion: the migrations did not overlap the load")
	}
	for _, d := range doubled {
		t.Error(d)
	}

	for _, p := range pools {
		want := map[ledger.LeaseID]ledger.Lease{}
		released := 0
		for _, g := range grants[p] {
			if g.released {
				released++
			} else {
				want[g.lease.ID] = g.lease
			}
		}
		ls, err := l.List(ctx, ledger.Filter{Pool: p})
		if err != nil {
			t.Fatalf("List %s: %v", p, err)
		}
		for _, x := range ls {
			w, ok := want[x.ID]
			switch {
			case !ok:
				t.Errorf("%s lists lease %s (%s), which no request holds", p, x.ID, x.RequestID)
			case x.Holder != w.Holder || x.RequestID != w.RequestID || x.Engine != w.Engine || x.KVTokens != w.KVTokens || x.Fence != w.Fence:
				t.Errorf("%s lists %+v, granted as %+v", p, x, w)
			}
			delete(want, x.ID)
		}
		for id := range want {
			t.Errorf("%s lost lease %s (%s): granted and held, not listed", p, id, want[id].RequestID)
		}
		st, err := l.Stats(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if g, r := st.Counters[ledger.CounterGrants], st.Counters[ledger.CounterReleases]; g != int64(len(grants[p])) || r != int64(released) {
			t.Errorf("%s counted %d grants and %d releases, want %d (one per request) and %d", p, g, r, len(grants[p]), released)
		}
		if st.Epoch != epochs[p] || st.Counters[ledger.CounterFailovers] != 0 {
			t.Errorf("%s: epoch %d, failovers %d after the load; want epoch %d (nothing lost), 0", p, st.Epoch, st.Counters[ledger.CounterFailovers], epochs[p])
		}
		ms, err := ledger.CheckTotals(ctx, l, p)
		if err != nil || len(ms) != 0 {
			t.Errorf("%s: CheckTotals = %v, %v; want equal", p, ms, err)
		}
		t.Logf("%s (master %d): %d grants, %d held at the end", p, onMaster[p], len(grants[p]), len(grants[p])-released)
	}
	for _, p := range moved {
		if len(grants[p]) == 0 {
			t.Errorf("moved pool %s had no grants", p)
		}
	}
}

// firstWord is the Redis error's code (MOVED, ASK, TRYAGAIN...), or the
// error's first word.
func firstWord(err error) string {
	var re goredis.Error
	msg := err.Error()
	if errors.As(err, &re) {
		msg = re.Error()
	}
	if i := strings.IndexByte(msg, ' '); i > 0 {
		return msg[:i]
	}
	return msg
}
