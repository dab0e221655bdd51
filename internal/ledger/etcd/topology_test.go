package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/etcd"
	"github.com/leasehold/leasehold/internal/ledger/ledgertest"
	"github.com/leasehold/leasehold/internal/testutil/etcdserver"
	"github.com/leasehold/leasehold/internal/testutil/slow"
)

// TestTopologyEtcdConformance runs the conformance suite's groups that
// exercise the store itself (limits, idempotence, lease and session
// expiry, epochs, linearizability of concurrent histories) on a
// three-member etcd cluster whose members are processes, through a client
// of all three. The rest of the suite checks rules that do not depend on
// the topology; its Concurrency group alone takes 70 s here on two cores,
// and TestTopologyEtcdLeaderKill covers concurrent safety under a fault.
func TestTopologyEtcdConformance(t *testing.T) {
	slow.Topologies(t)
	c := etcdserver.StartCluster(t, 3)
	cli := c.Client(t)
	b := backendOn(cli, "etcd (3 members)", "/conformance3")
	b.Groups = []string{"Limits", "Idempotence", "Leases", "Sessions", "Epochs", "Linearizability"}
	ledgertest.Run(t, b)
}

// TestTopologyEtcdLeaderKill runs holders against a three-member etcd
// cluster and SIGKILLs the leader under load, then restarts it. Two
// engines of 6 slots serve 16 holders that acquire one slot, hold it
// briefly and release it, retrying every call whose outcome is unknown
// (the leader died under it) with the same arguments. What the holders
// hold is what the engines would run: at no moment may an engine's
// acknowledged, unreleased leases exceed its slots (over-admission). No
// acknowledged grant may be lost (the leases held at the end are exactly
// those listed) or doubled (one lease per request id, one request per
// lease id, one grant counted per request); totals equal rows; the epoch
// stays (a new leader loses nothing). It logs how long after the kill the
// first grant was acknowledged.
func TestTopologyEtcdLeaderKill(t *testing.T) {
	slow.Topologies(t)
	c := etcdserver.StartCluster(t, 3)
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := etcd.New(cli, etcd.Options{Options: ledger.Options{RecoveryWindow: -1}, Prefix: "/leaderkill/"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const pool, slots = ledger.PoolID("p"), 6
	spec := ledger.PoolSpec{
		Name: pool,
		Engines: []ledger.EngineSpec{
			{ID: "e1", URL: "http://127.0.0.1:1", KVTokens: 1 << 20, Slots: slots},
			{ID: "e2", URL: "http://127.0.0.1:2", KVTokens: 1 << 20, Slots: slots},
		},
		Tenants:    []ledger.TenantSpec{{Name: "t", KVShare: 1}},
		Priorities: []ledger.PrioritySpec{{Name: "std", MaxFill: 1}},
		RetryAfter: 10 * time.Millisecond,
	}
	epoch, err := l.Configure(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu        sync.Mutex
		held      = map[ledger.EngineID]int{} // acknowledged and not yet released
		peak      = map[ledger.EngineID]int{}
		grants    = map[ledger.RequestID]ledger.Lease{}
		byLease   = map[ledger.LeaseID]ledger.RequestID{}
		kept      = map[ledger.LeaseID]ledger.Lease{}
		released  int
		firstPost time.Time // first grant acknowledged after the kill
		killedAt  time.Time
		unknowns  atomic.Int64
	)
	// call runs f until its outcome is known; a rejection is known.
	call := func(what string, f func() error) error {
		for {
			err := f()
			if err == nil || errors.Is(err, ledger.ErrRejected) {
				return err
			}
			if errors.Is(err, ledger.ErrInvalidArgument) || errors.Is(err, ledger.ErrNotHolder) || ctx.Err() != nil {
				t.Errorf("%s: %v", what, err)
				cancel()
				return err
			}
			unknowns.Add(1)
			time.Sleep(5 * time.Millisecond)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 16 {
		holder := ledger.HolderID(fmt.Sprintf("h%d", w))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if call("KeepAlive", func() error { _, err := l.KeepAlive(ctx, pool, holder, time.Minute); return err }) != nil {
				return
			}
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				id := ledger.RequestID(fmt.Sprintf("%s-%d", holder, n))
				r := ledger.AcquireRequest{Pool: pool, Candidates: []ledger.EngineID{"e1", "e2"}, Tenant: "t", Priority: "std",
					KVTokens: 100, Slots: 1, Holder: holder, RequestID: id, TTL: time.Minute}
				var g ledger.Grant
				err := call("Acquire", func() error { var err error; g, err = l.Acquire(ctx, r); return err })
				if errors.Is(err, ledger.ErrRejected) {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if err != nil {
					return
				}
				mu.Lock()
				e := g.Lease.Engine
				held[e]++
				peak[e] = max(peak[e], held[e])
				if prev, ok := byLease[g.Lease.ID]; ok && prev != id {
					t.Errorf("lease %s granted to %s and %s", g.Lease.ID, prev, id)
				}
				byLease[g.Lease.ID] = id
				grants[id] = g.Lease
				if !killedAt.IsZero() && firstPost.IsZero() {
					firstPost = time.Now()
				}
				keep := n%5 == 4 && len(kept) < 4
				if keep {
					kept[g.Lease.ID] = g.Lease
				}
				mu.Unlock()
				if keep {
					continue // held to the end: a slot less for the others
				}
				time.Sleep(time.Duration(2+n%8) * time.Millisecond)
				mu.Lock()
				held[e]-- // the holder stops using it before it asks to release
				mu.Unlock()
				if call("Release", func() error { _, err := l.Release(ctx, g.Lease.Ref(), ledger.Usage{}); return err }) != nil {
					return
				}
				mu.Lock()
				released++
				mu.Unlock()
			}
		}()
	}

	time.Sleep(time.Second)
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	killedAt = time.Now()
	before := len(grants)
	mu.Unlock()
	c.Kill(leader)
	time.Sleep(3 * time.Second)
	c.Restart(leader)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	if firstPost.IsZero() {
		t.Fatalf("no grant after the leader's kill (%d before it)", before)
	}
	t.Logf("leader (member %d) SIGKILLed after %d grants; first grant acknowledged %s after the kill; %d grants in all, %d calls retried after an unknown outcome; peak slots held %v of %d",
		leader, before, firstPost.Sub(killedAt).Round(time.Millisecond), len(grants), unknowns.Load(), peak, slots)
	for e, p := range peak {
		if p > slots {
			t.Errorf("engine %s: %d leases held at once, over its %d slots", e, p, slots)
		}
	}
	ls, err := l.List(ctx, ledger.Filter{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	listed := map[ledger.LeaseID]bool{}
	for _, x := range ls {
		listed[x.ID] = true
		if w, ok := kept[x.ID]; !ok {
			t.Errorf("lease %s (%s) listed at the end, not held by any holder", x.ID, x.RequestID)
		} else if w.Fence != x.Fence || w.Holder != x.Holder || w.Engine != x.Engine {
			t.Errorf("lease %s listed as %+v, granted as %+v", x.ID, x, w)
		}
	}
	for id := range kept {
		if !listed[id] {
			t.Errorf("acknowledged lease %s (%s) lost: held, not listed", id, kept[id].RequestID)
		}
	}
	st, err := l.Stats(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if g, r := st.Counters[ledger.CounterGrants], st.Counters[ledger.CounterReleases]; g != int64(len(grants)) || r != int64(released) {
		t.Errorf("the ledger counted %d grants and %d releases, want %d (one per request) and %d", g, r, len(grants), released)
	}
	if st.Epoch != epoch {
		t.Errorf("epoch %d after the leader's kill, want %d", st.Epoch, epoch)
	}
	if ms, err := ledger.CheckTotals(ctx, l, pool); err != nil || len(ms) != 0 {
		t.Errorf("CheckTotals = %v, %v; want equal", ms, err)
	}
}
