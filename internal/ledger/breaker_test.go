package ledger

import (
	"testing"
	"time"
)

func TestBreakerRule(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	spec := BreakerSpec{Failures: 3, Cooldown: 10 * time.Second, Probes: 1, Successes: 2}
	type step struct {
		at      time.Duration // after t0
		probe   bool
		outcome Outcome
		want    BreakerState
		trans   BreakerTransition
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"successes reset the count", []step{
			{0, false, OutcomeConnect, BreakerClosed, TransitionNone},
			{1, false, OutcomeReset, BreakerClosed, TransitionNone},
			{2, false, OutcomeOK, BreakerClosed, TransitionNone},
			{3, false, OutcomeStatus5xx, BreakerClosed, TransitionNone},
			{4, false, OutcomeStatus5xx, BreakerClosed, TransitionNone},
		}},
		{"no evidence changes nothing", []step{
			{0, false, OutcomeConnect, BreakerClosed, TransitionNone},
			{1, false, OutcomeConnect, BreakerClosed, TransitionNone},
			{2, false, OutcomeNone, BreakerClosed, TransitionNone},
			{3, false, OutcomeFirstByteTimeout, BreakerOpen, TransitionOpened},
		}},
		{"open ignores late outcomes, half-open after the cooldown, probes close it", []step{
			{0, false, OutcomeConnect, BreakerClosed, TransitionNone},
			{0, false, OutcomeConnect, BreakerClosed, TransitionNone},
			{0, false, OutcomeTTFTBreach, BreakerOpen, TransitionOpened},
			{time.Second, false, OutcomeOK, BreakerOpen, TransitionNone},
			{10 * time.Second, false, OutcomeOK, BreakerHalfOpen, TransitionNone}, // not a probe
			{11 * time.Second, true, OutcomeOK, BreakerHalfOpen, TransitionNone},
			{12 * time.Second, true, OutcomeOK, BreakerClosed, TransitionClosed},
		}},
		{"a failed probe reopens it for another cooldown", []step{
			{0, false, OutcomeConnect, BreakerClosed, TransitionNone},
			{0, false, OutcomeConnect, BreakerClosed, TransitionNone},
			{0, false, OutcomeConnect, BreakerOpen, TransitionOpened},
			{10 * time.Second, true, OutcomeReset, BreakerOpen, TransitionReopened},
			{19 * time.Second, false, OutcomeOK, BreakerOpen, TransitionNone},
			{20 * time.Second, true, OutcomeOK, BreakerHalfOpen, TransitionNone},
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
				var tr BreakerTransition
				b, tr = b.Report(now, spec, s.probe, s.outcome)
				if got := b.At(now, spec).State; got != s.want || tr != s.trans {
					t.Fatalf("step %d (%s at %s): state %s, transition %q; want %s, %q", i, s.outcome, s.at, got, tr, s.want, s.trans)
				}
				if b.Probes != 0 {
					t.Fatalf("step %d: %d probes outstanding after the probe's release", i, b.Probes)
				}
			}
		})
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
	b, tr := Breaker{}.Report(time.Now(), BreakerSpec{Failures: -1}, false, OutcomeConnect)
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
