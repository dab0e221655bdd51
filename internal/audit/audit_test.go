package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/audit"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/memory"
	"github.com/leasehold/leasehold/internal/telemetry"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func lease(pool ledger.PoolID, seq uint64, engine ledger.EngineID, holder ledger.HolderID, kv, slots int64, age, ttl time.Duration) ledger.Lease {
	f := ledger.Fence{Epoch: 1000, Seq: seq}
	return ledger.Lease{
		ID: ledger.MakeLeaseID(f), Pool: pool, Engine: engine, Tenant: "acme", Priority: "standard",
		KVTokens: kv, Slots: slots, Holder: holder, RequestID: ledger.RequestID("r" + string(rune('0'+seq))),
		Created: t0.Add(-age), Deadline: t0.Add(ttl), Fence: f,
	}
}

func engine(id ledger.EngineID, kv, slots int64) ledger.EngineSpec {
	return ledger.EngineSpec{ID: id, URL: "http://" + string(id), KVTokens: kv, Slots: slots, StaleAfter: 10 * time.Second}
}

// plantedInput has every anomaly kind once, and clean rows beside them.
func plantedInput() audit.Input {
	leaked := lease("p", 1, "e-leak", "router-a", 40000, 4, 5*time.Minute, 20*time.Second)
	fresh := lease("p", 2, "e-load", "router-a", 1000, 1, 10*time.Second, 25*time.Second)
	fresh.Overgrown = true
	late := lease("p", 3, "e-load", "router-a", 500, 1, 40*time.Second, -1500*time.Millisecond)
	orphan := lease("p", 4, "e-stale", "router-b", 2000, 2, 15*time.Second, 15*time.Second)
	orphan.Tenant = "beta"
	re := lease("p", 5, "e-never", "router-a", 300, 1, 2*time.Second, 28*time.Second)
	re.Reasserted = true
	re.Priority = "batch"
	q := lease("q", 1, "q-0", "router-c", 800, 1, 90*time.Second, 5*time.Second)
	q.Tenant = "gone" // removed from the fleet file, its lease still held
	unconfirmed := lease("p", 6, "e-load", "router-a", 400, 1, 3*time.Second, 20*time.Second)
	unconfirmed.Reasserted, unconfirmed.Unconfirmed = true, true

	stale := engine("e-stale", 60000, 32)
	stale.StalePolicy = ledger.StaleBlock
	p := ledger.PoolStats{
		Pool: "p", Epoch: 1000, Now: t0, CapacityKV: 310000, CapacitySlots: 160, LiveHolders: 1, Leases: 6,
		Engines: []ledger.EngineStats{
			{Spec: engine("e-leak", 100000, 64), ReservedKV: 40000, ReservedSlots: 4, Leases: 1,
				LastObservation: ledger.Observation{KVTokensUsed: 2000, KVTokensTotal: 80000, Running: 4}, ObservedAt: t0.Add(-time.Second),
				Breaker: ledger.Breaker{Failures: 2}},
			{Spec: engine("e-load", 50000, 32), ReservedKV: 1900, ReservedSlots: 3, Leases: 3, CorrectionKV: 18100, CorrectionSlots: 6,
				OrphanKV: 6000, OrphanSlots: 1, OrphanUntil: t0.Add(3 * time.Second),
				LastObservation: ledger.Observation{KVTokensUsed: 20000, Running: 9, Waiting: 3}, ObservedAt: t0.Add(-2 * time.Second),
				Breaker: ledger.Breaker{State: ledger.BreakerHalfOpen, Successes: 1, Probes: 1, OpenedAt: t0.Add(-20 * time.Second)}},
			{Spec: engine("e-never", 100000, 32), ReservedKV: 300, ReservedSlots: 1, Leases: 1, Stale: true},
			{Spec: stale, ReservedKV: 2000, ReservedSlots: 2, Leases: 1, Stale: true,
				LastObservation: ledger.Observation{KVTokensUsed: 2000, Running: 2}, ObservedAt: t0.Add(-time.Minute),
				Breaker: ledger.Breaker{State: ledger.BreakerOpen, OpenedAt: t0.Add(-3 * time.Second)}},
		},
		Tenants: []ledger.TenantStats{
			{Spec: ledger.TenantSpec{Name: "acme", KVShare: 1}, QuotaKV: 310000, ReservedKV: 42200, ReservedSlots: 8, Leases: 5},
			{Spec: ledger.TenantSpec{Name: "beta", KVShare: 0.1, SlotShare: 0.1}, QuotaKV: 31000, QuotaSlots: 16, ReservedKV: 2000, ReservedSlots: 2, Leases: 1},
		},
		Counters: map[string]int64{ledger.CounterGrants: 6},
	}
	qs := ledger.PoolStats{
		Pool: "q", Epoch: 2000, Now: t0, RecoveringUntil: t0.Add(4 * time.Second), CapacityKV: 8000, CapacitySlots: 8, Leases: 1, LiveHolders: 1,
		Engines: []ledger.EngineStats{
			{Spec: ledger.EngineSpec{ID: "q-0", KVTokens: 8000, Slots: 8}, Draining: true, ReservedKV: 800, ReservedSlots: 1, Leases: 1},
		},
		Tenants: []ledger.TenantStats{
			{Spec: ledger.TenantSpec{Name: "acme", KVShare: 1}, QuotaKV: 8000},
			{Spec: ledger.TenantSpec{Name: "gone", KVShare: 0.5}, QuotaKV: 4000, ReservedKV: 800, ReservedSlots: 1, Leases: 1, Removed: true},
		},
	}
	return audit.Input{
		Pools: []audit.PoolInput{
			{Stats: p, Leases: []ledger.Lease{leaked, fresh, late, orphan, re, unconfirmed},
				Mismatches: []ledger.TotalsMismatch{{Pool: "p", Engine: "e-stale",
					Recorded: ledger.Totals{KVTokens: 2000, Slots: 2, Leases: 1}, Rows: ledger.Totals{KVTokens: 2000, Slots: 2, Leases: 2}}}},
			{Stats: qs, Leases: []ledger.Lease{q}},
		},
		Sessions: map[audit.SessionKey]time.Time{
			{Pool: "p", Holder: "router-a"}: t0.Add(8 * time.Second),
			{Pool: "p", Holder: "router-b"}: t0.Add(-3 * time.Second),
		},
		Scrapes: map[telemetry.EngineKey]audit.Scrape{
			{Pool: "p", Engine: "e-stale"}: {LastSuccess: t0.Add(-time.Minute), Failures: 30, LastError: "GET http://e-stale/metrics: connection refused"},
		},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update to accept):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestBuildGolden(t *testing.T) {
	cases := []struct {
		name string
		flt  ledger.Filter
	}{
		{"all", ledger.Filter{}},
		{"pool_p_holder_a", ledger.Filter{Pool: "p", Holder: "router-a"}},
		{"engine_stale", ledger.Filter{Engine: "e-stale"}},
		{"tenant_beta", ledger.Filter{Tenant: "beta"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := audit.Build(plantedInput(), c.flt, audit.Options{})
			var tbl bytes.Buffer
			if err := audit.WriteTable(&tbl, r); err != nil {
				t.Fatal(err)
			}
			golden(t, c.name+".table.golden", tbl.Bytes())
			js, err := json.MarshalIndent(r, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden(t, c.name+".json.golden", append(js, '\n'))
		})
	}
}

func TestBuildPlantsEveryKind(t *testing.T) {
	r := audit.Build(plantedInput(), ledger.Filter{}, audit.Options{})
	got := map[audit.Kind][]string{}
	for _, a := range r.Anomalies {
		got[a.Kind] = append(got[a.Kind], string(a.Engine)+"/"+string(a.Lease))
	}
	want := map[audit.Kind][]string{
		audit.KindExpiredHolder:       {"e-stale/3e8-4"},
		audit.KindDeadlinePassed:      {"e-load/3e8-3"},
		audit.KindLeakSuspected:       {"e-leak/"},
		audit.KindUnaccountedLoad:     {"e-load/"},
		audit.KindStaleTelemetry:      {"e-never/", "e-stale/"},
		audit.KindCapacityMismatch:    {"e-leak/"},
		audit.KindReassertUnconfirmed: {"e-load/3e8-6"},
		audit.KindTotalsMismatch:      {"e-stale/"},
	}
	for _, k := range audit.Kinds {
		if !slices.Equal(got[k], want[k]) {
			t.Errorf("%s: got %v, want %v", k, got[k], want[k])
		}
	}
	if len(r.Leases) != 7 || len(r.Engines) != 5 || len(r.Pools) != 2 {
		t.Errorf("got %d leases, %d engines, %d pools; want 7, 5, 2", len(r.Leases), len(r.Engines), len(r.Pools))
	}
}

func TestThresholds(t *testing.T) {
	cases := []struct {
		name     string
		opts     audit.Options
		wantLeak bool
	}{
		{"default", audit.Options{}, true},
		{"lease too young to judge", audit.Options{LeakAfter: 10 * time.Minute}, false},
		{"gap below the minimum", audit.Options{LeakMinKV: 50000}, false},
		{"gap below the fraction", audit.Options{LeakFraction: 0.99}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := audit.Build(plantedInput(), ledger.Filter{Engine: "e-leak"}, c.opts)
			leak := slices.ContainsFunc(r.Anomalies, func(a audit.Anomaly) bool { return a.Kind == audit.KindLeakSuspected })
			if leak != c.wantLeak {
				t.Errorf("leak_suspected = %v, want %v (anomalies %+v)", leak, c.wantLeak, r.Anomalies)
			}
		})
	}
}

func TestEmptyReportHasArrays(t *testing.T) {
	b, err := json.Marshal(audit.Build(audit.Input{}, ledger.Filter{}, audit.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"leases", "engines", "anomalies", "pools"} {
		if _, ok := m[k].([]any); !ok {
			t.Errorf("%s = %v, want an array", k, m[k])
		}
	}
}

// fixedClock is a settable ledger clock.
type fixedClock struct{ now time.Time }

func (c *fixedClock) Now() time.Time { return c.now }

// poolLedger is a memory ledger on clk with pool p: engine e1 of 1000 KV
// tokens and slots slots, tenant acme, priority standard.
func poolLedger(t *testing.T, clk ledger.Clock, slots int64) *memory.Ledger {
	t.Helper()
	l := memory.New(ledger.Options{RecoveryWindow: -1}, clk)
	t.Cleanup(func() { l.Close() })
	spec := ledger.PoolSpec{
		Name:       "p",
		Engines:    []ledger.EngineSpec{{ID: "e1", KVTokens: 1000, Slots: slots}},
		Tenants:    []ledger.TenantSpec{{Name: "acme", KVShare: 1}},
		Priorities: []ledger.PrioritySpec{{Name: "standard", MaxFill: 1}},
	}
	if _, err := l.Configure(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestCollectFromMemoryLedger(t *testing.T) {
	ctx := context.Background()
	clk := &fixedClock{now: t0}
	l := poolLedger(t, clk, 4)
	sessions := audit.NewSessions(0)
	sess, err := l.KeepAlive(ctx, "p", "h1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sessions.Record(sess)
	if _, err := l.Acquire(ctx, ledger.AcquireRequest{Pool: "p", Candidates: []ledger.EngineID{"e1"}, Tenant: "acme",
		Priority: "standard", KVTokens: 100, Slots: 1, Holder: "h1", RequestID: "r1", TTL: 500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	clk.now = t0.Add(2 * time.Second) // the lease's deadline and its holder's session have passed; nothing swept

	in, err := audit.Collect(ctx, l, ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	in.Sessions = sessions.Snapshot()
	r := audit.Build(in, ledger.Filter{}, audit.Options{})
	var kinds []audit.Kind
	for _, a := range r.Anomalies {
		kinds = append(kinds, a.Kind)
	}
	want := []audit.Kind{audit.KindDeadlinePassed, audit.KindExpiredHolder}
	if !slices.Equal(kinds, want) || len(r.Leases) != 1 {
		t.Errorf("got anomalies %v and %d leases, want %v and 1", kinds, len(r.Leases), want)
	}

	if _, err := audit.Collect(ctx, l, ledger.Filter{Pool: "nope"}); !errors.Is(err, ledger.ErrUnknownPool) {
		t.Errorf("Collect(unknown pool) = %v, want ErrUnknownPool", err)
	}
}

func TestSessionsBounded(t *testing.T) {
	s := audit.NewSessions(2)
	s.Record(ledger.Session{Pool: "p", Holder: "a", Expires: t0})
	s.Record(ledger.Session{Pool: "p", Holder: "b", Expires: t0.Add(2 * time.Hour)})
	s.Record(ledger.Session{Pool: "p", Holder: "c", Expires: t0.Add(2 * time.Hour)}) // forgets a
	s.Record(ledger.Session{Pool: "p", Holder: "d", Expires: t0.Add(2 * time.Hour)}) // no room: dropped
	s.Record(ledger.Session{Pool: "p", Holder: "b", Expires: t0})                    // older: ignored
	got := s.Snapshot()
	want := map[audit.SessionKey]time.Time{{"p", "b"}: t0.Add(2 * time.Hour), {"p", "c"}: t0.Add(2 * time.Hour)}
	if len(got) != len(want) || got[audit.SessionKey{"p", "b"}] != want[audit.SessionKey{"p", "b"}] || got[audit.SessionKey{"p", "c"}].IsZero() {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestCollectFilteredPastTheCap: a holder's leases that lie past the
// per-pool cap are still listed by an audit filtered to that holder (the
// pool is marked truncated: its engine totals are partial).
func TestCollectFilteredPastTheCap(t *testing.T) {
	ctx := context.Background()
	l := poolLedger(t, &fixedClock{now: t0}, 16)
	for i, h := range []ledger.HolderID{"h1", "h1", "h1", "h1", "h1", "h2"} {
		if _, err := l.KeepAlive(ctx, "p", h, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Acquire(ctx, ledger.AcquireRequest{Pool: "p", Candidates: []ledger.EngineID{"e1"}, Tenant: "acme",
			Priority: "standard", KVTokens: 10, Slots: 1, Holder: h, RequestID: ledger.RequestID(fmt.Sprint("r", i)), TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	f := ledger.Filter{Holder: "h2", Limit: 3}
	in, err := audit.Collect(ctx, l, f)
	if err != nil {
		t.Fatal(err)
	}
	r := audit.Build(in, f, audit.Options{})
	if len(r.Leases) != 1 || r.Leases[0].Holder != "h2" || !in.Pools[0].Truncated {
		t.Errorf("filtered to h2 with a cap of 3: %d leases %+v, truncated %v; want h2's one lease and the pool truncated",
			len(r.Leases), r.Leases, in.Pools[0].Truncated)
	}
}

// TestCollectUnconfirmedReassert: a lease reasserted on an observed engine
// that no observation has shown is reported reassert_unconfirmed and
// flagged; a memory ledger's totals are checked and agree.
func TestCollectUnconfirmedReassert(t *testing.T) {
	ctx := context.Background()
	clk := &fixedClock{now: t0}
	l := poolLedger(t, clk, 4)
	if _, err := l.KeepAlive(ctx, "p", "h1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Observe(ctx, ledger.Observation{Pool: "p", Engine: "e1", ObservedAt: t0}); err != nil {
		t.Fatal(err)
	}
	fence := ledger.Fence{Epoch: 1, Seq: 9}
	g, err := l.Reassert(ctx, ledger.Lease{ID: ledger.MakeLeaseID(fence), Fence: fence, Pool: "p", Engine: "e1", Tenant: "acme",
		Priority: "standard", KVTokens: 500, Slots: 2, Holder: "h1", RequestID: "lost"}, time.Minute)
	if err != nil || !g.Lease.Unconfirmed {
		t.Fatalf("Reassert = %+v, %v; want an Unconfirmed lease", g.Lease, err)
	}
	in, err := audit.Collect(ctx, l, ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Pools) != 1 || len(in.Pools[0].Mismatches) != 0 {
		t.Errorf("Collect mismatches = %+v, want none", in.Pools)
	}
	r := audit.Build(in, ledger.Filter{}, audit.Options{})
	var got []audit.Anomaly
	for _, a := range r.Anomalies {
		if a.Kind == audit.KindReassertUnconfirmed {
			got = append(got, a)
		}
	}
	if len(got) != 1 || got[0].Lease != g.Lease.ID || got[0].Holder != "h1" || len(r.Leases) != 1 ||
		!slices.Contains(r.Leases[0].Flags, audit.FlagUnconfirmed) {
		t.Errorf("anomalies %+v, leases %+v; want one reassert_unconfirmed for %s and the lease flagged %s",
			r.Anomalies, r.Leases, g.Lease.ID, audit.FlagUnconfirmed)
	}
}
