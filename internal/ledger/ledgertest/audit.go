package ledgertest

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/internal/ledger"
)

func (s *suite) testAudit(t *testing.T) {
	t.Run("ListAndStats", s.testListAndStats)
	t.Run("Pools", s.testPools)
	t.Run("Closed", s.testClosed)
}

const poolQ ledger.PoolID = "q"

func (s *suite) testListAndStats(t *testing.T) {
	spec := poolSpec(pool, engine(e1, 1000, 8), engine(e2, 2000, 8))
	spec.Tenants = append(spec.Tenants, ledger.TenantSpec{Name: tenantSmall, KVShare: 0.5, SlotShare: 0.5})
	f := s.setup(t, spec, noWindow)
	var leases []ledger.Lease
	for i, a := range []struct {
		h ledger.HolderID
		ask
	}{
		{h1, ask{kv: 100, slots: 1, cands: on(e1)}},
		{h2, ask{kv: 200, slots: 2, cands: on(e2), tenant: tenantSmall}},
		{h1, ask{kv: 300, slots: 1, cands: on(e2)}},
		{h2, ask{kv: 400, slots: 3, cands: on(e1), tenant: tenantSmall}},
		{h1, ask{kv: 500, slots: 1, cands: on(e2), tenant: tenantSmall}},
		{h2, ask{kv: 50, slots: 1, cands: on(e1)}},
	} {
		l := f.acquire(a.on(f, a.h), a.cands[0])
		if i == 5 {
			f.release(l) // released leases are not listed
			continue
		}
		leases = append(leases, l)
	}
	// A second pool in the same ledger.
	fq := &fixture{t: t, ctx: f.ctx, l: f.l, spec: poolSpec(poolQ, engine(e1, 10, 1))}
	fq.configure(fq.spec)
	fq.keepAlive(h1, longTTL)
	lq := fq.acquire(fq.req(h1, 5, 1, e1), e1)

	ids := func(ls []ledger.Lease) []ledger.LeaseID {
		var out []ledger.LeaseID
		for _, l := range ls {
			out = append(out, l.ID)
		}
		return out
	}
	pick := func(keep func(ledger.Lease) bool) []ledger.LeaseID {
		var out []ledger.LeaseID
		for _, l := range leases {
			if keep(l) {
				out = append(out, l.ID)
			}
		}
		return out
	}
	all := append(pick(func(ledger.Lease) bool { return true }), lq.ID)
	cases := []struct {
		name string
		flt  ledger.Filter
		want []ledger.LeaseID // in List's order: pool, then fence
	}{
		{"all pools", ledger.Filter{}, all},
		{"pool", ledger.Filter{Pool: pool}, all[:len(all)-1]},
		{"other pool", ledger.Filter{Pool: poolQ}, []ledger.LeaseID{lq.ID}},
		{"engine", ledger.Filter{Pool: pool, Engine: e2}, pick(func(l ledger.Lease) bool { return l.Engine == e2 })},
		{"engine across pools", ledger.Filter{Engine: e1}, append(pick(func(l ledger.Lease) bool { return l.Engine == e1 }), lq.ID)},
		{"holder", ledger.Filter{Pool: pool, Holder: h2}, pick(func(l ledger.Lease) bool { return l.Holder == h2 })},
		{"tenant", ledger.Filter{Pool: pool, Tenant: tenantSmall}, pick(func(l ledger.Lease) bool { return l.Tenant == tenantSmall })},
		{"engine and tenant", ledger.Filter{Pool: pool, Engine: e2, Tenant: tenantSmall},
			pick(func(l ledger.Lease) bool { return l.Engine == e2 && l.Tenant == tenantSmall })},
		{"limit", ledger.Filter{Pool: pool, Limit: 2}, all[:2]},
		{"no match", ledger.Filter{Pool: pool, Holder: "nobody"}, nil},
		{"unknown pool", ledger.Filter{Pool: "nope"}, nil},
	}
	for _, tc := range cases {
		got := ids(f.list(tc.flt))
		if !slices.Equal(got, tc.want) {
			t.Errorf("List(%s %+v) = %v, want %v", tc.name, tc.flt, got, tc.want)
		}
	}
	listed := f.list(ledger.Filter{Pool: pool})
	for i, l := range listed {
		if i < len(leases) {
			sameLease(t, "List", l, leases[i])
			if !l.Deadline.Equal(leases[i].Deadline) || l.Tenant != leases[i].Tenant || l.Priority != leases[i].Priority {
				t.Errorf("List lease %s deadline %s tenant %s priority %s, want %s %s %s", l.ID, l.Deadline, l.Tenant, l.Priority,
					leases[i].Deadline, leases[i].Tenant, leases[i].Priority)
			}
		}
	}
	checkStatsMatchList(t, f.stats(), listed)
	st := f.stats()
	if st.Pool != pool || st.Epoch != f.epoch || st.CapacityKV != 3000 || st.CapacitySlots != 16 {
		t.Errorf("Stats = pool %s epoch %d capacity %d/%d, want pool %s epoch %d capacity 3000/16", st.Pool, st.Epoch, st.CapacityKV, st.CapacitySlots, pool, f.epoch)
	}
	if ts, _ := tenantStats(st, tenantSmall); ts.QuotaKV != ledger.Fill(3000, 0.5) || ts.QuotaSlots != ledger.Fill(16, 0.5) {
		t.Errorf("Stats tenant small quota = %d/%d, want %d/%d", ts.QuotaKV, ts.QuotaSlots, ledger.Fill(3000, 0.5), ledger.Fill(16, 0.5))
	}
	if ts, _ := tenantStats(st, tenantAll); ts.QuotaKV != 3000 || ts.QuotaSlots != 0 {
		t.Errorf("Stats tenant t1 quota = %d/%d, want 3000/0 (no slot quota)", ts.QuotaKV, ts.QuotaSlots)
	}
	if !slices.IsSortedFunc(st.Engines, func(a, b ledger.EngineStats) int { return cmp.Compare(a.Spec.ID, b.Spec.ID) }) {
		t.Errorf("Stats engines not sorted by id")
	}
	if !slices.IsSortedFunc(st.Tenants, func(a, b ledger.TenantStats) int { return cmp.Compare(a.Spec.Name, b.Spec.Name) }) {
		t.Errorf("Stats tenants not sorted by name")
	}
	if len(st.Priorities) != 1 || st.Priorities[0] != spec.Priorities[0] {
		t.Errorf("Stats priorities = %+v, want %+v", st.Priorities, spec.Priorities)
	}
	if len(st.Engines) != 2 || st.Engines[1].Spec.KVTokens != 2000 || st.Engines[1].Spec.Slots != 8 {
		t.Errorf("Stats engines = %+v, want e1 and e2 with their specs", st.Engines)
	}
}

// checkStatsMatchList checks that st's per-engine and per-tenant totals are
// the sums of the listed leases.
func checkStatsMatchList(t testing.TB, st ledger.PoolStats, listed []ledger.Lease) {
	t.Helper()
	eng := map[ledger.EngineID]amounts{}
	ten := map[ledger.TenantID]amounts{}
	for _, l := range listed {
		a := eng[l.Engine]
		eng[l.Engine] = amounts{a.kv + l.KVTokens, a.slots + l.Slots, a.leases + 1}
		b := ten[l.Tenant]
		ten[l.Tenant] = amounts{b.kv + l.KVTokens, b.slots + l.Slots, b.leases + 1}
	}
	if st.Leases != int64(len(listed)) {
		t.Errorf("Stats Leases = %d, want %d (the listed leases)", st.Leases, len(listed))
	}
	engStats := map[ledger.EngineID]amounts{}
	for _, e := range st.Engines {
		engStats[e.Spec.ID] = amounts{e.ReservedKV, e.ReservedSlots, e.Leases}
	}
	tenStats := map[ledger.TenantID]amounts{}
	for _, x := range st.Tenants {
		tenStats[x.Spec.Name] = amounts{x.ReservedKV, x.ReservedSlots, x.Leases}
	}
	checkSums(t, "engine", engStats, eng)
	checkSums(t, "tenant", tenStats, ten)
}

// checkSums checks that the reservations Stats shows for each engine or
// tenant (kind) are the sums of the listed leases', and that no listed
// lease is on one Stats does not show.
func checkSums[K ~string](t testing.TB, kind string, stats, listed map[K]amounts) {
	t.Helper()
	for _, id := range slices.Sorted(maps.Keys(stats)) {
		got, want := stats[id], listed[id]
		if got != want {
			t.Errorf("Stats %s %s reserved kv=%d slots=%d leases=%d, want the List sums kv=%d slots=%d leases=%d",
				kind, id, got.kv, got.slots, got.leases, want.kv, want.slots, want.leases)
		}
	}
	for id, a := range listed {
		if _, ok := stats[id]; !ok {
			t.Errorf("List has leases of %s %s (kv=%d) that Stats does not show", kind, id, a.kv)
		}
	}
}

func (s *suite) testPools(t *testing.T) {
	l := s.open(t, noWindow)
	ctx := t.Context()
	got, err := l.Pools(ctx)
	if err != nil || len(got) != 0 {
		t.Errorf("Pools() on an empty ledger = %v, %v; want none, nil", got, err)
	}
	for _, p := range []ledger.PoolID{"zeta", "alpha", "mid"} {
		if _, err := l.Configure(ctx, poolSpec(p, engine(e1, 10, 1))); err != nil {
			t.Fatalf("Configure(%s) error = %v", p, err)
		}
	}
	got, err = l.Pools(ctx)
	want := []ledger.PoolID{"alpha", "mid", "zeta"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("Pools() = %v, %v; want %v, nil", got, err, want)
	}
	_, err = l.Stats(ctx, "nope")
	wantErr(t, "Stats(unknown pool)", err, ledger.ErrUnknownPool)
}

func (s *suite) testClosed(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4)), noWindow)
	if err := f.l.Close(); err != nil {
		t.Fatalf("Close() error = %v, want nil", err)
	}
	ctx := context.WithoutCancel(f.ctx)
	_, err := f.l.Acquire(ctx, f.req(h1, 1, 1, e1))
	wantErr(t, "Acquire after Close", err, ledger.ErrClosed)
	_, err = f.l.Stats(ctx, pool)
	wantErr(t, "Stats after Close", err, ledger.ErrClosed)
}
