package ledgertest

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/poll"
)

// staleAfter is the telemetry staleness of the stale-policy subtests: long
// enough for the checks right after an observation to run while it is fresh.
const staleAfter = 500 * time.Millisecond

func (s *suite) testTelemetry(t *testing.T) {
	t.Run("ChargesUnaccounted", s.testObserveCharges)
	t.Run("NoCreditBelowReserved", s.testObserveNoCredit)
	t.Run("NotNewerIgnored", s.testObserveNotNewer)
	t.Run("StalePolicies", s.testStalePolicies)
	t.Run("EndedLeaseChargedUntilObserved", s.testEndedLeaseCharged)
	t.Run("OrphanHoldOutlastsObservations", s.testOrphanHold)
}

// testOrphanHold: with Options.OrphanHold a lease the ledger ends on an
// observed engine stays charged in full through observations that arrive
// within the hold (its request may still grow), and the first observation
// after the hold measures the engine alone again.
func (s *suite) testOrphanHold(t *testing.T) {
	// Longer than the time the suite may take to see the session end
	// (2 × MinTTL late, and a background sweep may end it on time).
	hold := time.Second + 4*max(s.b.MinTTL, time.Millisecond)
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4)), ledger.Options{RecoveryWindow: -1, OrphanHold: hold})
	ended := f.endSession()
	f.wantCorrection(e1, 600, 2)
	f.wantOrphan(e1, 600, 2, ended.Add(hold))
	f.wantCorrection(e2, 0, 0) // never observed: free at once
	f.wantOrphan(e2, 0, 0, time.Time{})
	f.acquire(f.req(h1, 1000, 4, e2), e2)
	// Within the hold an observation (the orphan holds 100 tokens and its
	// slot so far) is charged on top of the held 600 and 2.
	f.observe(e1, 100, 1, time.Now(), true)
	f.wantCorrection(e1, 700, 3)
	f.wantOrphan(e1, 600, 2, ended.Add(hold))
	f.reject(f.req(h1, 301, 1, e1), ledger.ReasonEngineKV, e1)
	f.reject(f.req(h1, 1, 2, e1), ledger.ReasonEngineSlots, e1)
	f.acquire(f.req(h1, 300, 1, e1), e1)
	// The first observation after the hold measures the engine alone: the
	// orphan was aborted, only the live lease runs.
	f.waitPast(ended.Add(hold))
	f.observe(e1, 300, 1, time.Now(), true)
	f.wantCorrection(e1, 0, 0)
	f.wantOrphan(e1, 0, 0, time.Time{})
	f.acquire(f.req(h1, 700, 3, e1), e1)
}

// testEndedLeaseCharged: a lease the ledger ends (session death, deadline)
// may still run on its engine, so on an observed engine it stays charged
// to the correction until the next observation; on a never-observed engine
// its capacity returns at once. A lease its holder releases is not charged.
func (s *suite) testEndedLeaseCharged(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4)), noWindow)
	ended := f.endSession()
	// Revoked with the dead session: charged on e1 until it is observed.
	f.wantCorrection(e1, 600, 2)
	f.wantOrphan(e1, 600, 2, ended)
	f.reject(f.req(h1, 401, 1, e1), ledger.ReasonEngineKV, e1)
	f.wantCorrection(e2, 0, 0)
	f.acquire(f.req(h1, 1000, 4, e2), e2)
	// The next observation measures it: the engine had aborted it.
	f.observe(e1, 0, 0, time.Now().Add(time.Millisecond), true)
	f.wantCorrection(e1, 0, 0)
	f.wantOrphan(e1, 0, 0, time.Time{})
	// A lease whose deadline passes is charged the same way.
	r := f.shortReq(200*time.Millisecond, h1, 300, 1, e1)
	a := f.acquire(r, e1)
	f.waitPast(a.Deadline)
	f.sweepAll()
	f.wantReserved(e1, 0, 0, 0)
	f.wantCorrection(e1, 300, 1)
	f.reject(f.req(h1, 701, 1, e1), ledger.ReasonEngineKV, e1)
	f.acquire(f.req(h1, 700, 3, e1), e1)
	f.observe(e1, 0, 0, time.Now().Add(2*time.Millisecond), true)
	f.wantCorrection(e1, 0, 0)
}

// endSession observes e1 (e2 is never observed), has holder hx lease 600
// KV tokens and 2 slots on e1 and 700 and 3 on e2, and h1 lease 100 and 1
// on e1 and release it (never charged), then lets hx's session die and
// sweeps: both engines hold no lease after. It returns the ledger time
// after the sweep (no earlier than the leases' end).
func (f *fixture) endSession() time.Time {
	f.t.Helper()
	f.observe(e1, 0, 0, time.Now(), true)
	sess := f.keepAlive("hx", f.ttl(300*time.Millisecond))
	f.acquire(f.req("hx", 600, 2, e1), e1)
	f.acquire(f.req("hx", 700, 3, e2), e2)
	released := f.acquire(f.req(h1, 100, 1, e1), e1)
	if _, err := f.l.Release(f.ctx, released.Ref(), ledger.Usage{}); err != nil {
		f.t.Fatalf("Release: %v", err)
	}
	f.wantCorrection(e1, 0, 0) // released by its holder: not charged
	f.waitPast(sess.Expires)
	f.sweepAll()
	ended := f.ledgerNow()
	f.wantReserved(e1, 0, 0, 0)
	f.wantReserved(e2, 0, 0, 0)
	return ended
}

// observe applies an observation of eng that reports no KV capacity of its
// own (so the configured one counts) and wants it applied or not.
func (f *fixture) observe(eng ledger.EngineID, kvUsed, running int64, at time.Time, wantApplied bool) {
	f.t.Helper()
	f.observeTotal(eng, kvUsed, 0, running, at, wantApplied)
}

// observeTotal is observe with the engine's reported KV capacity.
func (f *fixture) observeTotal(eng ledger.EngineID, kvUsed, kvTotal, running int64, at time.Time, wantApplied bool) {
	f.t.Helper()
	obs := ledger.Observation{Pool: f.spec.Name, Engine: eng, KVTokensUsed: kvUsed, KVTokensTotal: kvTotal, Running: running, ObservedAt: at}
	got, err := f.l.Observe(f.ctx, obs)
	if err != nil {
		f.t.Fatalf("Observe(%s kv=%d running=%d at %s) error = %v, want nil", eng, kvUsed, running, at.Format(time.StampMicro), err)
	}
	if got.Applied != wantApplied {
		f.t.Errorf("Observe(%s kv=%d running=%d at %s) Applied = %v, want %v", eng, kvUsed, running, at.Format(time.StampMicro), got.Applied, wantApplied)
	}
	if got.Epoch != f.epoch {
		f.t.Errorf("Observe epoch = %d, want %d", got.Epoch, f.epoch)
	}
}

// wantOrphan checks the part of an engine's correction held for leases the
// ledger ended: its amounts, and that it is held until no later than
// latest (zero: nothing held, no time).
func (f *fixture) wantOrphan(eng ledger.EngineID, kv, slots int64, latest time.Time) {
	f.t.Helper()
	e, _ := engineStats(f.stats(), eng)
	if e.OrphanKV != kv || e.OrphanSlots != slots {
		f.t.Errorf("Stats engine %s orphan charge kv=%d slots=%d, want kv=%d slots=%d", eng, e.OrphanKV, e.OrphanSlots, kv, slots)
	}
	switch {
	case latest.IsZero() && kv == 0 && slots == 0:
	case e.OrphanUntil.After(latest.Add(f.slack() + time.Millisecond)):
		f.t.Errorf("Stats engine %s orphan charge held until %s, want no later than %s", eng, e.OrphanUntil.Format(time.StampMilli), latest.Format(time.StampMilli))
	}
}

// wantCorrection checks an engine's telemetry correction.
func (f *fixture) wantCorrection(eng ledger.EngineID, kv, slots int64) {
	f.t.Helper()
	e, _ := engineStats(f.stats(), eng)
	if e.CorrectionKV != kv || e.CorrectionSlots != slots {
		f.t.Errorf("Stats engine %s correction kv=%d slots=%d, want kv=%d slots=%d", eng, e.CorrectionKV, e.CorrectionSlots, kv, slots)
	}
}

func (s *suite) testObserveCharges(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 10)), noWindow)
	f.acquire(f.req(h1, 200, 1, e1), e1)
	at := time.Now()
	f.observe(e1, 500, 3, at, true)
	// Correction = max(0, observed - reserved): 300 KV tokens, 2 slots.
	f.wantCorrection(e1, 300, 2)
	e, _ := engineStats(f.stats(), e1)
	if e.LastObservation.KVTokensUsed != 500 || e.LastObservation.Running != 3 {
		t.Errorf("Stats LastObservation kv=%d running=%d, want kv=500 running=3", e.LastObservation.KVTokensUsed, e.LastObservation.Running)
	}
	if e.ObservedAt.IsZero() {
		t.Errorf("Stats ObservedAt is zero after an applied observation, want the ledger time it arrived")
	}
	// Used: 200+300 KV tokens, 1+2 slots, of 1000 and 10.
	f.reject(f.req(h1, 1, 8, e1), ledger.ReasonEngineSlots, e1)
	f.reject(f.req(h1, 501, 1, e1), ledger.ReasonEngineKV, e1)
	f.acquire(f.req(h1, 500, 7, e1), e1)
}

func (s *suite) testObserveNoCredit(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 10), engine(e2, 1000, 10)), noWindow)
	f.acquire(f.req(h1, 600, 2, e1), e1)
	// The engine reports less than is reserved (requests not yet started):
	// the correction is zero, never a credit.
	f.observe(e1, 100, 0, time.Now(), true)
	f.wantCorrection(e1, 0, 0)
	f.reject(f.req(h1, 401, 1, e1), ledger.ReasonEngineKV, e1)
	f.acquire(f.req(h1, 400, 8, e1), e1)
}

func (s *suite) testObserveNotNewer(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 10)), noWindow)
	at := time.Now()
	f.observe(e1, 500, 1, at, true)
	f.observe(e1, 900, 5, at, false)                   // the same scrape again
	f.observe(e1, 900, 5, at.Add(-time.Second), false) // an older one
	f.wantCorrection(e1, 500, 1)
	e, _ := engineStats(f.stats(), e1)
	if e.LastObservation.KVTokensUsed != 500 || !e.LastObservation.ObservedAt.Equal(at) {
		t.Errorf("Stats LastObservation kv=%d at %s, want kv=500 at %s (the applied one)",
			e.LastObservation.KVTokensUsed, e.LastObservation.ObservedAt.Format(time.StampMicro), at.Format(time.StampMicro))
	}
	f.reject(f.req(h1, 501, 1, e1), ledger.ReasonEngineKV, e1)
	f.observe(e1, 200, 0, at.Add(time.Millisecond), true)
	f.wantCorrection(e1, 200, 0)
	f.acquire(f.req(h1, 800, 1, e1), e1)
}

// testStalePolicies observes e1 (or not), checks admission while the
// observation is fresh, waits until the ledger reports it stale and checks
// admission again under each policy.
func (s *suite) testStalePolicies(t *testing.T) {
	cases := []struct {
		name    string
		policy  ledger.StalePolicy
		observe bool // observe 300 KV tokens in use at the start
		// fresh runs while the observation is fresh, stale after.
		fresh, stale func(f *fixture)
	}{
		{name: "hold keeps the correction", policy: ledger.StaleHold, observe: true,
			fresh: func(f *fixture) { f.reject(f.req(h1, 701, 1, e1), ledger.ReasonEngineKV, e1) },
			stale: func(f *fixture) {
				f.reject(f.req(h1, 701, 1, e1), ledger.ReasonEngineKV, e1)
				f.acquire(f.req(h1, 700, 1, e1), e1)
			}},
		{name: "default policy is hold", policy: "", observe: true,
			fresh: func(f *fixture) {},
			stale: func(f *fixture) { f.reject(f.req(h1, 701, 1, e1), ledger.ReasonEngineKV, e1) }},
		{name: "ignore drops the correction", policy: ledger.StaleIgnore, observe: true,
			fresh: func(f *fixture) { f.reject(f.req(h1, 701, 1, e1), ledger.ReasonEngineKV, e1) },
			stale: func(f *fixture) { f.acquire(f.req(h1, 1000, 1, e1), e1) }},
		{name: "block refuses grants", policy: ledger.StaleBlock, observe: true,
			fresh: func(f *fixture) { f.acquire(f.req(h1, 700, 1, e1), e1) },
			stale: func(f *fixture) {
				f.reject(f.req(h1, 1, 1, e1), ledger.ReasonTelemetryStale, e1)
				f.acquire(f.req(h1, 1, 1, e1, e2), e2)
				f.observe(e1, 0, 0, time.Now().Add(time.Second), true)
				f.acquire(f.req(h1, 1, 1, e1), e1)
			}},
		{name: "block never observed", policy: ledger.StaleBlock,
			fresh: func(f *fixture) {},
			stale: func(f *fixture) {
				f.reject(f.req(h1, 1, 1, e1), ledger.ReasonTelemetryStale, e1)
				f.acquire(f.req(h1, 1, 1, e1, e2), e2)
				f.observe(e1, 0, 0, time.Now(), true)
				f.acquire(f.req(h1, 1, 1, e1), e1)
			}},
		{name: "hold never observed", policy: ledger.StaleHold,
			fresh: func(f *fixture) {},
			stale: func(f *fixture) { f.acquire(f.req(h1, 1000, 1, e1), e1) }},
		{name: "ignore never observed", policy: ledger.StaleIgnore,
			fresh: func(f *fixture) {},
			stale: func(f *fixture) { f.acquire(f.req(h1, 1000, 1, e1), e1) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eng := engine(e1, 1000, 10)
			eng.StaleAfter, eng.StalePolicy = staleAfter, tc.policy
			f := s.setup(t, poolSpec(pool, eng, engine(e2, 1000, 10)), noWindow)
			if tc.observe {
				f.observe(e1, 300, 0, time.Now(), true)
				st := f.stats()
				e, _ := engineStats(st, e1)
				if e.Stale {
					t.Fatalf("Stats engine e1 Stale = true right after an observation (now %s, observed at %s), want false",
						st.Now.Format(time.StampMilli), e.ObservedAt.Format(time.StampMilli))
				}
				tc.fresh(f)
			}
			var e ledger.EngineStats
			var now time.Time
			poll.Eventually(t, staleAfter+waitSlack, "engine e1 reported stale", func() bool {
				st := f.stats()
				e, _ = engineStats(st, e1)
				now = st.Now
				return e.Stale
			})
			if tc.observe && now.Sub(e.ObservedAt) <= staleAfter {
				t.Errorf("Stats engine e1 Stale = true at %s, observed at %s: want stale only after %s",
					now.Format(time.StampMilli), e.ObservedAt.Format(time.StampMilli), staleAfter)
			}
			tc.stale(f)
		})
	}
}
