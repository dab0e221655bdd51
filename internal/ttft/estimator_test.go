package ttft

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/leasehold/leasehold/internal/ledger"
)

func newTest(slos map[ledger.PriorityName]time.Duration) (*Estimator, *clockwork.FakeClock) {
	clk := clockwork.NewFakeClock()
	return New(Config{Clock: clk, SLOs: slos}), clk
}

func near(got, want time.Duration, tol float64) bool {
	return math.Abs(float64(got-want)) <= tol*float64(want)
}

// This router's own dispatches not past their first token are the work
// ahead, exactly: each streamed one until FirstToken, a non-streamed one
// until its estimated first token has passed.
func TestOwnQueueing(t *testing.T) {
	e, clk := newTest(nil)
	start := func(prompt int64, stream bool) *Inflight {
		return e.Start(Dispatch{Pool: "p", Engine: "a", Class: "c", Prompt: prompt, Stream: stream})
	}
	ahead := func() int64 { return e.Estimate("p", "a", 1000).Ahead }
	a, b := start(1000, true), start(3000, true)
	if got := ahead(); got != 4000 {
		t.Fatalf("two streamed dispatches pending: ahead %d, want 4000", got)
	}
	est := e.Estimate("p", "a", 1000)
	if want := seconds(5000.0 / DefaultRate); !near(est.Expected, want, 1e-6) {
		t.Errorf("expected %s, want %s: (ahead 4000 + prompt 1000) / DefaultRate", est.Expected, want)
	}
	if est.Warm {
		t.Errorf("an engine neither seeded nor observed reads warm")
	}
	clk.Advance(300 * time.Millisecond)
	if d := a.FirstToken(); d != 300*time.Millisecond {
		t.Errorf("FirstToken = %s, want the 300ms since Start", d)
	}
	if d := a.FirstToken(); d != 0 {
		t.Errorf("a second FirstToken = %s, want 0 (counted once)", d)
	}
	if got := ahead(); got != 3000 {
		t.Errorf("after a's first token: ahead %d, want 3000", got)
	}
	b.Done() // cut before its first token
	b.Done()
	a.Done()
	if got := ahead(); got != 0 {
		t.Errorf("after Done: ahead %d, want 0", got)
	}
	nb := start(2000, false)
	if got := ahead(); got != 2000 {
		t.Errorf("non-streamed dispatch just sent: ahead %d, want 2000", got)
	}
	clk.Advance(time.Second) // past its estimated first token
	if got := ahead(); got != 0 {
		t.Errorf("non-streamed dispatch past its estimated first token: ahead %d, want 0", got)
	}
	nb.Done()
}

// Other routers' work is read from the fleet view's poll: the engine's
// leases not this router's times the share of a request's time spent
// before its first token, or the engine's reported waiting queue, the
// larger, at the pool's mean prompt; a poll older than MaxStatsAge, or
// stale telemetry, counts for nothing.
func TestOthersQueueing(t *testing.T) {
	e, clk := newTest(nil)
	// One streamed request of 1000 tokens: 100ms to its first token, 1s in
	// flight: share 0.1, mean prompt 1000.
	in := e.Start(Dispatch{Pool: "p", Engine: "a", Prompt: 1000, Stream: true})
	clk.Advance(100 * time.Millisecond)
	in.FirstToken()
	clk.Advance(900 * time.Millisecond)
	in.Done()
	stats := func(leases, waiting int64, stale bool) ledger.PoolStats {
		return ledger.PoolStats{Engines: []ledger.EngineStats{{Spec: ledger.EngineSpec{ID: "a"}, Leases: leases, Stale: stale,
			ObservedAt: clk.Now(), LastObservation: ledger.Observation{Waiting: waiting}}}}
	}
	for _, tc := range []struct {
		name          string
		leases, wait  int64
		stale         bool
		age           time.Duration
		own           int64 // own streamed dispatches pending, 500 tokens each
		want          int64
		wantExplained string
	}{
		{"leases, no queue", 50, 0, false, 0, 0, 5000, "50 leases × 0.1 × 1000"},
		{"the engine's queue", 10, 4, false, 0, 0, 4000, "waiting 4 > 10 × 0.1"},
		{"own pending counted once", 10, 4, false, 0, 2, 1000 + 2000, "own 2×500, then waiting 4 − own 2, × 1000"},
		{"stale telemetry: leases only", 10, 4, true, 0, 0, 1000, "10 × 0.1 × 1000"},
		{"old poll", 50, 4, false, 2 * DefaultMaxStatsAge, 0, 0, "nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.ObserveStats("p", stats(tc.leases, tc.wait, tc.stale))
			clk.Advance(tc.age)
			var own []*Inflight
			for range tc.own {
				own = append(own, e.Start(Dispatch{Pool: "p", Engine: "a", Prompt: 500, Stream: true}))
			}
			got := e.Estimate("p", "a", 100).Ahead
			for _, in := range own {
				in.Done()
			}
			if math.Abs(float64(got-tc.want)) > 50 { // the mean prompt moved a little with own's 500s
				t.Errorf("ahead %d, want about %d (%s)", got, tc.want, tc.wantExplained)
			}
		})
	}
}

// Queueing and learning together: on an engine that prefills one request
// after another at 5,000 tokens/s, requests sent in bursts see the work
// ahead of them; once warm the estimate tracks the observed TTFT within a
// few percent, and the p50 relative error (the exported histogram) is small.
func TestEstimateTracksASerialEngine(t *testing.T) {
	e, clk := newTest(nil)
	const rate = 5000.0
	var sum float64
	n := 0
	for burst := range 60 {
		// A burst of 4 requests; the engine serves them in order.
		var ins []*Inflight
		prompts := []int64{400, 1200, 2500, 800}
		for i, p := range prompts {
			prompts[i] = p + int64(burst%5)*100
			ins = append(ins, e.Start(Dispatch{Pool: "p", Engine: "a", Prompt: prompts[i], Stream: true}))
		}
		var done float64
		for i, in := range ins {
			done += float64(prompts[i]) / rate
			clk.Advance(time.Duration(done*float64(time.Second)) - clk.Since(in.started))
			est := in.est
			obs := in.FirstToken().Seconds()
			if burst >= 20 {
				sum += math.Abs(est-obs) / obs
				n++
			}
		}
		for _, in := range ins {
			in.Done()
		}
		clk.Advance(time.Second)
	}
	if mean := sum / float64(n); mean > 0.05 {
		t.Errorf("mean relative error once warm %.3f, want under 0.05", mean)
	}
	fams := gather(t, e)
	if h := fams["leasehold_router_ttft_estimate_error_ratio"]; len(h) != 1 || h[0].GetHistogram().GetSampleCount() != 240 {
		t.Errorf("error histograms %v, want one (pool p, engine a) of 240 samples", h)
	}
	if g := fams["leasehold_router_ttft_prefill_tokens_per_second"]; len(g) != 1 || math.Abs(g[0].GetGauge().GetValue()-rate)/rate > 0.05 {
		t.Errorf("exported prefill rate %v, want one gauge of about %v", g, rate)
	}
	if g := fams["leasehold_router_ttft_estimate_seconds"]; len(g) != 1 || g[0].GetGauge().GetValue() <= 0 {
		t.Errorf("estimate gauges %v, want one, positive", g)
	}
	if h := fams["leasehold_router_ttft_seconds"]; len(h) != 1 || h[0].GetHistogram().GetSampleCount() != 240 {
		t.Errorf("client TTFT histograms %v, want one of 240 samples", h)
	}
}

// gather collects c through a registry, by family name.
func gather(t *testing.T, c prometheus.Collector) map[string][]*dto.Metric {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string][]*dto.Metric{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf.GetMetric()
	}
	return out
}

// Seeding from engine metrics makes an engine warm at once, unless it was
// observed already.
func TestSeed(t *testing.T) {
	e, _ := newTest(nil)
	e.Seed("p", "a", 2000)
	est := e.Estimate("p", "a", 1000)
	if !est.Warm || !near(est.Expected, 500*time.Millisecond, 1e-6) {
		t.Errorf("seeded at 2000 tokens/s: %+v, want warm and 500ms for 1000 tokens", est)
	}
	e.Seed("p", "a", math.Inf(1))
	e.Seed("p", "a", -3)
	if got := e.Estimate("p", "a", 1000).Expected; !near(got, 500*time.Millisecond, 1e-6) {
		t.Errorf("nonsense seeds changed the estimate to %s", got)
	}
}

// Admissible keeps the candidates that can still meet the class's SLO, in
// order, and says until when; none is ReasonSLO; a class without an SLO,
// and a cold engine, keep everything.
func TestAdmissible(t *testing.T) {
	e, clk := newTest(map[ledger.PriorityName]time.Duration{"interactive": time.Second})
	e.Seed("p", "fast", 10000)
	e.Seed("p", "slow", 1000)
	arrived := clk.Now()
	cands := []ledger.EngineID{"slow", "fast", "cold"}
	for _, tc := range []struct {
		name    string
		class   ledger.PriorityName
		prompt  int64
		elapsed time.Duration
		want    []ledger.EngineID
		until   time.Duration // after arrived; 0: none
		refused bool
	}{
		{"no SLO", "batch", 5000, 0, cands, 0, false},
		{"slow misses", "interactive", 2000, 0, []ledger.EngineID{"fast", "cold"}, time.Second, false},
		{"both fit", "interactive", 500, 0, cands, time.Second, false},
		{"waited too long for fast", "interactive", 2000, 850 * time.Millisecond, []ledger.EngineID{"cold"}, time.Second, false},
		{"budget spent", "interactive", 2000, 1100 * time.Millisecond, nil, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk.Advance(tc.elapsed)
			defer func() { clk.Advance(-tc.elapsed) }()
			kept, until, err := e.Admissible("p", cands, tc.class, tc.prompt, arrived)
			if tc.refused {
				if rej := ledger.AsRejection(err); rej == nil || rej.Reason != ReasonSLO || rej.RetryAfter <= 0 {
					t.Fatalf("err %v, want a rejection %s with a retry hint", err, ReasonSLO)
				}
				return
			}
			if err != nil || strings.Join(ids(kept), ",") != strings.Join(ids(tc.want), ",") {
				t.Fatalf("kept %v, %v; want %v", kept, err, tc.want)
			}
			if tc.until == 0 != until.IsZero() || (!until.IsZero() && until.Sub(arrived) != tc.until) {
				t.Errorf("until %v after arrival, want %v", until.Sub(arrived), tc.until)
			}
		})
	}
}

func ids(s []ledger.EngineID) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = string(x)
	}
	return out
}

func TestBreached(t *testing.T) {
	e, _ := newTest(map[ledger.PriorityName]time.Duration{"interactive": 800 * time.Millisecond})
	for _, tc := range []struct {
		class ledger.PriorityName
		obs   time.Duration
		want  bool
	}{
		{"interactive", 799 * time.Millisecond, false},
		{"interactive", 800 * time.Millisecond, false},
		{"interactive", 801 * time.Millisecond, true},
		{"batch", time.Hour, false},
		{"", time.Hour, false},
	} {
		if got := e.Breached(tc.class, tc.obs); got != tc.want {
			t.Errorf("Breached(%q, %s) = %v, want %v", tc.class, tc.obs, got, tc.want)
		}
	}
}
