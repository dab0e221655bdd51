package ledgertest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// The circuit breaker (ledger/breaker.go): evidence rides on Release, the
// state lives in the ledger beside the drain flag, so one holder's evidence
// moves the breaker every holder admits against. Cooldowns are real and
// short; the suite waits for them on the ledger clock (Stats.Now), which
// times them on every backend.

// breakerCooldown is the cooldown of the suite's breaker specs.
const breakerCooldown = 300 * time.Millisecond

func (s *suite) testBreaker(t *testing.T) {
	t.Run("OpensAfterFailures", s.testBreakerOpens)
	t.Run("StaleSuccessDoesNotReset", s.testBreakerStaleSuccess)
	t.Run("RetriedReleaseCountsOnce", s.testBreakerRetriedRelease)
	t.Run("LateOutcomesWhileOpen", s.testBreakerLateOutcomes)
	t.Run("ProbesClose", s.testBreakerProbesClose)
	t.Run("ProbeFailureReopens", s.testBreakerProbeFailure)
	t.Run("ProbeExpiryFreesBudget", s.testBreakerProbeExpiry)
	t.Run("ProbeBudgetUnderConcurrency", s.testBreakerConcurrentProbes)
	t.Run("Configure", s.testBreakerConfigure)
}

// breakerSpec is poolSpec over e1 and e2 with breaker thresholds k
// failures, probes p and successes n, and the suite's cooldown.
func breakerSpec(k, p, n int) ledger.PoolSpec {
	s := poolSpec(pool, engine(e1, 1000, 8), engine(e2, 1000, 8))
	s.Breaker = ledger.BreakerSpec{Failures: k, Cooldown: breakerCooldown, Probes: p, Successes: n}
	return s
}

// breaker returns engine id's breaker as Stats reads it.
func (f *fixture) breaker(id ledger.EngineID) ledger.Breaker {
	f.t.Helper()
	e, ok := engineStats(f.stats(), id)
	if !ok {
		f.t.Fatalf("Stats(%s) has no engine %s", f.spec.Name, id)
	}
	return e.Breaker
}

// wantBreaker checks engine id's breaker state, counts and probes in Stats.
func (f *fixture) wantBreaker(why string, id ledger.EngineID, state ledger.BreakerState, failures, successes, probes int) ledger.Breaker {
	f.t.Helper()
	b := f.breaker(id)
	if b.State != state || b.Failures != failures || b.Successes != successes || b.Probes != probes {
		f.t.Errorf("%s: engine %s breaker = %s failures=%d successes=%d probes=%d, want %s failures=%d successes=%d probes=%d",
			why, id, b.State, b.Failures, b.Successes, b.Probes, state, failures, successes, probes)
	}
	return b
}

// releaseWith releases l reporting outcome and wants it released.
func (f *fixture) releaseWith(l ledger.Lease, o ledger.Outcome) {
	f.t.Helper()
	rel, err := f.l.Release(f.ctx, l.Ref(), ledger.Usage{Outcome: o})
	if err != nil || !rel.Released {
		f.t.Fatalf("Release(%s, outcome %q) = Released %v, error %v; want released", l.ID, o, rel.Released, err)
	}
}

// dispatch is one request's lease on eng by holder h, released with o.
func (f *fixture) dispatch(h ledger.HolderID, eng ledger.EngineID, o ledger.Outcome) {
	f.t.Helper()
	f.releaseWith(f.acquire(f.req(h, 10, 1, eng), eng), o)
}

// wantBreakerCounters checks the pool's transition counters.
func (f *fixture) wantBreakerCounters(why string, opened, halfOpen, reopened, closed int64) {
	f.t.Helper()
	f.wantCounters(why, map[string]int64{
		ledger.BreakerCounter(ledger.TransitionOpened):   opened,
		ledger.BreakerCounter(ledger.TransitionHalfOpen): halfOpen,
		ledger.BreakerCounter(ledger.TransitionReopened): reopened,
		ledger.BreakerCounter(ledger.TransitionClosed):   closed,
	})
}

// waitHalfOpen waits on the ledger clock until e's breaker, opened at
// b.OpenedAt, has passed its cooldown, and wants it read half-open.
func (f *fixture) waitHalfOpen(id ledger.EngineID, b ledger.Breaker) {
	f.t.Helper()
	if b.State != ledger.BreakerOpen || b.OpenedAt.IsZero() {
		f.t.Fatalf("engine %s breaker = %s opened at %s, want open", id, b.State, b.OpenedAt)
	}
	until := b.OpenedAt.Add(f.spec.Breaker.Cooldown)
	limit := time.Now().Add(f.spec.Breaker.Cooldown + waitSlack)
	for {
		now := f.ledgerNow()
		if !now.Before(until) {
			break
		}
		if time.Now().After(limit) {
			f.t.Fatalf("ledger clock %s did not reach %s within %s", now.Format(time.StampMilli), until.Format(time.StampMilli), waitSlack)
		}
		time.Sleep(min(until.Sub(now)+time.Millisecond, 50*time.Millisecond))
	}
	f.wantBreaker("after the cooldown", id, ledger.BreakerHalfOpen, 0, 0, 0)
}

// waitFresh waits on the ledger clock until a lease granted on engine id
// would be fresh: granted in a later millisecond than its breaker's latest
// counted failure (ledger.Breaker.Fresh), so its success resets the count.
func (f *fixture) waitFresh(id ledger.EngineID) {
	f.t.Helper()
	b := f.breaker(id)
	if b.LastFailureAt.IsZero() {
		f.t.Fatalf("engine %s breaker = %+v, want a failure counted", id, b)
	}
	limit := time.Now().Add(waitSlack)
	for now := f.ledgerNow(); now.UnixMilli() <= b.LastFailureAt.UnixMilli(); now = f.ledgerNow() {
		if time.Now().After(limit) {
			f.t.Fatalf("ledger clock %s did not pass %s within %s", now.Format(time.StampMilli), b.LastFailureAt.Format(time.StampMilli), waitSlack)
		}
		time.Sleep(time.Millisecond)
	}
}

// openBreaker reports k failures on e1, from h1 and h2 in turn, and wants the
// breaker open.
func (f *fixture) openBreaker(k int) ledger.Breaker {
	f.t.Helper()
	for i := range k {
		f.dispatch([]ledger.HolderID{h1, h2}[i%2], e1, ledger.OutcomeConnect)
	}
	return f.wantBreaker(fmt.Sprintf("after %d failures", k), e1, ledger.BreakerOpen, 0, 0, 0)
}

// wantTotals checks the pool's totals against its lease rows.
func (f *fixture) wantTotals(after string) {
	f.t.Helper()
	ms, err := ledger.CheckTotals(f.ctx, f.l, pool)
	if err != nil {
		f.t.Fatalf("CheckTotals after %s error = %v, want nil", after, err)
	}
	for _, m := range ms {
		f.t.Errorf("CheckTotals after %s: %s, want equal", after, m)
	}
}

// testBreakerOpens: K consecutive failures open an engine's breaker, a
// success in between resets the count, and once open the engine takes no
// grant from any holder (breaker_open), while the others still do.
// Evidence from h1 protects h2.
func (s *suite) testBreakerOpens(t *testing.T) {
	f := s.setup(t, breakerSpec(3, 1, 1), noWindow)
	f.wantBreaker("a new engine", e1, ledger.BreakerClosed, 0, 0, 0)
	f.dispatch(h1, e1, ledger.OutcomeConnect)
	f.dispatch(h1, e1, ledger.OutcomeStatus5xx)
	f.wantBreaker("two failures", e1, ledger.BreakerClosed, 2, 0, 0)
	f.waitFresh(e1)
	f.dispatch(h2, e1, ledger.OutcomeOK)
	f.wantBreaker("a success after two failures", e1, ledger.BreakerClosed, 0, 0, 0)
	f.dispatch(h2, e1, ledger.OutcomeNone)
	f.dispatch(h1, e1, ledger.OutcomeReset)
	f.dispatch(h1, e1, ledger.OutcomeFirstByteTimeout)
	f.wantBreaker("two failures, and a release with no evidence", e1, ledger.BreakerClosed, 2, 0, 0)
	f.wantBreakerCounters("not opened yet", 0, 0, 0, 0)

	before := f.ledgerNow()
	f.dispatch(h1, e1, ledger.OutcomeTTFTBreach)
	b := f.wantBreaker("the third consecutive failure", e1, ledger.BreakerOpen, 0, 0, 0)
	if after := f.ledgerNow(); b.OpenedAt.Before(before.Truncate(time.Millisecond)) || b.OpenedAt.After(after) {
		t.Errorf("breaker OpenedAt = %s, want the ledger time of the release, within [%s, %s]",
			b.OpenedAt.Format(time.StampMilli), before.Format(time.StampMilli), after.Format(time.StampMilli))
	}
	f.wantBreakerCounters("opened once", 1, 0, 0, 0)
	f.wantBreaker("the other engine", e2, ledger.BreakerClosed, 0, 0, 0)

	// h1's evidence protects h2: neither holder gets e1.
	for _, h := range []ledger.HolderID{h1, h2} {
		f.reject(f.req(h, 10, 1, e1), ledger.ReasonBreakerOpen, e1)
		f.acquire(f.req(h, 10, 1, e1, e2), e2)
	}
	f.wantCounters("two refusals", map[string]int64{
		ledger.CounterRejections + ":" + string(ledger.ReasonBreakerOpen): 2,
	})
	f.wantReserved(e1, 0, 0, 0)
	f.wantTotals("the breaker opened")
}

// testBreakerStaleSuccess: a success resets the count only when its lease
// was granted after the engine's latest counted failure. A stream granted
// before the engine started failing, or between two of its failures, and
// ending fine says nothing about the engine since (ledger.Breaker.Fresh):
// with them the count stays, and one more failure opens the breaker. A
// success granted after the latest failure (on e2) still resets it. Each
// counted failure stamps LastFailureAt with the ledger time of its release;
// a success leaves it.
func (s *suite) testBreakerStaleSuccess(t *testing.T) {
	f := s.setup(t, breakerSpec(3, 1, 1), noWindow)
	early := f.acquire(f.req(h1, 10, 1, e1), e1)
	f.dispatch(h1, e1, ledger.OutcomeStatus5xx)
	f.waitFresh(e1)
	between := f.acquire(f.req(h2, 10, 1, e1), e1)
	before := f.ledgerNow()
	f.dispatch(h2, e1, ledger.OutcomeConnect)
	failed := f.wantBreaker("two failures", e1, ledger.BreakerClosed, 2, 0, 0).LastFailureAt
	if after := f.ledgerNow(); failed.Before(before.Truncate(time.Millisecond)) || failed.After(after) {
		t.Errorf("breaker LastFailureAt = %s, want the ledger time of the second failure's release, within [%s, %s]",
			failed.Format(time.StampMilli), before.Format(time.StampMilli), after.Format(time.StampMilli))
	}
	f.releaseWith(early, ledger.OutcomeOK)
	f.wantBreaker("a success on a lease granted before both failures", e1, ledger.BreakerClosed, 2, 0, 0)
	f.releaseWith(between, ledger.OutcomeOK)
	if got := f.wantBreaker("a success on a lease granted between the failures", e1, ledger.BreakerClosed, 2, 0, 0); !got.LastFailureAt.Equal(failed) {
		t.Errorf("breaker LastFailureAt after two stale successes = %s, want %s unchanged", got.LastFailureAt, failed)
	}
	f.dispatch(h1, e1, ledger.OutcomeReset)
	f.wantBreaker("a third failure after two stale successes", e1, ledger.BreakerOpen, 0, 0, 0)
	f.wantBreakerCounters("opened", 1, 0, 0, 0)

	// On e2, a lease granted before its failures and one granted after.
	stale := f.acquire(f.req(h1, 10, 1, e2), e2)
	f.dispatch(h1, e2, ledger.OutcomeConnect)
	f.dispatch(h2, e2, ledger.OutcomeConnect)
	f.waitFresh(e2)
	fresh := f.acquire(f.req(h2, 10, 1, e2), e2)
	f.releaseWith(stale, ledger.OutcomeOK)
	f.wantBreaker("a stale success on e2", e2, ledger.BreakerClosed, 2, 0, 0)
	f.releaseWith(fresh, ledger.OutcomeOK)
	f.wantBreaker("a success on a lease granted after e2's failures", e2, ledger.BreakerClosed, 0, 0, 0)
	f.dispatch(h1, e2, ledger.OutcomeConnect)
	f.wantBreaker("a failure after the reset", e2, ledger.BreakerClosed, 1, 0, 0)
	f.wantBreakerCounters("e2 not opened", 1, 0, 0, 0)
	f.wantTotals("stale successes")
}

// testBreakerRetriedRelease: Release is idempotent per lease, so a retried
// release carries its evidence once; a Release of an unknown lease none.
func (s *suite) testBreakerRetriedRelease(t *testing.T) {
	f := s.setup(t, breakerSpec(2, 1, 1), noWindow)
	l := f.acquire(f.req(h1, 10, 1, e1), e1)
	// An unknown outcome is refused and loses nothing: the lease stays.
	if _, err := f.l.Release(f.ctx, l.Ref(), ledger.Usage{Outcome: "exploded"}); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("Release(outcome exploded) error = %v, want ErrInvalidArgument", err)
	}
	f.wantReserved(e1, 10, 1, 1)
	f.releaseWith(l, ledger.OutcomeConnect)
	for i := range 3 {
		rel, err := f.l.Release(f.ctx, l.Ref(), ledger.Usage{Outcome: ledger.OutcomeConnect})
		if err != nil || rel.Released {
			t.Fatalf("retry %d of Release(%s) = Released %v, error %v; want false, nil", i, l.ID, rel.Released, err)
		}
	}
	unknown := ledger.LeaseRef{Pool: pool, ID: ledger.MakeLeaseID(ledger.Fence{Epoch: f.epoch, Seq: 1 << 40}), Holder: h1}
	if _, err := f.l.Release(f.ctx, unknown, ledger.Usage{Outcome: ledger.OutcomeConnect}); err != nil {
		t.Fatalf("Release(unknown lease) error = %v, want nil", err)
	}
	f.wantBreaker("one failure released four times, one unknown lease", e1, ledger.BreakerClosed, 1, 0, 0)
	f.dispatch(h2, e1, ledger.OutcomeConnect)
	f.wantBreaker("a second failure", e1, ledger.BreakerOpen, 0, 0, 0)
	f.wantBreakerCounters("", 1, 0, 0, 0)
	f.wantTotals("retried releases")
}

// testBreakerLateOutcomes: while open, outcomes of leases granted before
// it opened change nothing.
func (s *suite) testBreakerLateOutcomes(t *testing.T) {
	f := s.setup(t, breakerSpec(2, 1, 1), noWindow)
	early := []ledger.Lease{f.acquire(f.req(h1, 10, 1, e1), e1), f.acquire(f.req(h2, 10, 1, e1), e1)}
	b := f.openBreaker(2)
	f.releaseWith(early[0], ledger.OutcomeConnect)
	f.releaseWith(early[1], ledger.OutcomeOK)
	got := f.wantBreaker("late outcomes while open", e1, ledger.BreakerOpen, 0, 0, 0)
	if !got.OpenedAt.Equal(b.OpenedAt) {
		t.Errorf("breaker OpenedAt = %s after late outcomes, want %s unchanged", got.OpenedAt, b.OpenedAt)
	}
	f.wantBreakerCounters("", 1, 0, 0, 0)
	f.wantTotals("late outcomes")
}

// testBreakerProbesClose: after the cooldown the engine is half-open and
// takes at most Probes probe leases at a time, from any holder; non-probe
// outcomes do not count; Successes successful probes close it.
func (s *suite) testBreakerProbesClose(t *testing.T) {
	f := s.setup(t, breakerSpec(1, 1, 2), noWindow)
	held := f.acquire(f.req(h1, 10, 1, e1), e1)
	f.waitHalfOpen(e1, f.openBreaker(1))

	p := f.acquire(f.req(h1, 10, 1, e1), e1)
	if !p.Probe {
		t.Fatalf("the first grant on a half-open engine Probe = false, want true")
	}
	f.wantBreaker("one probe out", e1, ledger.BreakerHalfOpen, 0, 0, 1)
	f.wantBreakerCounters("half-open stored by the probe's grant", 1, 1, 0, 0)
	f.reject(f.req(h2, 10, 1, e1), ledger.ReasonBreakerOpen, e1)
	if l := f.acquire(f.req(h2, 10, 1, e1, e2), e2); l.Probe {
		t.Errorf("a grant on closed e2 Probe = true, want false")
	}
	// The probe flag travels with the lease: replay, Renew and List show it.
	for _, ls := range f.list(ledger.Filter{Pool: pool, Engine: e1}) {
		if ls.Probe != (ls.ID == p.ID) {
			t.Errorf("List lease %s Probe = %v, want %v", ls.ID, ls.Probe, ls.ID == p.ID)
		}
	}
	if r, err := f.l.Renew(f.ctx, p.Ref(), longTTL); err != nil || !r.Lease.Probe {
		t.Errorf("Renew(probe) = %+v, %v; want the lease, Probe kept", r.Lease, err)
	}
	// A non-probe lease's outcome counts for nothing while half-open.
	f.releaseWith(held, ledger.OutcomeConnect)
	f.wantBreaker("a non-probe failure while half-open", e1, ledger.BreakerHalfOpen, 0, 0, 1)

	f.releaseWith(p, ledger.OutcomeOK)
	f.wantBreaker("one successful probe", e1, ledger.BreakerHalfOpen, 0, 1, 0)
	p2 := f.acquire(f.req(h2, 10, 1, e1), e1)
	if !p2.Probe {
		t.Fatalf("the grant after one successful probe Probe = false, want true")
	}
	f.releaseWith(p2, ledger.OutcomeOK)
	f.wantBreaker("two successful probes", e1, ledger.BreakerClosed, 0, 0, 0)
	f.wantBreakerCounters("closed again", 1, 1, 0, 1)
	for range 3 {
		if l := f.acquire(f.req(h1, 10, 1, e1), e1); l.Probe {
			t.Errorf("a grant on a closed engine Probe = true, want false")
		}
	}
	f.wantTotals("probes closed the breaker")
}

// testBreakerProbeFailure: a failed probe reopens the breaker for another
// cooldown.
func (s *suite) testBreakerProbeFailure(t *testing.T) {
	f := s.setup(t, breakerSpec(1, 1, 1), noWindow)
	b := f.openBreaker(1)
	f.waitHalfOpen(e1, b)
	p := f.acquire(f.req(h2, 10, 1, e1), e1)
	if !p.Probe {
		t.Fatalf("grant on a half-open engine Probe = false, want true")
	}
	f.releaseWith(p, ledger.OutcomeStatus5xx)
	again := f.wantBreaker("a failed probe", e1, ledger.BreakerOpen, 0, 0, 0)
	if !again.OpenedAt.After(b.OpenedAt) {
		t.Errorf("reopened breaker OpenedAt = %s, want after the first opening %s", again.OpenedAt, b.OpenedAt)
	}
	f.wantBreakerCounters("reopened", 1, 1, 1, 0)
	f.reject(f.req(h1, 10, 1, e1), ledger.ReasonBreakerOpen, e1)
	f.waitHalfOpen(e1, again)
	f.wantTotals("a probe failed")
}

// testBreakerProbeExpiry: a probe lease the ledger ends (its deadline
// passed) frees its slot of the budget with no evidence.
func (s *suite) testBreakerProbeExpiry(t *testing.T) {
	f := s.setup(t, breakerSpec(1, 1, 1), noWindow)
	f.waitHalfOpen(e1, f.openBreaker(1))
	p := f.acquire(f.shortReq(200*time.Millisecond, h1, 10, 1, e1), e1)
	if !p.Probe {
		t.Fatalf("grant on a half-open engine Probe = false, want true")
	}
	f.reject(f.req(h2, 10, 1, e1), ledger.ReasonBreakerOpen, e1)
	f.waitPast(p.Deadline)
	f.sweepAll()
	f.wantBreaker("the probe expired", e1, ledger.BreakerHalfOpen, 0, 0, 0)
	if rel, err := f.l.Release(f.ctx, p.Ref(), ledger.Usage{Outcome: ledger.OutcomeOK}); err != nil || rel.Released {
		t.Errorf("Release(expired probe) = Released %v, error %v; want false, nil", rel.Released, err)
	}
	f.wantBreaker("the expired probe's late release", e1, ledger.BreakerHalfOpen, 0, 0, 0)
	p2 := f.acquire(f.req(h2, 10, 1, e1), e1)
	if !p2.Probe {
		t.Fatalf("grant after the probe expired Probe = false, want true")
	}
	f.releaseWith(p2, ledger.OutcomeOK)
	f.wantBreaker("a successful probe", e1, ledger.BreakerClosed, 0, 0, 0)
	f.wantTotals("a probe expired")
}

// testBreakerConcurrentProbes: concurrent Acquires from several holders on
// a half-open engine never take more than Probes probe leases.
func (s *suite) testBreakerConcurrentProbes(t *testing.T) {
	const probes, holders, perHolder = 2, 4, 4
	f := s.setup(t, breakerSpec(1, probes, 2), noWindow)
	for i := range holders {
		f.keepAlive(ledger.HolderID(fmt.Sprintf("c%d", i)), longTTL)
	}
	f.waitHalfOpen(e1, f.openBreaker(1))

	var (
		mu      sync.Mutex
		granted = map[ledger.LeaseID]ledger.Lease{}
		refused int
		wg      sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range holders * perHolder {
		r := f.req(ledger.HolderID(fmt.Sprintf("c%d", i%holders)), 10, 1, e1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			g, _, err := retry(&s.backendFailures, func() (ledger.Grant, error) { return f.l.Acquire(f.ctx, r) })
			mu.Lock()
			defer mu.Unlock()
			switch rej := ledger.AsRejection(err); {
			case err == nil:
				granted[g.Lease.ID] = g.Lease
			case rej != nil && rej.Reason == ledger.ReasonBreakerOpen:
				refused++
			default:
				t.Errorf("concurrent Acquire(%s) error = %v, want a probe grant or breaker_open", describe(r), err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(granted) != probes || refused != holders*perHolder-probes {
		t.Fatalf("concurrent Acquires on a half-open engine: %d granted, %d refused; want %d probes, %d refused",
			len(granted), refused, probes, holders*perHolder-probes)
	}
	for _, l := range granted {
		if !l.Probe || l.Engine != e1 {
			t.Errorf("concurrent grant %s on %s Probe = %v, want a probe on %s", l.ID, l.Engine, l.Probe, e1)
		}
	}
	f.wantBreaker("the budget taken", e1, ledger.BreakerHalfOpen, 0, 0, probes)
	f.wantTotals("concurrent probes")
	for _, l := range granted {
		f.releaseWith(l, ledger.OutcomeOK)
	}
	f.wantBreaker("every probe succeeded", e1, ledger.BreakerClosed, 0, 0, 0)
	f.wantBreakerCounters("", 1, 1, 0, 1)
}

// testBreakerConfigure: Configure keeps an engine's breaker like its drain
// flag; a pool whose breaker is off (failures < 0) admits an engine
// whatever it stored, and counts no evidence.
func (s *suite) testBreakerConfigure(t *testing.T) {
	spec := breakerSpec(1, 1, 1)
	spec.Breaker.Cooldown = time.Hour
	f := s.setup(t, spec, noWindow)
	b := f.openBreaker(1)
	f.configure(spec)
	if got := f.wantBreaker("reconfigured", e1, ledger.BreakerOpen, 0, 0, 0); !got.OpenedAt.Equal(b.OpenedAt) {
		t.Errorf("breaker OpenedAt after Configure = %s, want %s kept", got.OpenedAt, b.OpenedAt)
	}
	f.reject(f.req(h1, 10, 1, e1), ledger.ReasonBreakerOpen, e1)

	off := spec
	off.Breaker = ledger.BreakerSpec{Failures: -1}
	f.configure(off)
	f.wantBreaker("the breaker turned off", e1, ledger.BreakerClosed, 0, 0, 0)
	for range 3 {
		f.dispatch(h1, e2, ledger.OutcomeConnect)
	}
	f.dispatch(h1, e1, ledger.OutcomeConnect)
	f.wantBreaker("failures with the breaker off", e2, ledger.BreakerClosed, 0, 0, 0)
	f.wantBreakerCounters("", 1, 0, 0, 0)

	bad := spec
	bad.Breaker.Probes = -1
	if _, err := f.l.Configure(f.ctx, bad); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Errorf("Configure(breaker probes -1) error = %v, want ErrInvalidArgument", err)
	}
	f.wantTotals("reconfiguration")
}
