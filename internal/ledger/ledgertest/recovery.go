package ledgertest

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// The recovery rule after a new epoch (the package doc of ledger,
// "Recovery"; docs/design.md, "Recovery after ledger loss"): while the
// window is open an engine takes grants only once an observation taken
// and arrived a dispatch grace after the epoch began shows what it holds,
// and counts its reservations plus all it shows.

// Windows of the recovery subtests: long enough that nothing ends while a
// subtest works inside it, and short for the one that waits for its end.
const (
	longWindow  = 30 * time.Second
	shortWindow = time.Second
	// recoveryGrace is the dispatch grace (Options.ConfirmGrace) of the
	// recovery subtests.
	recoveryGrace = 500 * time.Millisecond
)

func (s *suite) testRecovery(t *testing.T) {
	t.Run("EngineRecoversOnFreshObservation", s.testRecoversOnObservation)
	t.Run("WorstCaseRecoversIdle", s.testWorstCaseRecoversIdle)
	t.Run("StaleTelemetryRecoversNot", s.testStaleRecoversNot)
	t.Run("WindowEnds", s.testWindowEnds)
	t.Run("PartitionedHolder", s.testPartitionedHolder)
}

// recoverySince returns the instant an observation must have been taken
// and have arrived at or after for an engine to recover in the fixture's
// current epoch, from its window's nominal end (read while it is open).
func (f *fixture) recoverySince(window time.Duration) time.Time {
	f.t.Helper()
	st := f.stats()
	if st.RecoveringUntil.IsZero() {
		f.t.Fatalf("Stats RecoveringUntil is zero right after a new epoch, want its %s window open", window)
	}
	return ledger.RecoverySince(st.RecoveringUntil.Add(-window), recoveryGrace)
}

// observeFull applies obs (in the fixture's pool) and wants it applied or
// not.
func (f *fixture) observeFull(obs ledger.Observation, wantApplied bool) {
	f.t.Helper()
	obs.Pool = f.spec.Name
	got, err := f.l.Observe(f.ctx, obs)
	if err != nil {
		f.t.Fatalf("Observe(%+v) error = %v, want nil", obs, err)
	}
	if got.Applied != wantApplied {
		f.t.Errorf("Observe(%s kv=%d running=%d waiting=%d taken %s) Applied = %v, want %v", obs.Engine, obs.KVTokensUsed,
			obs.Running, obs.Waiting, obs.ObservedAt.Format(time.StampMilli), got.Applied, wantApplied)
	}
}

// wantRecovered wants a KeepAlive in the open window to count n engines
// recovered (ledger.Session.Recovered).
func (f *fixture) wantRecovered(why string, n int) {
	f.t.Helper()
	s := f.keepAlive(h1, longTTL)
	if s.RecoveringUntil.IsZero() || s.Recovered != n {
		f.t.Errorf("%s: KeepAlive = recovering until %s, %d engines recovered; want the window open and %d", why,
			s.RecoveringUntil.Format(time.StampMilli), s.Recovered, n)
	}
}

// rejectRecovering wants Acquire to refuse r for recovery on eng, with a
// retry hint no longer than the pool's (an engine may recover at its next
// observation).
func (f *fixture) rejectRecovering(why string, r ledger.AcquireRequest, eng ledger.EngineID) {
	f.t.Helper()
	rej := f.reject(r, ledger.ReasonRecovering, eng)
	if rej.RetryAfter > retryHint {
		f.t.Errorf("%s: recovering RetryAfter = %s, want at most the pool's hint %s", why, rej.RetryAfter, retryHint)
	}
}

func (s *suite) testRecoversOnObservation(t *testing.T) {
	// e1 recovers on an observation taken and arrived after since; e2 is
	// never observed; e3's only observation was taken before since.
	spec := poolSpec(pool, engine(e1, 1000, 8), engine(e2, 1000, 8), engine(e3, 1000, 8))
	f := s.setup(t, spec, ledger.Options{RecoveryWindow: longWindow, ConfirmGrace: recoveryGrace})
	since := f.recoverySince(longWindow)
	f.rejectRecovering("fresh epoch, nothing observed", f.req(h1, 100, 1, e1, e2, e3), e1)
	f.wantRecovered("nothing observed", 0)

	// Stamped at since but arriving before it: the ledger's own clock
	// says it may have been taken earlier.
	if early := f.ledgerNow(); early.Before(since.Add(-50 * time.Millisecond)) {
		f.observeFull(ledger.Observation{Engine: e1, ObservedAt: since}, true)
		f.rejectRecovering("observation arrived before since", f.req(h1, 100, 1, e1), e1)
	} else {
		t.Logf("setup took until %s, past since %s less 50ms: the early-arrival case is not exercised", early.Format(time.StampMilli), since.Format(time.StampMilli))
	}

	// h2 re-asserts a lease on e1 and one on e2.
	ra := f.reassert(f.fabricate(h2, e1, 200, 1, ledger.Fence{Epoch: f.epoch, Seq: 7}))
	rb := f.reassert(f.fabricate(h2, e2, 100, 1, ledger.Fence{Epoch: f.epoch, Seq: 8}))
	f.waitPast(since)

	// Taken before since, arriving after: not fresh enough.
	f.observeFull(ledger.Observation{Engine: e3, ObservedAt: since.Add(-time.Millisecond)}, true)
	f.rejectRecovering("observation taken before since", f.req(h1, 100, 1, e3), e3)

	// Taken at since, arriving after: e1 recovers, and counts its lease
	// plus all the observation shows (not max(0, observed - reserved)).
	f.wantRecovered("only stale or early observations", 0)
	f.observeFull(ledger.Observation{Engine: e1, KVTokensUsed: 300, Running: 2, Waiting: 1, ObservedAt: since.Add(time.Millisecond)}, true)
	f.wantRecovered("e1 observed fresh", 1)
	f.wantCorrection(e1, 300, 3)
	// Used on e1: 200 + 300 KV, 1 + 3 slots of 8; e3 and e2 still refuse.
	f.reject(f.req(h1, 501, 1, e3, e2, e1), ledger.ReasonRecovering, e3)
	n := f.acquire(f.req(h1, 500, 1, e3, e2, e1), e1)
	f.reject(f.req(h1, 1, 1, e1), ledger.ReasonEngineKV, e1)
	f.rejectRecovering("never observed", f.req(h1, 1, 1, e2), e2)

	// Resize growth is the same rule; shrinking and Renew never refuse.
	if _, err := f.l.Resize(f.ctx, rb.Ref(), 150); err == nil {
		t.Errorf("Resize growth on unrecovered e2 succeeded, want rejection %s", ledger.ReasonRecovering)
	} else {
		f.checkRejection("Resize growth on unrecovered e2", err, ledger.ReasonRecovering, e2)
	}
	if _, err := f.l.Resize(f.ctx, n.Ref(), 400); err != nil {
		t.Errorf("Resize shrink on recovered e1 error = %v, want nil", err)
	}
	if _, err := f.l.Resize(f.ctx, n.Ref(), 500); err != nil {
		t.Errorf("Resize growth on recovered e1 within capacity error = %v, want nil", err)
	}
	if _, err := f.l.Renew(f.ctx, rb.Ref(), longTTL); err != nil {
		t.Errorf("Renew on unrecovered e2 error = %v, want nil", err)
	}
	f.release(ra)
	f.wantReserved(e1, 500, 1, 1)
	// Released re-asserted load is still in the correction: the next
	// observation of the window measures what e1 runs then.
	f.reject(f.req(h1, 201, 1, e1), ledger.ReasonEngineKV, e1)
	f.acquire(f.req(h1, 200, 1, e1), e1)
}

func (s *suite) testWorstCaseRecoversIdle(t *testing.T) {
	spec := poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4))
	spec.Reserve = ledger.ReserveWorstCase
	f := s.setup(t, spec, ledger.Options{RecoveryWindow: longWindow, ConfirmGrace: recoveryGrace})
	since := f.recoverySince(longWindow)
	f.waitPast(since)
	// A request the ledger has no lease for may grow to any worst case:
	// an engine that runs or queues anything stays in recovery.
	f.observeFull(ledger.Observation{Engine: e1, KVTokensUsed: 10, Running: 1, ObservedAt: since.Add(time.Millisecond)}, true)
	f.observeFull(ledger.Observation{Engine: e2, Waiting: 1, ObservedAt: since.Add(time.Millisecond)}, true)
	f.rejectRecovering("worst_case, e1 running", f.req(h1, 100, 1, e1, e2), e1)
	f.rejectRecovering("worst_case, e2 waiting", f.req(h1, 100, 1, e2), e2)
	f.observeFull(ledger.Observation{Engine: e2, ObservedAt: since.Add(2 * time.Millisecond)}, true)
	f.wantRecovered("worst_case, e2 idle", 1)
	f.acquire(f.req(h1, 100, 1, e1, e2), e2)
	// Its next observation shows the grant's request: e2 is back in
	// recovery until the window ends (only an idle engine is trusted).
	f.observeFull(ledger.Observation{Engine: e2, KVTokensUsed: 50, Running: 1, ObservedAt: since.Add(3 * time.Millisecond)}, true)
	f.rejectRecovering("worst_case, e2 running its grant", f.req(h1, 100, 1, e2), e2)
}

func (s *suite) testStaleRecoversNot(t *testing.T) {
	stale := f1(engine(e1, 1000, 4), func(e *ledger.EngineSpec) { e.StaleAfter = time.Second })
	f := s.setup(t, poolSpec(pool, stale), ledger.Options{RecoveryWindow: longWindow, ConfirmGrace: recoveryGrace})
	since := f.recoverySince(longWindow)
	f.waitPast(since)
	f.observeFull(ledger.Observation{Engine: e1, ObservedAt: since.Add(time.Millisecond)}, true)
	f.acquire(f.req(h1, 100, 1, e1), e1)
	// Telemetry that goes stale in the window no longer shows what the
	// engine holds: back to waiting for the window (or fresh telemetry).
	e, _ := engineStats(f.stats(), e1)
	f.waitPast(e.ObservedAt.Add(time.Second))
	f.rejectRecovering("stale telemetry in the window", f.req(h1, 100, 1, e1), e1)
	f.observeFull(ledger.Observation{Engine: e1, KVTokensUsed: 100, Running: 1, ObservedAt: time.Now()}, true)
	f.acquire(f.req(h1, 100, 1, e1), e1)
}

// f1 returns e changed by change.
func f1(e ledger.EngineSpec, change func(*ledger.EngineSpec)) ledger.EngineSpec {
	change(&e)
	return e
}

func (s *suite) testWindowEnds(t *testing.T) {
	// The grace equals the window: no observation can end recovery early.
	spec := poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4))
	f := s.setup(t, spec, ledger.Options{RecoveryWindow: shortWindow, ConfirmGrace: shortWindow})
	until := f.stats().RecoveringUntil
	r := f.reassert(f.fabricate(h2, e1, 200, 1, ledger.Fence{Epoch: f.epoch, Seq: 3}))
	f.observeFull(ledger.Observation{Engine: e1, KVTokensUsed: 300, Running: 1, ObservedAt: time.Now()}, true)
	f.wantCorrection(e1, 300, 1)
	f.rejectRecovering("inside the window", f.req(h1, 100, 1, e2, e1), e2)
	f.waitPast(until)
	if s := f.keepAlive(h1, longTTL); s.Recovered != 0 {
		t.Errorf("KeepAlive after the window = %d engines recovered, want 0 (there is no window to recover from)", s.Recovered)
	}
	// Every engine takes grants again, the never observed e2 too; e1
	// still counts the window's correction until its next observation.
	f.acquire(f.req(h1, 100, 1, e2), e2)
	f.reject(f.req(h1, 501, 1, e1), ledger.ReasonEngineKV, e1)
	f.observeFull(ledger.Observation{Engine: e1, KVTokensUsed: 300, Running: 1, ObservedAt: time.Now()}, true)
	f.wantCorrection(e1, 100, 0)
	f.acquire(f.req(h1, 700, 1, e1), e1)
	f.release(r)
}

func (s *suite) testPartitionedHolder(t *testing.T) {
	if s.b.Lose == nil {
		t.Skip("backend has no Lose")
	}
	spec := poolSpec(pool, engine(e1, 1000, 8), engine(e2, 1000, 8))
	opts := ledger.Options{RecoveryWindow: longWindow, ConfirmGrace: recoveryGrace}
	f := s.setup(t, spec, opts)
	since0 := f.recoverySince(longWindow)
	f.waitPast(since0)
	f.observeFull(ledger.Observation{Engine: e1, ObservedAt: since0.Add(time.Millisecond)}, true)
	// Before the loss h1 (to be partitioned) holds 400 on e1, h2 300.
	f.acquire(f.req(h1, 400, 1, e1), e1)
	kept := f.acquire(f.req(h2, 300, 1, e1), e1)

	l2 := s.b.Lose(t, f.l)
	if l2 != f.l {
		t.Cleanup(func() { _ = l2.Close() })
		f.l = l2
	}
	f.configure(spec)
	since := f.recoverySince(longWindow)
	// h2 reaches the new ledger and re-asserts; h1 is cut off from it and
	// never does, but its request keeps running on e1.
	f.keepAlive(h2, longTTL)
	f.reassert(kept)
	f.waitPast(since)
	// e1 shows both requests: h1's at 200 of its 400, h2's at 150.
	f.observeFull(ledger.Observation{Engine: e1, KVTokensUsed: 350, Running: 2, ObservedAt: since.Add(time.Millisecond)}, true)
	// Counted: h2's 300 re-asserted plus the 350 observed, so h1's
	// request keeps its room; the larger of the two (350) would have let
	// a 650 grant in on top of both.
	f.reject(f.req(h2, 351, 1, e1), ledger.ReasonEngineKV, e1)
	f.acquire(f.req(h2, 350, 1, e1), e1)
	f.rejectRecovering("unobserved e2 after the loss", f.req(h2, 1, 1, e2), e2)
	f.wantReserved(e1, 650, 2, 2)
}
