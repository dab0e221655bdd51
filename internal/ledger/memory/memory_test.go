package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/leasehold/leasehold/internal/ledger"
)

func TestSchema(t *testing.T) {
	if err := newSchema().Validate(); err != nil {
		t.Fatalf("schema: %v", err)
	}
	if _, err := memdb.NewMemDB(newSchema()); err != nil {
		t.Fatalf("NewMemDB: %v", err)
	}
}

func TestListOrderAndFilters(t *testing.T) {
	f := newFixture(t, ledger.Options{})
	spec := testSpec()
	spec.Engines[0].Slots, spec.Engines[1].Slots = 100, 100
	if _, err := f.l.Configure(f.ctx, spec); err != nil {
		t.Fatal(err)
	}
	other := spec
	other.Name = testPool + "-b" // sorts after testPool, shares its prefix
	if _, err := f.l.Configure(f.ctx, other); err != nil {
		t.Fatal(err)
	}
	f.keepAlive("r1", time.Hour)
	f.keepAlive("r2", time.Hour)
	if _, err := f.l.KeepAlive(f.ctx, other.Name, "r1", time.Hour); err != nil {
		t.Fatal(err)
	}
	// 20 grants: sequences 0x1..0x14, whose ids do not sort as strings.
	var want []ledger.LeaseID
	for i := range 20 {
		h := ledger.HolderID("r1")
		if i%2 == 1 {
			h = "r2"
		}
		r := f.request(h, ledger.RequestID(fmt.Sprint("q", i)), 1, time.Hour)
		r.Candidates = []ledger.EngineID{ledger.EngineID(fmt.Sprint("e", i%2))}
		g, err := f.l.Acquire(f.ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, g.Lease.ID)
	}
	r := f.request("r1", "q-other", 1, time.Hour)
	r.Pool = other.Name
	g, err := f.l.Acquire(f.ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	otherID := g.Lease.ID

	every := func(step, from int) []ledger.LeaseID {
		var out []ledger.LeaseID
		for i := from; i < len(want); i += step {
			out = append(out, want[i])
		}
		return out
	}
	tests := []struct {
		name string
		f    ledger.Filter
		want []ledger.LeaseID
	}{
		{"all", ledger.Filter{}, append(slices.Clone(want), otherID)},
		{"pool", ledger.Filter{Pool: testPool}, want},
		{"prefix pool", ledger.Filter{Pool: "llam"}, nil},
		{"holder", ledger.Filter{Pool: testPool, Holder: "r2"}, every(2, 1)},
		{"holder in all pools", ledger.Filter{Holder: "r1"}, append(every(2, 0), otherID)},
		{"engine", ledger.Filter{Pool: testPool, Engine: "e0"}, every(2, 0)},
		{"engine and holder", ledger.Filter{Pool: testPool, Engine: "e0", Holder: "r2"}, nil},
		{"tenant", ledger.Filter{Tenant: testTenant, Limit: 3}, want[:3]},
		{"limit", ledger.Filter{Limit: 21}, append(slices.Clone(want), otherID)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ls, err := f.l.List(f.ctx, tt.f)
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			var got []ledger.LeaseID
			for _, l := range ls {
				got = append(got, l.ID)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("List(%+v) = %v, want %v", tt.f, got, tt.want)
			}
		})
	}
	pools, err := f.l.Pools(f.ctx)
	if err != nil || !slices.Equal(pools, []ledger.PoolID{testPool, other.Name}) {
		t.Errorf("Pools = %v, %v", pools, err)
	}
}

func TestConfigureRemovesAndRestores(t *testing.T) {
	f := newFixture(t, ledger.Options{})
	f.keepAlive("r1", time.Hour)
	a := f.acquire("r1", "a", 100, time.Hour)
	if err := f.l.SetDraining(f.ctx, testPool, "e0", true); err != nil {
		t.Fatal(err)
	}
	spec := testSpec()
	spec.Engines = spec.Engines[1:]       // drop e0, which has a lease
	spec.Tenants = spec.Tenants[1:]       // drop acme, which has a lease
	spec.Priorities = spec.Priorities[1:] // drop standard
	spec.Engines = append(spec.Engines, ledger.EngineSpec{ID: "e2", KVTokens: 5, Slots: 1})
	if ep, err := f.l.Configure(f.ctx, spec); err != nil || ep != f.epoch {
		t.Fatalf("Configure = %d, %v; want epoch %d kept", ep, err, f.epoch)
	}
	st := f.stats()
	if len(st.Engines) != 3 || !st.Engines[0].Removed || st.Engines[0].Leases != 1 || st.CapacityKV != 1005 {
		t.Fatalf("after removing e0: engines %+v, capacity %d", st.Engines, st.CapacityKV)
	}
	for _, tt := range []struct {
		name string
		mod  func(*ledger.AcquireRequest)
		want error
	}{
		{"removed engine", func(r *ledger.AcquireRequest) { r.Tenant = "small"; r.Priority = "batch" }, ledger.ErrUnknownEngine},
		{"removed tenant", func(r *ledger.AcquireRequest) { r.Candidates = []ledger.EngineID{"e1"}; r.Priority = "batch" }, ledger.ErrUnknownTenant},
		{"removed priority", func(r *ledger.AcquireRequest) { r.Candidates = []ledger.EngineID{"e1"}; r.Tenant = "small" }, ledger.ErrUnknownPriority},
	} {
		r := f.request("r1", "new", 1, time.Second)
		tt.mod(&r)
		_, err := f.l.Acquire(f.ctx, r)
		wantErr(t, tt.name, err, tt.want)
	}
	// The lease still works: renew, shrink; growth needs its engine.
	if _, err := f.l.Renew(f.ctx, a.Ref(), time.Hour); err != nil {
		t.Fatalf("Renew on a removed engine: %v", err)
	}
	if _, err := f.l.Resize(f.ctx, a.Ref(), 50); err != nil {
		t.Fatalf("shrink on a removed engine: %v", err)
	}
	_, err := f.l.Resize(f.ctx, a.Ref(), 60)
	wantErr(t, "grow on a removed engine", err, ledger.ErrUnknownEngine)

	// Restoring the spec un-removes e0 with its drain flag and lease.
	if _, err := f.l.Configure(f.ctx, testSpec()); err != nil {
		t.Fatal(err)
	}
	e := f.engine("e0")
	if e.Removed || !e.Draining || e.ReservedKV != 50 || e.Leases != 1 {
		t.Fatalf("e0 after restoring = %+v", e)
	}
	if st := f.stats(); len(st.Engines) != 2 {
		t.Fatalf("e2 without leases should be gone: %+v", st.Engines)
	}

	// Dropped again and released: the removed rows go with the last lease.
	if _, err := f.l.Configure(f.ctx, spec); err != nil {
		t.Fatal(err)
	}
	if r, err := f.l.Release(f.ctx, a.Ref(), ledger.Usage{}); err != nil || !r.Released {
		t.Fatalf("Release = %+v, %v", r, err)
	}
	st = f.stats()
	if len(st.Engines) != 2 || len(st.Tenants) != 1 || st.Leases != 0 {
		t.Fatalf("after the last lease: engines %+v tenants %+v", st.Engines, st.Tenants)
	}
}

func TestBadArgumentsChangeNothing(t *testing.T) {
	f := newFixture(t, ledger.Options{})
	f.keepAlive("r1", time.Hour)
	a := f.acquire("r1", "a", 10, time.Hour)
	before := f.stats()
	bad := a.Ref()
	bad.ID = "not-a-lease-id"
	calls := map[string]func() error{
		"Configure":   func() error { _, err := f.l.Configure(f.ctx, ledger.PoolSpec{Name: testPool}); return err },
		"SetDraining": func() error { return f.l.SetDraining(f.ctx, testPool, "", true) },
		"KeepAlive":   func() error { _, err := f.l.KeepAlive(f.ctx, testPool, "r1", 0); return err },
		"Acquire":     func() error { _, err := f.l.Acquire(f.ctx, f.request("r1", "b", 0, time.Second)); return err },
		"Renew":       func() error { _, err := f.l.Renew(f.ctx, bad, time.Second); return err },
		"Resize":      func() error { _, err := f.l.Resize(f.ctx, a.Ref(), -1); return err },
		"Release": func() error {
			_, err := f.l.Release(f.ctx, a.Ref(), ledger.Usage{PromptTokens: -1})
			return err
		},
		"Reassert": func() error { _, err := f.l.Reassert(f.ctx, a, time.Duration(0)); return err },
		"Observe": func() error {
			_, err := f.l.Observe(f.ctx, ledger.Observation{Pool: testPool, Engine: "e0"})
			return err
		},
		"Sweep": func() error { _, err := f.l.Sweep(f.ctx, testPool, -1); return err },
		"List":  func() error { _, err := f.l.List(f.ctx, ledger.Filter{Pool: "a b"}); return err },
		"Stats": func() error { _, err := f.l.Stats(f.ctx, ""); return err },
	}
	for name, call := range calls {
		f.clock.Advance(2 * time.Hour) // anything not refused would sweep a
		wantErr(t, name, call(), ledger.ErrInvalidArgument)
		f.clock.Advance(-2 * time.Hour)
	}
	after := f.stats()
	if after.Leases != before.Leases || !maps2Equal(after.Counters, before.Counters) {
		t.Fatalf("bad arguments changed the pool: %+v -> %+v", before, after)
	}
}

func maps2Equal(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestClosed(t *testing.T) {
	f := newFixture(t, ledger.Options{})
	if err := f.l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, err := f.l.KeepAlive(f.ctx, testPool, "r1", time.Second)
	wantErr(t, "KeepAlive", err, ledger.ErrClosed)
	_, err = f.l.Configure(f.ctx, testSpec())
	wantErr(t, "Configure", err, ledger.ErrClosed)
	_, err = f.l.Pools(f.ctx)
	wantErr(t, "Pools", err, ledger.ErrClosed)
	_, err = f.l.List(f.ctx, ledger.Filter{})
	wantErr(t, "List", err, ledger.ErrClosed)
}

func TestCancelledContext(t *testing.T) {
	f := newFixture(t, ledger.Options{})
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	_, err := f.l.KeepAlive(ctx, testPool, "r1", time.Second)
	wantErr(t, "KeepAlive", err, context.Canceled)
	if s := f.stats(); s.LiveHolders != 0 {
		t.Fatalf("a cancelled KeepAlive started a session")
	}
}

// TestConcurrentNoOverAdmission hammers one engine from many goroutines and
// checks after every grant that reservations never exceed capacity.
func TestConcurrentNoOverAdmission(t *testing.T) {
	l := New(ledger.Options{RecoveryWindow: -1, SweepBatch: 4}, nil)
	defer l.Close()
	ctx := context.Background()
	spec := testSpec()
	spec.Engines = spec.Engines[:1]
	spec.Engines[0].KVTokens, spec.Engines[0].Slots = 100, 1000
	if _, err := l.Configure(ctx, spec); err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 8, 200
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := ledger.HolderID(fmt.Sprint("w", w))
			if _, err := l.KeepAlive(ctx, testPool, h, time.Minute); err != nil {
				errc <- err
				return
			}
			for i := range rounds {
				g, err := l.Acquire(ctx, ledger.AcquireRequest{
					Pool: testPool, Candidates: []ledger.EngineID{"e0"}, Tenant: testTenant, Priority: testPrio,
					KVTokens: int64(1 + (w+i)%30), Slots: 1, Holder: h, RequestID: ledger.RequestID(fmt.Sprint(i)),
					TTL: time.Duration(1+i%5) * time.Millisecond,
				})
				if errors.Is(err, ledger.ErrRejected) {
					continue
				}
				if err != nil {
					errc <- err
					return
				}
				st, err := l.Stats(ctx, testPool)
				if err != nil {
					errc <- err
					return
				}
				if kv := st.Engines[0].ReservedKV; kv > 100 {
					errc <- fmt.Errorf("reserved %d KV tokens of 100", kv)
					return
				}
				if i%3 == 0 {
					if _, err := l.Release(ctx, g.Lease.Ref(), ledger.Usage{}); err != nil {
						errc <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}
