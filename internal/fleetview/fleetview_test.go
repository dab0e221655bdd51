package fleetview_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/fleetview"
	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const every = 250 * time.Millisecond

// fixture is a View on the fake clock polling pools of a memory ledger,
// with pool "p" configured (two engines) and a session of holder "other".
type fixture struct {
	t      *testing.T
	l      *memory.Ledger
	clock  *clockwork.FakeClock
	v      *fleetview.View
	pools  []ledger.PoolID
	counts chan [2]string // pool, result
	freed  chan ledger.PoolID
	n      int // requests acquired
}

func newFixture(t *testing.T, pools ...ledger.PoolID) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{t: t, l: memory.New(ledger.Options{RecoveryWindow: -1}, nil), clock: clockwork.NewFakeClock(), pools: pools,
		counts: make(chan [2]string, 64), freed: make(chan ledger.PoolID, 64)}
	t.Cleanup(func() { f.l.Close() })
	if _, err := f.l.Configure(ctx, ledger.PoolSpec{
		Name:       "p",
		Engines:    []ledger.EngineSpec{{ID: "gpu-0", KVTokens: 1000, Slots: 4}, {ID: "gpu-1", KVTokens: 1000, Slots: 4}},
		Tenants:    []ledger.TenantSpec{{Name: "acme", KVShare: 1}},
		Priorities: []ledger.PrioritySpec{{Name: "interactive", MaxFill: 1}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.l.KeepAlive(ctx, "p", "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	f.v = fleetview.New(fleetview.Config{Ledger: f.l, Pools: pools, Every: every, Clock: f.clock, Log: slog.New(slog.DiscardHandler),
		OnFreed: func(pool ledger.PoolID) { f.freed <- pool },
		Counted: func(pool ledger.PoolID, result string) { f.counts <- [2]string{string(pool), result} }})
	f.v.Start()
	t.Cleanup(f.v.Stop)
	bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := f.clock.BlockUntilContext(bctx, 1); err != nil { // the poll ticker
		t.Fatal(err)
	}
	return f
}

// round advances the clock one interval and returns each pool's poll result.
func (f *fixture) round() map[string]string {
	f.t.Helper()
	f.clock.Advance(every)
	got := map[string]string{}
	for range f.pools {
		select {
		case c := <-f.counts:
			got[c[0]] = c[1]
		case <-time.After(5 * time.Second):
			f.t.Fatalf("no poll result within 5s; have %v", got)
		}
	}
	return got
}

// acquire takes a lease of other's on engine.
func (f *fixture) acquire(engine ledger.EngineID, kv int64) ledger.Lease {
	f.t.Helper()
	f.n++
	g, err := f.l.Acquire(context.Background(), ledger.AcquireRequest{Pool: "p", Candidates: []ledger.EngineID{engine},
		Tenant: "acme", Priority: "interactive", KVTokens: kv, Slots: 1, Holder: "other",
		RequestID: ledger.RequestID(fmt.Sprintf("req-%d", f.n)), TTL: time.Minute})
	if err != nil {
		f.t.Fatal(err)
	}
	return g.Lease
}

// The view reports what the ledger has reserved per engine, whoever holds
// it, as of its last poll; a poll that finds less reserved than the one
// before calls OnFreed.
func TestViewReportsLedgerReservations(t *testing.T) {
	f := newFixture(t, "p")
	if got := f.v.Engines("p"); got != nil {
		t.Errorf("before the first poll: Engines = %v, want nil", got)
	}
	a := f.acquire("gpu-0", 300)

	steps := []struct {
		name   string
		change func()
		result string
		want   map[ledger.EngineID]lease.Reserved
	}{
		{name: "first poll", result: "ok",
			want: map[ledger.EngineID]lease.Reserved{"gpu-0": {KVTokens: 300, Slots: 1, Leases: 1}, "gpu-1": {}}},
		{name: "another router acquires", change: func() { f.acquire("gpu-1", 200); f.acquire("gpu-1", 100) }, result: "ok",
			want: map[ledger.EngineID]lease.Reserved{"gpu-0": {KVTokens: 300, Slots: 1, Leases: 1}, "gpu-1": {KVTokens: 300, Slots: 2, Leases: 2}}},
		{name: "another router releases", change: func() {
			if _, err := f.l.Release(context.Background(), a.Ref(), ledger.Usage{}); err != nil {
				t.Fatal(err)
			}
		}, result: "freed",
			want: map[ledger.EngineID]lease.Reserved{"gpu-0": {}, "gpu-1": {KVTokens: 300, Slots: 2, Leases: 2}}},
		{name: "nothing changes", result: "ok",
			want: map[ledger.EngineID]lease.Reserved{"gpu-0": {}, "gpu-1": {KVTokens: 300, Slots: 2, Leases: 2}}},
	}
	for _, s := range steps {
		if s.change != nil {
			s.change()
		}
		if got := f.round()["p"]; got != s.result {
			t.Errorf("%s: poll result %q, want %q", s.name, got, s.result)
		}
		if got := f.v.Engines("p"); !maps.Equal(got, s.want) {
			t.Errorf("%s: Engines = %v, want %v", s.name, got, s.want)
		}
		select {
		case pool := <-f.freed:
			if s.result != "freed" || pool != "p" {
				t.Errorf("%s: OnFreed(%s) called", s.name, pool)
			}
		default:
			if s.result == "freed" {
				t.Errorf("%s: OnFreed not called", s.name)
			}
		}
	}
}

// A failed poll keeps the previous figures until they are older than four
// intervals; a pool never polled successfully reports nothing.
func TestViewFailedPollsGoStale(t *testing.T) {
	f := newFixture(t, "p", "unknown")
	f.acquire("gpu-0", 300)
	if got := f.round(); got["p"] != "ok" || got["unknown"] != "error" {
		t.Fatalf("first round: %v, want p ok, unknown error", got)
	}
	if got := f.v.Engines("unknown"); got != nil {
		t.Errorf("a pool the ledger does not know: Engines = %v, want nil", got)
	}
	want := map[ledger.EngineID]lease.Reserved{"gpu-0": {KVTokens: 300, Slots: 1, Leases: 1}, "gpu-1": {}}

	f.l.Close() // every poll fails from now on
	for i := 1; i <= 5; i++ {
		if got := f.round(); got["p"] != "error" {
			t.Fatalf("round %d after the ledger closed: p %q, want error", i, got["p"])
		}
		got := f.v.Engines("p")
		if i <= 4 && !maps.Equal(got, want) {
			t.Errorf("%d intervals after the last good poll: Engines = %v, want the last figures %v", i, got, want)
		}
		if i == 5 && got != nil {
			t.Errorf("5 intervals after the last good poll: Engines = %v, want nil", got)
		}
	}
	f.v.Stop() // Stop twice is safe
}
