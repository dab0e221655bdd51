package ledger

import (
	"testing"
	"time"
)

func TestBreakerRule(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	spec := BreakerSpec{Failures: 3, Cooldown: 10 * time.Second, Probes: 1, Successes: 2}
	const ms = time.Millisecond
	type step struct {
		at      time.Duration // the release, after t0
		granted time.Duration // the lease's grant (Lease.Created), after t0
		probe   bool
		outcome Outcome
		want    BreakerState
		trans   BreakerTransition
		fails   int // Failures after the step
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"fresh successes reset the count", []step{
			{1 * ms, 0, false, OutcomeConnect, BreakerClosed, TransitionNone, 1},
			{2 * ms, 1 * ms, false, OutcomeReset, BreakerClosed, TransitionNone, 2},
			{4 * ms, 3 * ms, false, OutcomeOK, BreakerClosed, TransitionNone, 0},
			{5 * ms, 4 * ms, false, OutcomeStatus5xx, BreakerClosed, TransitionNone, 1},
			{6 * ms, 5 * ms, false, OutcomeStatus5xx, BreakerClosed, TransitionNone, 2},
		}},
		{"a stale success does not reset the count", []step{
			{10 * ms, 9 * ms, false, OutcomeStatus5xx, BreakerClosed, TransitionNone, 1},
			{20 * ms, 19 * ms, false, OutcomeStatus5xx, BreakerClosed, TransitionNone, 2},
			{25 * ms, 5 * ms, false, OutcomeOK, BreakerClosed, TransitionNone, 2},  // granted before both
			{26 * ms, 15 * ms, false, OutcomeOK, BreakerClosed, TransitionNone, 2}, // granted between them
			{30 * ms, 29 * ms, false, OutcomeStatus5xx, BreakerOpen, TransitionOpened, 0},
		}},
		{"a success granted in the failure's millisecond is stale", []step{
			{10*ms + 100*time.Microsecond, 0, false, OutcomeConnect, BreakerClosed, TransitionNone, 1},
			{12 * ms, 10*ms + 900*time.Microsecond, false, OutcomeOK, BreakerClosed, TransitionNone, 1},
			{13 * ms, 10 * ms, false, OutcomeOK, BreakerClosed, TransitionNone, 1},
			{14 * ms, 11 * ms, false, OutcomeOK, BreakerClosed, TransitionNone, 0},
		}},
		{"after a fresh success, a stale one changes nothing", []step{
			{10 * ms, 0, false, OutcomeConnect, BreakerClosed, TransitionNone, 1},
			{12 * ms, 11 * ms, false, OutcomeOK, BreakerClosed, TransitionNone, 0},
			{13 * ms, 12 * ms, false, OutcomeConnect, BreakerClosed, TransitionNone, 1},
			{14 * ms, 11 * ms, false, OutcomeOK, BreakerClosed, TransitionNone, 1},
		}},
		{"no evidence changes nothing", []step{
			{0, 0, false, OutcomeConnect, BreakerClosed, TransitionNone, 1},
			{1 * ms, 0, false, OutcomeConnect, BreakerClosed, TransitionNone, 2},
			{2 * ms, 0, false, OutcomeNone, BreakerClosed, TransitionNone, 2},
			{3 * ms, 0, false, OutcomeFirstByteTimeout, BreakerOpen, TransitionOpened, 0},
		}},
		{"open ignores late outcomes, half-open after the cooldown, probes close it", []step{
			{0, 0, false, OutcomeConnect, BreakerClosed, TransitionNone, 1},
			{0, 0, false, OutcomeConnect, BreakerClosed, TransitionNone, 2},
			{0, 0, false, OutcomeTTFTBreach, BreakerOpen, TransitionOpened, 0},
			{time.Second, 0, false, OutcomeOK, BreakerOpen, TransitionNone, 0},
			{10 * time.Second, 0, false, OutcomeOK, BreakerHalfOpen, TransitionNone, 0}, // not a probe
			{11 * time.Second, 10 * time.Second, true, OutcomeOK, BreakerHalfOpen, TransitionNone, 0},
			{12 * time.Second, 11 * time.Second, true, OutcomeOK, BreakerClosed, TransitionClosed, 0},
		}},
		{"after it closes, successes granted before it opened stay stale", []step{
			{0, 0, false, OutcomeConnect, BreakerClosed, TransitionNone, 1},
			{0, 0, false, OutcomeConnect, BreakerClosed, TransitionNone, 2},
			{0, 0, false, OutcomeConnect, BreakerOpen, TransitionOpened, 0},
			{10 * time.Second, 10 * time.Second, true, OutcomeOK, BreakerHalfOpen, TransitionNone, 0},
			{11 * time.Second, 11 * time.Second, true, OutcomeOK, BreakerClosed, TransitionClosed, 0},
			{12 * time.Second, 12 * time.Second, false, OutcomeReset, BreakerClosed, TransitionNone, 1},
			{13 * time.Second, -time.Second, false, OutcomeOK, BreakerClosed, TransitionNone, 1},
			{14 * time.Second, 13 * time.Second, false, OutcomeOK, BreakerClosed, TransitionNone, 0},
		}},
		{"a failed probe reopens it for another cooldown", []step{
			{0, 0, false, OutcomeConnect, BreakerClosed, TransitionNone, 1},
			{0, 0, false, OutcomeConnect, BreakerClosed, TransitionNone, 2},
			{0, 0, false, OutcomeConnect, BreakerOpen, TransitionOpened, 0},
			{10 * time.Second, 10 * time.Second, true, OutcomeReset, BreakerOpen, TransitionReopened, 0},
			{19 * time.Second, 0, false, OutcomeOK, BreakerOpen, TransitionNone, 0},
			{20 * time.Second, 20 * time.Second, true, OutcomeOK, BreakerHalfOpen, TransitionNone, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b Breaker
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				b = b.At(now, spec)
				if s.probe {
					b.Probes++ // the probe's grant
				}
				before := b
				var tr BreakerTransition
				b, tr = b.Report(now, spec, t0.Add(s.granted), s.probe, s.outcome)
				if got := b.At(now, spec); got.State != s.want || tr != s.trans || got.Failures != s.fails {
					t.Fatalf("step %d (%s at %s, granted at %s): state %s, %d failures, transition %q; want %s, %d, %q",
						i, s.outcome, s.at, s.granted, got.State, got.Failures, tr, s.want, s.fails, s.trans)
				}
				if b.Probes != 0 {
					t.Fatalf("step %d: %d probes outstanding after the probe's release", i, b.Probes)
				}
				// A failure that counts stamps LastFailureAt; nothing else
				// moves it.
				counted := s.outcome.Failure() && (before.State == BreakerClosed || (before.State == BreakerHalfOpen && s.probe))
				if want := map[bool]time.Time{true: now, false: before.LastFailureAt}[counted]; !b.LastFailureAt.Equal(want) {
					t.Fatalf("step %d (%s at %s): LastFailureAt = %s, want %s", i, s.outcome, s.at, b.LastFailureAt, want)
				}
			}
		})
	}
}

func TestBreakerFresh(t *testing.T) {
	failed := time.UnixMilli(1_000_000).Add(400 * time.Microsecond)
	for _, tc := range []struct {
		name    string
		b       Breaker
		granted time.Time
		want    bool
	}{
		{"no failure counted", Breaker{}, time.UnixMilli(1), true},
		{"granted a millisecond later", Breaker{LastFailureAt: failed}, time.UnixMilli(1_000_001), true},
		{"granted earlier in the failure's millisecond", Breaker{LastFailureAt: failed}, time.UnixMilli(1_000_000), false},
		{"granted later in the failure's millisecond", Breaker{LastFailureAt: failed}, failed.Add(500 * time.Microsecond), false},
		{"granted before", Breaker{LastFailureAt: failed}, time.UnixMilli(999_999), false},
	} {
		if got := tc.b.Fresh(tc.granted); got != tc.want {
			t.Errorf("%s: Fresh(%s) with LastFailureAt %s = %v, want %v", tc.name, tc.granted.Format(time.StampMicro),
				tc.b.LastFailureAt.Format(time.StampMicro), got, tc.want)
		}
	}
}

func TestBreakerAdmits(t *testing.T) {
	spec := BreakerSpec{Probes: 2}
	for _, tc := range []struct {
		name      string
		b         Breaker
		spec      BreakerSpec
		ok, probe bool
	}{
		{"closed", Breaker{}, spec, true, false},
		{"open", Breaker{State: BreakerOpen}, spec, false, false},
		{"half-open with budget", Breaker{State: BreakerHalfOpen, Probes: 1}, spec, true, true},
		{"half-open, budget taken", Breaker{State: BreakerHalfOpen, Probes: 2}, spec, false, true},
		{"off", Breaker{State: BreakerOpen}, BreakerSpec{Failures: -1}, true, false},
	} {
		ok, probe := tc.b.Admits(tc.spec)
		if ok != tc.ok || probe != tc.probe {
			t.Errorf("%s: Admits = %v, %v; want %v, %v", tc.name, ok, probe, tc.ok, tc.probe)
		}
	}
}

func TestBreakerOffIgnoresEvidence(t *testing.T) {
	b, tr := Breaker{}.Report(time.Now(), BreakerSpec{Failures: -1}, time.Now(), false, OutcomeConnect)
	if b != (Breaker{}) || tr != TransitionNone {
		t.Errorf("Report with the breaker off = %+v, %q; want no change", b, tr)
	}
}

func TestBreakerAdvanceAndGrant(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	spec := BreakerSpec{Cooldown: time.Second, Probes: 2}
	open := Breaker{State: BreakerOpen, OpenedAt: t0}
	for _, tc := range []struct {
		name  string
		b     Breaker
		at    time.Duration
		spec  BreakerSpec
		want  BreakerState
		trans BreakerTransition
	}{
		{"closed stays", Breaker{Failures: 2}, time.Hour, spec, BreakerClosed, TransitionNone},
		{"open within the cooldown", open, time.Second - time.Millisecond, spec, BreakerOpen, TransitionNone},
		{"open at the cooldown's end", open, time.Second, spec, BreakerHalfOpen, TransitionHalfOpen},
		{"half-open stays", Breaker{State: BreakerHalfOpen, OpenedAt: t0}, time.Hour, spec, BreakerHalfOpen, TransitionNone},
		{"off reads closed", open, 0, BreakerSpec{Failures: -1}, BreakerClosed, TransitionNone},
	} {
		got, tr := tc.b.Advance(t0.Add(tc.at), tc.spec)
		if got.State != tc.want || tr != tc.trans {
			t.Errorf("%s: Advance = %s, %q; want %s, %q", tc.name, got.State, tr, tc.want, tc.trans)
		}
	}
	b, _ := open.Advance(t0.Add(time.Second), spec)
	for i := 1; i <= 2; i++ {
		var probe bool
		b, probe = b.Grant(spec)
		if !probe || b.Probes != i {
			t.Fatalf("grant %d on a half-open engine: probe %v, %d outstanding; want a probe, %d", i, probe, b.Probes, i)
		}
	}
	if ok, _ := b.Admits(spec); ok {
		t.Errorf("Admits with %d of %d probes out = true, want false", b.Probes, spec.Probes)
	}
	if c, probe := (Breaker{}).Grant(spec); probe || c != (Breaker{}) {
		t.Errorf("Grant on a closed engine = %+v, probe %v; want unchanged, not a probe", c, probe)
	}
	if got := BreakerCounter(TransitionReopened); got != "breaker:reopened" {
		t.Errorf("BreakerCounter(reopened) = %q, want breaker:reopened", got)
	}
}
