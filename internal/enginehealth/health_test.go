package enginehealth

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/internal/ledger"
)

// A failure demotes an engine for about one half-life; a run of failures
// for longer; successes shorten it; other engines are not touched.
func TestDemotionDecays(t *testing.T) {
	for _, tc := range []struct {
		name    string
		events  string // f: failure, s: success, in order, at once
		after   time.Duration
		demoted bool
	}{
		{"healthy", "", 0, false},
		{"one failure", "f", 0, true},
		{"one failure, within its half-life", "f", 9 * time.Second, true},
		{"one failure, forgiven", "f", 11 * time.Second, false},
		{"three failures, still demoted after two half-lives", "fff", 20 * time.Second, true},
		{"three failures, forgiven", "fff", 33 * time.Second, false},
		{"failure then successes", "fss", 0, false},
		{"successes only", "sss", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clockwork.NewFakeClock()
			r := New(Config{Clock: clk})
			for _, ev := range tc.events {
				if ev == 'f' {
					r.Failure("p", "a")
				} else {
					r.Success("p", "a")
				}
			}
			clk.Advance(tc.after)
			if got := r.Of("p", "a").Demoted; got != tc.demoted {
				t.Errorf("demoted %v, want %v", got, tc.demoted)
			}
			if r.Of("p", "b").Demoted || r.Of("q", "a").Demoted {
				t.Errorf("another engine or pool demoted")
			}
		})
	}
}

// The breaker and drain flag are the last poll's, while it is fresh.
func TestBreakerFromStats(t *testing.T) {
	clk := clockwork.NewFakeClock()
	r := New(Config{Clock: clk, MaxStatsAge: time.Second})
	r.ObserveStats("p", ledger.PoolStats{Engines: []ledger.EngineStats{
		{Spec: ledger.EngineSpec{ID: "a"}, Breaker: ledger.Breaker{State: ledger.BreakerOpen}},
		{Spec: ledger.EngineSpec{ID: "b"}, Breaker: ledger.Breaker{State: ledger.BreakerHalfOpen}, Draining: true},
		{Spec: ledger.EngineSpec{ID: "c"}},
	}})
	for _, tc := range []struct {
		engine ledger.EngineID
		want   Health
	}{
		{"a", Health{Breaker: ledger.BreakerOpen}},
		{"b", Health{Breaker: ledger.BreakerHalfOpen, Draining: true}},
		{"c", Health{}},
		{"unknown", Health{}},
	} {
		if got := r.Of("p", tc.engine); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.engine, got, tc.want)
		}
	}
	clk.Advance(2 * time.Second)
	if got := r.Of("p", "a"); got != (Health{}) {
		t.Errorf("from a poll 2s old (max 1s): %+v, want nothing known", got)
	}
}
