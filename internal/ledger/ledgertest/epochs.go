package ledgertest

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// recoveryWindow is the window of the epoch subtests: long enough to make
// several calls inside it.
const recoveryWindow = 800 * time.Millisecond

func (s *suite) testEpochs(t *testing.T) {
	t.Run("FencesIncrease", s.testFencesIncrease)
	t.Run("ConfigureIdempotent", s.testConfigureIdempotent)
	t.Run("EngineAndTenantRemoval", s.testRemoval)
	t.Run("ReassertAboveCapacity", s.testReassertAboveCapacity)
	t.Run("ReassertReplay", s.testReassertReplay)
	t.Run("ReassertRaisesSequence", s.testReassertRaisesSequence)
	t.Run("ReassertNeedsSession", s.testReassertNeedsSession)
	t.Run("LoseAndRecover", s.testLoseAndRecover)
}

func (s *suite) testFencesIncrease(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 100), engine(e2, 1000, 100)), noWindow)
	var prev ledger.Lease
	seen := map[ledger.LeaseID]bool{}
	for i := range 20 {
		h := h1
		if i%2 == 1 {
			h = h2
		}
		l := f.acquire(f.req(h, 10, 1, e1, e2), "")
		if seen[l.ID] {
			t.Errorf("grant %d reused lease id %s", i, l.ID)
		}
		seen[l.ID] = true
		if i > 0 && !prev.Fence.Less(l.Fence) {
			t.Errorf("grant %d fence %s, want after the previous grant's %s", i, l.Fence, prev.Fence)
		}
		if i%3 == 0 {
			f.release(l) // releases must not let a sequence be reused
		}
		prev = l
	}
}

func (s *suite) testConfigureIdempotent(t *testing.T) {
	spec := poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4))
	f := s.setup(t, spec, noWindow)
	a := f.acquire(f.req(h1, 700, 2, e1), e1)
	if err := f.l.SetDraining(f.ctx, pool, e2, true); err != nil {
		t.Fatalf("SetDraining(e2) error = %v", err)
	}
	f.observe(e1, 900, 3, time.Now(), true) // correction 200 KV, 1 slot
	before := snapshot(f.stats())
	ep := f.epoch
	if got := f.configure(spec); got != ep {
		t.Errorf("Configure(same spec) epoch = %d, want unchanged %d", got, ep)
	}
	if got := snapshot(f.stats()); got.String() != before.String() {
		t.Errorf("Configure(same spec) changed the pool:\n got %s\nwant %s", got, before)
	}
	// A changed capacity applies and keeps epoch, leases, drain and telemetry.
	spec.Engines[0].KVTokens = 2000
	if got := f.configure(spec); got != ep {
		t.Errorf("Configure(bigger e1) epoch = %d, want unchanged %d", got, ep)
	}
	st := f.stats()
	if st.CapacityKV != 3000 {
		t.Errorf("Stats CapacityKV after growing e1 = %d, want 3000", st.CapacityKV)
	}
	e, _ := engineStats(st, e2)
	if !e.Draining {
		t.Errorf("Stats engine e2 Draining = false after Configure, want the drain kept")
	}
	f.wantCorrection(e1, 200, 1)
	ls := f.list(ledger.Filter{Pool: pool})
	if len(ls) != 1 || ls[0].ID != a.ID {
		t.Errorf("List after Configure = %d leases, want %s kept", len(ls), a.ID)
	}
	f.keepAlive(h1, longTTL) // sessions survive
	f.reject(f.req(h1, 1101, 1, e1), ledger.ReasonEngineKV, e1)
	f.acquire(f.req(h1, 1100, 1, e1), e1)
}

func (s *suite) testRemoval(t *testing.T) {
	spec := poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4))
	spec.Tenants = append(spec.Tenants, ledger.TenantSpec{Name: "gone", KVShare: 0.5})
	f := s.setup(t, spec, noWindow)
	a := f.acquire(f.req(h1, 300, 1, e2), e2)
	gr := f.req(h1, 200, 1, e1)
	gr.Tenant = "gone"
	b := f.acquire(gr, e1)

	spec2 := poolSpec(pool, engine(e1, 1000, 4))
	if got := f.configure(spec2); got != f.epoch {
		t.Errorf("Configure(without e2) epoch = %d, want unchanged", got)
	}
	st := f.stats()
	e, ok := engineStats(st, e2)
	if !ok {
		t.Fatalf("Stats after removing e2 with a lease lacks e2, want it kept (Removed) until its leases end")
	}
	if !e.Removed || e.ReservedKV != 300 || e.ReservedSlots != 1 || e.Leases != 1 {
		t.Errorf("Stats removed engine e2 = removed %v kv=%d slots=%d leases=%d, want removed true kv=300 slots=1 leases=1",
			e.Removed, e.ReservedKV, e.ReservedSlots, e.Leases)
	}
	if ts, ok := tenantStats(st, "gone"); !ok || ts.ReservedKV != 200 || ts.Leases != 1 || !ts.Removed {
		t.Errorf("Stats removed tenant gone = present %v kv=%d leases=%d removed %v, want its counters kept (kv=200, 1 lease) and removed",
			ok, ts.ReservedKV, ts.Leases, ts.Removed)
	}
	if ts, ok := tenantStats(st, tenantAll); !ok || ts.Removed {
		t.Errorf("Stats configured tenant %s = present %v removed %v, want present and not removed", tenantAll, ok, ts.Removed)
	}
	if ls := f.list(ledger.Filter{Pool: pool}); len(ls) != 2 {
		t.Errorf("List after removals = %d leases, want 2 kept visible", len(ls))
	}
	_, err := f.l.Acquire(f.ctx, f.req(h1, 1, 1, e2))
	wantErr(t, "Acquire on a removed engine", err, ledger.ErrUnknownEngine)
	gr2 := f.req(h1, 1, 1, e1)
	gr2.Tenant = "gone"
	_, err = f.l.Acquire(f.ctx, gr2)
	wantErr(t, "Acquire for a removed tenant", err, ledger.ErrUnknownTenant)
	if _, err := f.l.Renew(f.ctx, a.Ref(), longTTL); err != nil {
		t.Errorf("Renew on a removed engine error = %v, want nil", err)
	}
	f.release(a)
	f.release(b)
	st = f.stats()
	if e, ok := engineStats(st, e2); ok && (e.ReservedKV != 0 || e.Leases != 0) {
		t.Errorf("Stats removed engine e2 after its leases ended = kv=%d leases=%d, want gone or zero", e.ReservedKV, e.Leases)
	}
	if st.Leases != 0 {
		t.Errorf("Stats Leases = %d, want 0", st.Leases)
	}
}

// fabricate returns a lease as its holder remembers it, for Reassert.
func (f *fixture) fabricate(h ledger.HolderID, eng ledger.EngineID, kv, slots int64, fence ledger.Fence) ledger.Lease {
	now := time.Now().Truncate(time.Millisecond)
	return ledger.Lease{
		ID: ledger.MakeLeaseID(fence), Pool: f.spec.Name, Engine: eng, Tenant: tenantAll, Priority: prioStd,
		KVTokens: kv, Slots: slots, Holder: h, RequestID: ledger.RequestID("ra-" + ledger.MakeLeaseID(fence)),
		Created: now, Deadline: now.Add(longTTL), Fence: fence,
	}
}

// reassert wants Reassert to accept l as a new, flagged lease.
func (f *fixture) reassert(l ledger.Lease) ledger.Lease {
	f.t.Helper()
	g, err := f.l.Reassert(f.ctx, l, longTTL)
	if err != nil {
		f.t.Fatalf("Reassert(%s kv=%d on %s) error = %v, want accepted", l.ID, l.KVTokens, l.Engine, err)
	}
	got := g.Lease
	if g.Replayed {
		f.t.Errorf("Reassert(%s) Replayed = true, want false for a lease the ledger did not have", l.ID)
	}
	if !got.Reasserted || got.ID != l.ID || got.Fence != l.Fence || got.Engine != l.Engine || got.KVTokens != l.KVTokens ||
		got.Slots != l.Slots || got.Holder != l.Holder {
		f.t.Errorf("Reassert lease = %s fence %s reasserted=%v %s kv=%d slots=%d holder=%s, want %s fence %s reasserted=true %s kv=%d slots=%d holder=%s",
			got.ID, got.Fence, got.Reasserted, got.Engine, got.KVTokens, got.Slots, got.Holder,
			l.ID, l.Fence, l.Engine, l.KVTokens, l.Slots, l.Holder)
	}
	if g.Epoch != f.epoch {
		f.t.Errorf("Reassert epoch = %d, want the current %d", g.Epoch, f.epoch)
	}
	return got
}

func (s *suite) testReassertAboveCapacity(t *testing.T) {
	// e2 keeps t1's pool-wide quota above e1's overload.
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4), engine(e2, 5000, 4)), noWindow)
	a := f.reassert(f.fabricate(h1, e1, 800, 1, ledger.Fence{Epoch: f.epoch, Seq: 100}))
	b := f.reassert(f.fabricate(h2, e1, 800, 1, ledger.Fence{Epoch: f.epoch, Seq: 101}))
	// Real load above capacity is counted, not refused.
	f.wantReserved(e1, 1600, 2, 2)
	f.wantCounters("", map[string]int64{ledger.CounterReasserts: 2})
	ls := f.list(ledger.Filter{Pool: pool})
	if len(ls) != 2 || !ls[0].Reasserted || !ls[1].Reasserted {
		t.Errorf("List = %d leases, want 2 flagged Reasserted", len(ls))
	}
	// The overload blocks new grants until it drains.
	f.reject(f.req(h1, 1, 1, e1), ledger.ReasonEngineKV, e1)
	f.release(a)
	f.reject(f.req(h1, 201, 1, e1), ledger.ReasonEngineKV, e1)
	f.acquire(f.req(h1, 200, 1, e1), e1)
	if _, err := f.l.Renew(f.ctx, b.Ref(), longTTL); err != nil {
		t.Errorf("Renew(reasserted) error = %v, want nil", err)
	}
}

func (s *suite) testReassertReplay(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4)), noWindow)
	a := f.acquire(f.req(h1, 300, 1, e1), e1)
	// Reassert of a lease that still exists returns it.
	again := a
	again.KVTokens = 900
	g, err := f.l.Reassert(f.ctx, again, longTTL)
	if err != nil {
		t.Fatalf("Reassert(existing %s) error = %v, want the existing lease", a.ID, err)
	}
	if !g.Replayed {
		t.Errorf("Reassert(existing) Replayed = false, want true")
	}
	sameLease(t, "Reassert(existing)", g.Lease, a)
	f.wantReserved(e1, 300, 1, 1)
	// So does a second Reassert of a reasserted lease.
	r := f.reassert(f.fabricate(h2, e1, 100, 1, ledger.Fence{Epoch: f.epoch, Seq: 50}))
	g, err = f.l.Reassert(f.ctx, r, longTTL)
	if err != nil || !g.Replayed || g.Lease.ID != r.ID {
		t.Errorf("second Reassert = %s replayed=%v error %v, want %s replayed", g.Lease.ID, g.Replayed, err, r.ID)
	}
	f.wantReserved(e1, 400, 2, 2)
}

func (s *suite) testReassertRaisesSequence(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 10)), noWindow)
	first := f.acquire(f.req(h1, 10, 1, e1), e1)
	hi := ledger.Fence{Epoch: f.epoch, Seq: first.Fence.Seq + 1000}
	f.reassert(f.fabricate(h1, e1, 10, 1, hi))
	next := f.acquire(f.req(h1, 10, 1, e1), e1)
	if !hi.Less(next.Fence) {
		t.Errorf("grant after reasserting fence %s got fence %s, want a later one (the sequence raised)", hi, next.Fence)
	}
	// A lease of an older epoch keeps its fence but does not raise anything.
	old := ledger.Fence{Epoch: f.epoch - 1, Seq: 1 << 40}
	f.reassert(f.fabricate(h2, e1, 10, 1, old))
	last := f.acquire(f.req(h1, 10, 1, e1), e1)
	if !next.Fence.Less(last.Fence) || last.Fence.Epoch != f.epoch {
		t.Errorf("grant after reasserting an old-epoch lease got fence %s, want after %s in epoch %d", last.Fence, next.Fence, f.epoch)
	}
}

func (s *suite) testReassertNeedsSession(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4)), noWindow)
	before := snapshot(f.stats())
	_, err := f.l.Reassert(f.ctx, f.fabricate("ghost", e1, 10, 1, ledger.Fence{Epoch: f.epoch, Seq: 9}), longTTL)
	wantErr(t, "Reassert without a session", err, ledger.ErrNoSession)
	_, err = f.l.Reassert(f.ctx, f.fabricate(h1, "nope", 10, 1, ledger.Fence{Epoch: f.epoch, Seq: 9}), longTTL)
	wantErr(t, "Reassert on an unknown engine", err, ledger.ErrUnknownEngine)
	l := f.fabricate(h1, e1, 10, 1, ledger.Fence{Epoch: f.epoch, Seq: 9})
	l.Tenant = "nope"
	_, err = f.l.Reassert(f.ctx, l, longTTL)
	wantErr(t, "Reassert for an unknown tenant", err, ledger.ErrUnknownTenant)
	l = f.fabricate(h1, e1, 10, 1, ledger.Fence{Epoch: f.epoch, Seq: 9})
	l.Priority = "nope"
	_, err = f.l.Reassert(f.ctx, l, longTTL)
	wantErr(t, "Reassert with an unknown priority", err, ledger.ErrUnknownPriority)
	if got := snapshot(f.stats()); got.String() != before.String() {
		t.Errorf("refused Reasserts changed the pool:\n got %s\nwant %s", got, before)
	}
}

// waitRecovered waits until the pool's recovery window, if any, is over.
func (f *fixture) waitRecovered() {
	f.t.Helper()
	if until := f.stats().RecoveringUntil; !until.IsZero() {
		f.waitPast(until)
	}
}

func (s *suite) testLoseAndRecover(t *testing.T) {
	if s.b.Lose == nil {
		t.Skip("backend has no Lose")
	}
	spec := poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4))
	f := s.setup(t, spec, ledger.Options{RecoveryWindow: recoveryWindow})
	f.waitRecovered()
	held := f.acquire(f.req(h1, 600, 1, e1), e1)
	other := f.acquire(f.req(h2, 100, 1, e2), e2)
	epoch1 := f.epoch

	l2 := s.b.Lose(t, f.l)
	if l2 == nil {
		t.Fatal("Backend.Lose returned a nil ledger")
	}
	if l2 != f.l {
		t.Cleanup(func() { _ = l2.Close() })
		f.l = l2
	}
	_, err := f.l.Acquire(f.ctx, f.req(h1, 1, 1, e1))
	wantErr(t, "Acquire after ledger loss", err, ledger.ErrUnknownPool)

	epoch2 := f.configure(spec)
	if epoch2 <= epoch1 {
		t.Fatalf("Configure after loss epoch = %d, want greater than %d", epoch2, epoch1)
	}
	sess := f.keepAlive(h1, longTTL)
	if sess.RecoveringUntil.IsZero() {
		t.Errorf("KeepAlive in a new epoch RecoveringUntil is zero, want the end of the recovery window")
	}
	f.keepAlive(h2, longTTL)

	// New grants on engines without telemetry wait for the window (the
	// default grace, 1s, outlasts it); the hint is the pool's or the time
	// left, whichever is shorter.
	st := f.stats()
	if st.RecoveringUntil.IsZero() || st.RecoveringUntil.After(st.Now.Add(recoveryWindow)) {
		t.Errorf("Stats RecoveringUntil = %s at %s, want within the %s window", st.RecoveringUntil.Format(time.StampMilli), st.Now.Format(time.StampMilli), recoveryWindow)
	}
	rej := f.reject(f.req(h1, 1, 1, e1, e2), ledger.ReasonRecovering, e1)
	st2 := f.stats()
	lo, hi := min(retryHint, st.RecoveringUntil.Sub(st2.Now)), min(retryHint, st.RecoveringUntil.Sub(st.Now)+time.Millisecond)
	if rej.RetryAfter < lo || rej.RetryAfter > hi {
		t.Errorf("recovering RetryAfter = %s, want the smaller of the pool's hint %s and the remaining window, in [%s, %s]", rej.RetryAfter, retryHint, lo, hi)
	}
	// Holders re-assert what they hold; renew and release keep working.
	r := f.reassert(held)
	if !r.Reasserted || r.Fence.Epoch != epoch1 {
		t.Errorf("reasserted lease fence %s reasserted=%v, want its old fence in epoch %d, flagged", r.Fence, r.Reasserted, epoch1)
	}
	o := f.reassert(other)
	if _, err := f.l.Renew(f.ctx, r.Ref(), longTTL); err != nil {
		t.Errorf("Renew during the recovery window error = %v, want nil", err)
	}
	_, err = f.l.Resize(f.ctx, r.Ref(), 700)
	if err == nil {
		t.Errorf("Resize growth during the recovery window succeeded, want rejection %s", ledger.ReasonRecovering)
	} else {
		f.checkRejection("Resize growth during recovery", err, ledger.ReasonRecovering, e1)
	}
	if _, err := f.l.Resize(f.ctx, o.Ref(), 50); err != nil {
		t.Errorf("Resize shrink during the recovery window error = %v, want nil", err)
	}
	f.release(o)
	f.wantReserved(e1, 600, 1, 1)

	// After the window grants resume, counting the reasserted load.
	f.waitPast(st.RecoveringUntil)
	f.reject(f.req(h1, 401, 1, e1), ledger.ReasonEngineKV, e1)
	n := f.acquire(f.req(h1, 400, 1, e1), e1)
	if !held.Fence.Less(n.Fence) || n.Fence.Epoch != epoch2 {
		t.Errorf("first grant of the new epoch fence %s, want in epoch %d and after the old %s", n.Fence, epoch2, held.Fence)
	}
	f.release(r)
	f.wantReserved(e1, 400, 1, 1)
}
