package ledgertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/poll"
)

// Elastic reservations (the package doc's "Reservation modes", "Capacity
// truth" and "Completion lengths"): the pool's mode and growth headroom,
// Grow and its Overgrown flag, the engine's reported capacity, and the
// completion-length counters releases keep.

// growHeadroom is the growth headroom of the elastic subtests' pools: on an
// engine of 1000 KV tokens, grants fill 900 and Grow may use the last 100.
const growHeadroom = 0.1

// elasticSpec is poolSpec in an elastic pool with headroom h.
func elasticSpec(h float64, engines ...ledger.EngineSpec) ledger.PoolSpec {
	s := poolSpec(pool, engines...)
	s.Reserve, s.GrowthHeadroom = ledger.ReserveElastic, h
	return s
}

func (s *suite) testElastic(t *testing.T) {
	t.Run("ModeRoundTrip", s.testModeRoundTrip)
	t.Run("WorstCase", s.testWorstCase)
	t.Run("HeadroomLeftForGrow", s.testHeadroomLeftForGrow)
	t.Run("GrowPastCapacity", s.testGrowPastCapacity)
	t.Run("GrowPastTenantQuota", s.testGrowPastTenantQuota)
	t.Run("GrowNeverRefused", s.testGrowNeverRefused)
	t.Run("GrowRemovedEngine", s.testGrowRemovedEngine)
	t.Run("GrowEqual", s.testGrowEqual)
	t.Run("BadGrow", s.testBadGrow)
	t.Run("ReportedCapacity", s.testReportedCapacity)
	t.Run("CompletionCounters", s.testCompletionCounters)
}

// grow wants Grow(l, kv) to succeed and checks the lease it returns: kv
// tokens, the Overgrown flag, everything else (the deadline included) as l.
func (f *fixture) grow(l ledger.Lease, kv int64, overgrown bool) ledger.Lease {
	f.t.Helper()
	r, err := f.l.Grow(f.ctx, l.Ref(), kv)
	if err != nil {
		f.t.Fatalf("Grow(%s from %d to %d) error = %v, want nil", l.ID, l.KVTokens, kv, err)
	}
	if r.Epoch != f.epoch {
		f.t.Errorf("Grow(%s) epoch = %d, want %d", l.ID, r.Epoch, f.epoch)
	}
	want := l
	want.KVTokens, want.Overgrown = kv, overgrown
	if got := r.Lease; fmt.Sprint(leaseFields(got)) != fmt.Sprint(leaseFields(want)) {
		f.t.Errorf("Grow(%s to %d) lease = %v, want %v", l.ID, kv, leaseFields(got), leaseFields(want))
	}
	return r.Lease
}

// leaseFields is what Grow must keep (or set) of a lease, for comparison.
func leaseFields(l ledger.Lease) []any {
	return []any{l.ID, l.Pool, l.Engine, l.Tenant, l.Priority, "kv", l.KVTokens, "slots", l.Slots, l.Holder, l.RequestID,
		l.Created.UnixMilli(), "deadline", l.Deadline.UnixMilli(), l.Fence, "reasserted", l.Reasserted, "overgrown", l.Overgrown}
}

// listed returns the lease id's row in List, failing if it is absent.
func (f *fixture) listed(id ledger.LeaseID) ledger.Lease {
	f.t.Helper()
	for _, l := range f.list(ledger.Filter{Pool: f.spec.Name}) {
		if l.ID == id {
			return l
		}
	}
	f.t.Fatalf("List(%s) lacks lease %s", f.spec.Name, id)
	return ledger.Lease{}
}

// wantTenantKV checks a tenant's reserved KV tokens.
func (f *fixture) wantTenantKV(id ledger.TenantID, kv int64) {
	f.t.Helper()
	if x, ok := tenantStats(f.stats(), id); !ok || x.ReservedKV != kv {
		f.t.Errorf("Stats tenant %s reserved kv = %d (present %v), want %d", id, x.ReservedKV, ok, kv)
	}
}

// growCounters checks the Grow counters.
func (f *fixture) growCounters(why string, growths, grownKV, overgrowths int64) {
	f.t.Helper()
	f.wantCounters(why, map[string]int64{
		ledger.CounterGrowths: growths, ledger.CounterGrownKV: grownKV, ledger.CounterOvergrowths: overgrowths,
	})
}

func (s *suite) testModeRoundTrip(t *testing.T) {
	cases := []struct {
		name     string
		reserve  ledger.ReserveMode
		headroom float64
		want     ledger.ReserveMode
	}{
		{"default is elastic", "", 0, ledger.ReserveElastic},
		{"default with headroom", "", 0.25, ledger.ReserveElastic},
		{"elastic", ledger.ReserveElastic, growHeadroom, ledger.ReserveElastic},
		{"elastic at the bound", ledger.ReserveElastic, ledger.MaxGrowthHeadroom, ledger.ReserveElastic},
		{"worst_case", ledger.ReserveWorstCase, 0, ledger.ReserveWorstCase},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := poolSpec(pool, engine(e1, 1000, 4))
			spec.Reserve, spec.GrowthHeadroom = tc.reserve, tc.headroom
			f := s.setup(t, spec, noWindow)
			st := f.stats()
			if st.Reserve != tc.want || st.GrowthHeadroom != tc.headroom {
				t.Errorf("Stats reserve=%q growth_headroom=%v, want %q and %v", st.Reserve, st.GrowthHeadroom, tc.want, tc.headroom)
			}
		})
	}
	// Configure replaces the mode like the rest of the spec.
	f := s.setup(t, elasticSpec(0.2, engine(e1, 1000, 4)), noWindow)
	spec := poolSpec(pool, engine(e1, 1000, 4))
	spec.Reserve = ledger.ReserveWorstCase
	f.configure(spec)
	if st := f.stats(); st.Reserve != ledger.ReserveWorstCase || st.GrowthHeadroom != 0 {
		t.Errorf("Stats after reconfiguring worst_case reserve=%q growth_headroom=%v, want worst_case and 0", st.Reserve, st.GrowthHeadroom)
	}
	f.acquire(f.req(h1, 1000, 1, e1), e1) // no headroom kept any more
	f.configure(elasticSpec(0.3, engine(e1, 1000, 4)))
	if st := f.stats(); st.Reserve != ledger.ReserveElastic || st.GrowthHeadroom != 0.3 {
		t.Errorf("Stats after reconfiguring elastic 0.3 reserve=%q growth_headroom=%v, want elastic and 0.3", st.Reserve, st.GrowthHeadroom)
	}
}

// testWorstCase: a worst_case pool admits on the whole capacity and refuses
// Grow as malformed, changing nothing.
func (s *suite) testWorstCase(t *testing.T) {
	spec := poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4))
	spec.Reserve = ledger.ReserveWorstCase
	f := s.setup(t, spec, noWindow)
	a := f.acquire(f.req(h1, 600, 1, e1), e1)
	f.acquire(f.req(h1, 400, 1, e1), e1)
	f.reject(f.req(h1, 1, 1, e1), ledger.ReasonEngineKV, e1)
	before := snapshot(f.stats())
	for _, kv := range []int64{a.KVTokens, a.KVTokens + 1, 1000} {
		_, err := f.l.Grow(f.ctx, a.Ref(), kv)
		wantErr(t, fmt.Sprintf("Grow(%d) in a worst_case pool", kv), err, ledger.ErrInvalidArgument)
	}
	if got := snapshot(f.stats()); got.String() != before.String() {
		t.Errorf("Grow in a worst_case pool changed the pool:\n got %s\nwant %s", got, before)
	}
	if got := f.listed(a.ID); got.KVTokens != a.KVTokens || got.Overgrown {
		t.Errorf("List lease %s after refused Grow kv=%d overgrown=%v, want kv=%d overgrown=false", a.ID, got.KVTokens, got.Overgrown, a.KVTokens)
	}
	f.growCounters("Grow refused in a worst_case pool", 0, 0, 0)
}

// testHeadroomLeftForGrow: grants and Resize growth leave the headroom
// free; Grow uses it without flagging the lease.
func (s *suite) testHeadroomLeftForGrow(t *testing.T) {
	spec := elasticSpec(growHeadroom, engine(e1, 1000, 4), engine(e2, 1000, 4))
	spec.Priorities = append(spec.Priorities, ledger.PrioritySpec{Name: prioBatch, MaxFill: 0.7})
	f := s.setup(t, spec, noWindow)
	admissible := ledger.Fill(1000, 1) - ledger.Fill(1000, growHeadroom) // 900

	f.reject(f.req(h1, admissible+1, 1, e1), ledger.ReasonTooLarge, "")
	a := f.acquire(f.req(h1, 700, 1, e1), e1)
	b := f.acquire(f.req(h2, 100, 1, e1), e1)
	// 101 more would fit in 1000 but not in the 900 grants may fill.
	f.reject(f.req(h1, admissible-800+1, 1, e1), ledger.ReasonEngineKV, e1)
	for _, c := range []struct {
		kv     int64
		reason ledger.Reason
		on     ledger.EngineID
	}{{admissible - 100 + 1, ledger.ReasonEngineKV, e1}, {admissible + 1, ledger.ReasonTooLarge, ""}} {
		_, err := f.l.Resize(f.ctx, a.Ref(), c.kv)
		if err == nil {
			t.Fatalf("Resize(%s to %d) into the growth headroom succeeded, want rejection %s", a.ID, c.kv, c.reason)
		}
		f.checkRejection(fmt.Sprintf("Resize to %d into the growth headroom", c.kv), err, c.reason, c.on)
	}
	f.release(b)
	// A lower class's fill loses the same headroom: floor(1000*0.7) - 100.
	batch := f.req(h2, ledger.Fill(1000, 0.7)-ledger.Fill(1000, growHeadroom)+1, 1, e2)
	batch.Priority = prioBatch
	f.reject(batch, ledger.ReasonTooLarge, "")
	batch = f.req(h2, ledger.Fill(1000, 0.7)-ledger.Fill(1000, growHeadroom), 1, e2)
	batch.Priority = prioBatch
	f.release(f.acquire(batch, e2))

	a = f.grow(a, 950, false)
	a = f.grow(a, 1000, false) // reaching capacity exactly is not over it
	f.wantReserved(e1, 1000, 1, 1)
	f.wantTenantKV(tenantAll, 1000)
	if got := f.listed(a.ID); got.KVTokens != 1000 || got.Overgrown {
		t.Errorf("List lease %s kv=%d overgrown=%v, want kv=1000 overgrown=false", a.ID, got.KVTokens, got.Overgrown)
	}
	f.growCounters("two growths within capacity", 2, 300, 0)
	checkStatsMatchList(t, f.stats(), f.list(ledger.Filter{Pool: pool}))
	f.reject(f.req(h1, 1, 1, e1), ledger.ReasonEngineKV, e1)
}

// testGrowPastCapacity: growth past capacity is accepted and flagged, and
// the engine takes no grant until releases bring it back under its
// admissible fill.
func (s *suite) testGrowPastCapacity(t *testing.T) {
	// e2 keeps t1's pool-wide quota (2000) above e1's overload.
	f := s.setup(t, elasticSpec(growHeadroom, engine(e1, 1000, 4), engine(e2, 1000, 4)), noWindow)
	a := f.acquire(f.req(h1, 500, 1, e1), e1)
	b := f.acquire(f.req(h2, 400, 1, e1), e1)
	deadline := a.Deadline
	a = f.grow(a, 700, true) // 900 + 200 > 1000
	if !a.Deadline.Equal(deadline) {
		t.Errorf("Grow moved the deadline from %s to %s, want it unchanged", deadline.Format(time.StampMilli), a.Deadline.Format(time.StampMilli))
	}
	f.wantReserved(e1, 1100, 2, 2)
	f.wantTenantKV(tenantAll, 1100)
	if got := f.listed(a.ID); got.KVTokens != 700 || !got.Overgrown {
		t.Errorf("List lease %s kv=%d overgrown=%v, want kv=700 overgrown=true", a.ID, got.KVTokens, got.Overgrown)
	}
	if got := f.listed(b.ID); got.Overgrown {
		t.Errorf("List lease %s overgrown = true, want false (it did not grow)", b.ID)
	}
	f.growCounters("one growth past capacity", 1, 200, 1)
	checkStatsMatchList(t, f.stats(), f.list(ledger.Filter{Pool: pool}))

	// Overgrown: no grant on e1, however small; e2 still grants.
	f.reject(f.req(h1, 1, 1, e1), ledger.ReasonEngineKV, e1)
	f.acquire(f.req(h1, 1, 1, e1, e2), e2)
	_, err := f.l.Resize(f.ctx, b.Ref(), b.KVTokens+1)
	if err == nil {
		t.Fatalf("Resize growth on an overgrown engine succeeded, want rejection %s", ledger.ReasonEngineKV)
	}
	f.checkRejection("Resize growth on an overgrown engine", err, ledger.ReasonEngineKV, e1)

	// Releasing b leaves 700 of the 900 grants may fill.
	f.release(b)
	f.reject(f.req(h1, 201, 1, e1), ledger.ReasonEngineKV, e1)
	c := f.acquire(f.req(h1, 200, 1, e1), e1)
	// The flag sticks; a growth that fits is not counted as an overgrowth.
	a = f.grow(a, 800, true) // 900 + 100 = 1000: within capacity
	f.growCounters("a second growth, within capacity, of an overgrown lease", 2, 300, 1)
	if got := f.listed(a.ID); got.KVTokens != 800 || !got.Overgrown {
		t.Errorf("List lease %s kv=%d overgrown=%v, want kv=800 overgrown=true (sticky)", a.ID, got.KVTokens, got.Overgrown)
	}
	if got := f.listed(c.ID); got.Overgrown {
		t.Errorf("List lease %s overgrown = true, want false", c.ID)
	}
	f.release(a)
	f.release(c)
	f.wantReserved(e1, 0, 0, 0)
	f.wantTenantKV(tenantAll, 1)
	f.acquire(f.req(h1, 900, 1, e1), e1)
}

// testGrowPastTenantQuota: growth that takes the tenant above its KV quota
// is accepted and flagged, even where the engine has room.
func (s *suite) testGrowPastTenantQuota(t *testing.T) {
	spec := elasticSpec(growHeadroom, engine(e1, 1000, 4), engine(e2, 1000, 4))
	spec.Tenants = append(spec.Tenants, ledger.TenantSpec{Name: tenantSmall, KVShare: 0.25}) // 500
	f := s.setup(t, spec, noWindow)
	r := f.req(h1, 400, 1, e1)
	r.Tenant = tenantSmall
	a := f.acquire(r, e1)
	a = f.grow(a, 500, false) // the quota exactly
	a = f.grow(a, 600, true)  // e1 at 600 of 1000, the tenant at 600 of 500
	f.wantTenantKV(tenantSmall, 600)
	f.growCounters("growth past the tenant's quota", 2, 200, 1)
	r = f.req(h1, 1, 1, e2)
	r.Tenant = tenantSmall
	f.reject(r, ledger.ReasonTenantKV, "")
	f.acquire(f.req(h1, 300, 1, e1), e1) // other tenants still get e1
}

// testGrowNeverRefused: Grow records what the engine holds, so the
// recovery window, draining and stale telemetry under policy block, which
// refuse grants and Resize growth, do not refuse it.
func (s *suite) testGrowNeverRefused(t *testing.T) {
	t.Run("recovery window", func(t *testing.T) {
		f := s.setup(t, elasticSpec(growHeadroom, engine(e1, 1000, 4), engine(e2, 1000, 4)),
			ledger.Options{RecoveryWindow: recoveryWindow})
		a := f.reassert(f.fabricate(h1, e1, 850, 1, ledger.Fence{Epoch: f.epoch, Seq: 7}))
		a = f.grow(a, 950, false)
		f.grow(a, 1000, false)
		st := f.stats()
		if st.RecoveringUntil.IsZero() {
			t.Skipf("the %s recovery window ended before the growths returned: a store this slow cannot show Grow inside it", recoveryWindow)
		}
		f.wantReserved(e1, 1000, 1, 1)
		if st.RecoveringUntil.Sub(st.Now) > recoveryWindow/4 {
			f.reject(f.req(h1, 1, 1, e2), ledger.ReasonRecovering, e2) // while grants are still refused
		}
	})
	t.Run("draining", func(t *testing.T) {
		f := s.setup(t, elasticSpec(growHeadroom, engine(e1, 1000, 4), engine(e2, 1000, 4)), noWindow)
		a := f.acquire(f.req(h1, 900, 1, e1), e1)
		if err := f.l.SetDraining(f.ctx, pool, e1, true); err != nil {
			t.Fatalf("SetDraining(e1, true) error = %v, want nil", err)
		}
		f.reject(f.req(h1, 1, 1, e1), ledger.ReasonDraining, e1)
		a = f.grow(a, 1000, false)
		f.grow(a, 1000, false)
		f.wantReserved(e1, 1000, 1, 1)
	})
	t.Run("stale telemetry blocks", func(t *testing.T) {
		eng := engine(e1, 1000, 4)
		eng.StaleAfter, eng.StalePolicy = staleAfter, ledger.StaleBlock
		f := s.setup(t, elasticSpec(growHeadroom, eng, engine(e2, 1000, 4)), noWindow)
		f.observe(e1, 0, 0, time.Now(), true)
		a := f.acquire(f.req(h1, 500, 1, e1), e1)
		poll.Eventually(t, staleAfter+waitSlack, "engine e1 reported stale", func() bool {
			e, _ := engineStats(f.stats(), e1)
			return e.Stale
		})
		f.reject(f.req(h1, 1, 1, e1), ledger.ReasonTelemetryStale, e1)
		f.grow(a, 800, false)
		f.wantReserved(e1, 800, 1, 1)
	})
}

// testGrowRemovedEngine: an engine (and tenant) removed from the spec still
// accept growth of their leases, bounded by the engine's last spec.
func (s *suite) testGrowRemovedEngine(t *testing.T) {
	spec := elasticSpec(growHeadroom, engine(e1, 1000, 4), engine(e2, 1000, 4))
	spec.Tenants = append(spec.Tenants, ledger.TenantSpec{Name: "gone", KVShare: 1})
	f := s.setup(t, spec, noWindow)
	r := f.req(h1, 300, 1, e2)
	r.Tenant = "gone"
	a := f.acquire(r, e2)
	f.configure(elasticSpec(growHeadroom, engine(e1, 1000, 4)))
	before := snapshot(f.stats())
	_, err := f.l.Grow(f.ctx, a.Ref(), 1001)
	wantErr(t, "Grow above the removed engine's last capacity", err, ledger.ErrInvalidArgument)
	if got := snapshot(f.stats()); got.String() != before.String() {
		t.Errorf("refused Grow changed the pool:\n got %s\nwant %s", got, before)
	}
	f.grow(a, 1000, false)
	f.wantReserved(e2, 1000, 1, 1)
	f.wantTenantKV("gone", 1000)
}

// testGrowEqual: Grow to the lease's current size succeeds and changes
// nothing, so a retry after an unknown outcome is safe.
func (s *suite) testGrowEqual(t *testing.T) {
	f := s.setup(t, elasticSpec(growHeadroom, engine(e1, 1000, 4)), noWindow)
	a := f.acquire(f.req(h1, 400, 1, e1), e1)
	before := snapshot(f.stats())
	f.grow(a, 400, false)
	if got := snapshot(f.stats()); got.String() != before.String() {
		t.Errorf("Grow to the current size changed the pool:\n got %s\nwant %s", got, before)
	}
	f.growCounters("Grow to the current size", 0, 0, 0)
	a = f.grow(a, 600, false)
	f.grow(a, 600, false) // the retry of a growth that was applied
	f.wantReserved(e1, 600, 1, 1)
	f.growCounters("one growth and its retry", 1, 200, 0)
}

// testBadGrow: every malformed Grow gets its precise error and changes
// nothing, neither Stats nor the lease in List.
func (s *suite) testBadGrow(t *testing.T) {
	f := s.setup(t, elasticSpec(growHeadroom, engine(e1, 1000, 4), engine(e2, 2000, 4)), noWindow)
	held := f.acquire(f.req(h1, 400, 1, e1), e1)
	f.acquire(f.req(h2, 300, 1, e2), e2)
	ref := func(edit func(r *ledger.LeaseRef)) ledger.LeaseRef {
		r := held.Ref()
		edit(&r)
		return r
	}
	missing := ledger.MakeLeaseID(ledger.Fence{Epoch: f.epoch, Seq: 1 << 40})
	bad := ledger.ErrInvalidArgument
	cases := []struct {
		name string
		ref  ledger.LeaseRef
		kv   int64
		want error
	}{
		{"unknown lease", ref(func(r *ledger.LeaseRef) { r.ID = missing }), 500, ledger.ErrLeaseNotFound},
		{"another holder's lease", ref(func(r *ledger.LeaseRef) { r.Holder = h2 }), 500, ledger.ErrNotHolder},
		{"unknown holder", ref(func(r *ledger.LeaseRef) { r.Holder = "stranger" }), 500, ledger.ErrNotHolder},
		{"unknown pool", ref(func(r *ledger.LeaseRef) { r.Pool = "nope" }), 500, ledger.ErrUnknownPool},
		{"below the lease", held.Ref(), 399, bad},
		{"far below the lease", held.Ref(), 1, bad},
		{"above the engine's capacity", held.Ref(), 1001, bad},
		{"above its engine though another engine holds it", held.Ref(), 2000, bad},
		{"zero", held.Ref(), 0, bad},
		{"negative", held.Ref(), -400, bad},
		{"above MaxAmount", held.Ref(), ledger.MaxAmount + 1, bad},
		{"MaxAmount", held.Ref(), ledger.MaxAmount, bad},
		{"malformed id", ref(func(r *ledger.LeaseRef) { r.ID = "nope" }), 500, bad},
		{"empty holder", ref(func(r *ledger.LeaseRef) { r.Holder = ledger.NoHolder }), 500, bad},
	}
	before := snapshot(f.stats())
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := f.l.Grow(f.ctx, tc.ref, tc.kv)
			if err == nil {
				t.Fatalf("Grow(%s kv=%d) = lease kv=%d, want error %v", tc.name, tc.kv, r.Lease.KVTokens, tc.want)
			}
			wantErr(t, "Grow("+tc.name+")", err, tc.want)
			if got := snapshot(f.stats()); got.String() != before.String() {
				t.Errorf("Grow(%s) changed the pool:\n got %s\nwant %s", tc.name, got, before)
				before = got
			}
			if got := f.listed(held.ID); got.KVTokens != held.KVTokens || got.Overgrown || !got.Deadline.Equal(held.Deadline) {
				t.Errorf("List lease %s after Grow(%s) kv=%d overgrown=%v deadline %s, want it unchanged", held.ID, tc.name, got.KVTokens, got.Overgrown, got.Deadline)
			}
		})
	}
	f.growCounters("only refused Grows", 0, 0, 0)

	// An expired lease does not grow (and may be swept on the spot).
	r := f.shortReq(150*time.Millisecond, h1, 200, 1, e1)
	short := f.acquire(r, e1)
	f.waitPast(short.Deadline)
	_, err := f.l.Grow(f.ctx, short.Ref(), 300)
	wantErr(t, "Grow(expired)", err, ledger.ErrLeaseNotFound)
	f.sweepAll()
	f.wantReserved(e1, held.KVTokens, 1, 1)
	f.growCounters("Grow of an expired lease", 0, 0, 0)
	// So does a released one.
	f.release(held)
	_, err = f.l.Grow(f.ctx, held.Ref(), 500)
	wantErr(t, "Grow(released)", err, ledger.ErrLeaseNotFound)
	f.wantReserved(e1, 0, 0, 0)
}

// testReportedCapacity: an engine that reports less KV capacity than its
// spec claims is admitted (and grown) on the smaller figure; one that
// reports more is admitted on its spec.
func (s *suite) testReportedCapacity(t *testing.T) {
	t.Run("smaller bounds admission", func(t *testing.T) {
		f := s.setup(t, elasticSpec(growHeadroom, engine(e1, 1000, 4), engine(e2, 1000, 4)), noWindow)
		f.observeTotal(e1, 0, 600, 0, time.Now(), true)
		admissible := ledger.Fill(600, 1) - ledger.Fill(600, growHeadroom) // 540
		f.reject(f.req(h1, admissible+1, 1, e1), ledger.ReasonTooLarge, "")
		a := f.acquire(f.req(h1, admissible, 1, e1), e1)
		f.reject(f.req(h1, 1, 1, e1), ledger.ReasonEngineKV, e1)
		f.acquire(f.req(h1, 900, 1, e2), e2) // e2 reports nothing: its spec counts
		_, err := f.l.Grow(f.ctx, a.Ref(), 601)
		wantErr(t, "Grow above the reported capacity", err, ledger.ErrInvalidArgument)
		f.grow(a, 600, false)
		f.growCounters("growth to the reported capacity", 1, 600-admissible, 0)
	})
	t.Run("larger does not raise it", func(t *testing.T) {
		f := s.setup(t, elasticSpec(growHeadroom, engine(e1, 1000, 4), engine(e2, 1000, 4)), noWindow)
		f.observeTotal(e1, 0, 5000, 0, time.Now(), true)
		f.reject(f.req(h1, 901, 1, e1), ledger.ReasonTooLarge, "")
		a := f.acquire(f.req(h1, 900, 1, e1), e1)
		_, err := f.l.Grow(f.ctx, a.Ref(), 1001)
		wantErr(t, "Grow above the configured capacity", err, ledger.ErrInvalidArgument)
		f.grow(a, 1000, false)
	})
	t.Run("latest report counts", func(t *testing.T) {
		f := s.setup(t, elasticSpec(0, engine(e1, 1000, 4), engine(e2, 1000, 4)), noWindow)
		at := time.Now()
		f.observeTotal(e1, 0, 500, 0, at, true)
		f.reject(f.req(h1, 501, 1, e1), ledger.ReasonTooLarge, "")
		f.observeTotal(e1, 0, 0, 0, at.Add(time.Millisecond), true) // capacity unknown again
		f.acquire(f.req(h1, 1000, 1, e1), e1)
	})
	t.Run("worst_case pools too", func(t *testing.T) {
		spec := poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4))
		spec.Reserve = ledger.ReserveWorstCase
		f := s.setup(t, spec, noWindow)
		f.observeTotal(e1, 0, 700, 0, time.Now(), true)
		f.reject(f.req(h1, 701, 1, e1), ledger.ReasonTooLarge, "")
		f.acquire(f.req(h1, 700, 1, e1), e1)
		f.reject(f.req(h1, 1, 1, e1), ledger.ReasonEngineKV, e1)
	})
}

// testCompletionCounters: each release by the holder of a finished answer
// counts its completion length once for the pool and once for the tenant;
// an unfinished one counts its usage but no length; the histogram read
// back from Stats is the finished releases'.
func (s *suite) testCompletionCounters(t *testing.T) {
	spec := elasticSpec(growHeadroom, engine(e1, 10000, 40))
	spec.Tenants = append(spec.Tenants, ledger.TenantSpec{Name: tenantSmall, KVShare: 0.5})
	f := s.setup(t, spec, noWindow)
	releases := []struct {
		tenant ledger.TenantID
		usage  ledger.Usage
	}{
		{tenantAll, ledger.Usage{PromptTokens: 100, CompletionTokens: 70, Finished: true}},
		{tenantAll, ledger.Usage{PromptTokens: 10, CompletionTokens: 70, Finished: true}},
		{tenantAll, ledger.Usage{PromptTokens: 10, CompletionTokens: 900, Finished: true}},
		{tenantAll, ledger.Usage{Finished: true}},                        // no completion: bucket 1
		{tenantAll, ledger.Usage{PromptTokens: 10, CompletionTokens: 5}}, // cut: usage, no sample
		{tenantAll, ledger.Usage{}}, // failed before any answer
		{tenantSmall, ledger.Usage{PromptTokens: 5, CompletionTokens: 3, Finished: true}},
		{tenantSmall, ledger.Usage{PromptTokens: 5, CompletionTokens: 71, Finished: true}},
	}
	want := map[string]int64{}
	finished := int64(0)
	for _, rl := range releases {
		r := f.req(h1, 100, 1, e1)
		r.Tenant = rl.tenant
		l := f.acquire(r, e1)
		rel, err := f.l.Release(f.ctx, l.Ref(), rl.usage)
		if err != nil || !rel.Released {
			t.Fatalf("Release(%s, %+v) = Released %v, error %v; want true, nil", l.ID, rl.usage, rel.Released, err)
		}
		// Releasing again, or by another holder, counts nothing.
		if rel, err := f.l.Release(f.ctx, l.Ref(), rl.usage); err != nil || rel.Released {
			t.Errorf("Release(%s) again = Released %v, error %v; want false, nil", l.ID, rel.Released, err)
		}
		for _, name := range ledger.CompletionCounters(rl.usage, rl.tenant) {
			want[name]++
		}
		want[ledger.CounterActualComplete] += rl.usage.CompletionTokens
		if rl.usage.Finished {
			finished++
		}
	}
	other := f.acquire(f.req(h2, 100, 1, e1), e1)
	_, err := f.l.Release(f.ctx, ledger.LeaseRef{Pool: pool, ID: other.ID, Holder: h1}, ledger.Usage{CompletionTokens: 5000})
	wantErr(t, "Release by another holder", err, ledger.ErrNotHolder)
	f.wantCounters("completion counters of the releases", want)

	c := f.stats().Counters
	pool := ledger.CompletionHistogram(c, "")
	if pool.Total != finished {
		t.Errorf("pool completion histogram total = %d, want %d (one per finished release): %v", pool.Total, finished, pool.Counts)
	}
	b70, b900 := ledger.CompletionBucket(70), ledger.CompletionBucket(900)
	if pool.Counts[b70] != 3 || pool.Counts[b900] != 1 || pool.Counts[1] != 1 || pool.Counts[ledger.CompletionBucket(3)] != 1 {
		t.Errorf("pool completion histogram = %v, want 3 in %d (70, 70, 71), 1 in %d, 1 in 1, 1 in %d", pool.Counts, b70, b900, ledger.CompletionBucket(3))
	}
	if q := pool.Quantile(0.5); q != b70 {
		t.Errorf("pool completion median = %d, want %d", q, b70)
	}
	all := ledger.CompletionHistogram(c, tenantAll)
	small := ledger.CompletionHistogram(c, tenantSmall)
	if all.Total != 4 || small.Total != 2 || all.Counts[b70] != 2 || small.Counts[b70] != 1 {
		t.Errorf("tenant histograms %s = %v (total %d), %s = %v (total %d); want 4 with 2 in %d, and 2 with 1 in %d",
			tenantAll, all.Counts, all.Total, tenantSmall, small.Counts, small.Total, b70, b70)
	}
	if none := ledger.CompletionHistogram(c, "nobody"); none.Total != 0 {
		t.Errorf("histogram of a tenant with no releases = %v, want empty", none.Counts)
	}
}
