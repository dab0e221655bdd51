package chaos

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
)

func spikeScenario(t *testing.T) *Scenario {
	t.Helper()
	sc, err := Load("spike")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func TestRateAt(t *testing.T) {
	w := Workload{Rate: 8, Spike: &Spike{At: Duration(10 * time.Second), For: Duration(5 * time.Second), Factor: 10}}
	for _, tc := range []struct {
		at   time.Duration
		want float64
	}{{0, 8}, {9999 * time.Millisecond, 8}, {10 * time.Second, 80}, {14 * time.Second, 80}, {15 * time.Second, 8}} {
		if got := w.rateAt(tc.at); got != tc.want {
			t.Errorf("rateAt(%s) = %g, want %g", tc.at, got, tc.want)
		}
	}
	if got := (Workload{Rate: 3}).rateAt(time.Hour); got != 3 {
		t.Errorf("without a spike rateAt = %g, want 3", got)
	}
}

func TestTTFTSLOHeld(t *testing.T) {
	sc := spikeScenario(t) // interactive ttft_slo 1s, spike 10s-20s
	// n interactive streamed requests sent during the spike with the given
	// TTFT (ms), and batch ones far slower (not judged).
	during := func(n int, ttft func(i int) float64) []RequestEvent {
		rs := reqs(n, 10, 20, func(i int) RequestEvent {
			return RequestEvent{Priority: "interactive", Stream: true, Status: 200, TTFTMS: ttft(i), LatencyMS: 3000}
		})
		return append(rs, reqs(20, 10, 20, func(int) RequestEvent {
			return RequestEvent{Priority: "batch", Stream: true, Status: 200, TTFTMS: 5000, LatencyMS: 6000}
		})...)
	}
	refused := reqs(30, 10, 20, func(int) RequestEvent {
		return RequestEvent{Priority: "interactive", Status: 503, RetryAfter: "1", Code: "ttft_slo"}
	})
	before := reqs(10, 0, 10, func(int) RequestEvent {
		return RequestEvent{Priority: "interactive", Stream: true, Status: 200, TTFTMS: 4000}
	})
	for _, tc := range []struct {
		name string
		reqs []RequestEvent
		pass bool
		want string
	}{
		{"held", append(append(during(100, func(i int) float64 { return 100 + 9*float64(i) }), refused...), before...), true,
			"interactive p95 TTFT 955 ms ≤ 1s over 100 admitted, 30 refused, sent 10.0s-20.0s"},
		{"missed", during(100, func(i int) float64 { return 100 + 20*float64(i) }), false, "p95 TTFT 2000 ms"},
		{"never a first token", append(during(19, func(int) float64 { return 100 }),
			RequestEvent{T: 11, Priority: "interactive", Stream: true, Status: 200, Err: "first token timeout", LatencyMS: 10000}), false, "p95 TTFT 10000 ms"},
		{"too few", during(9, func(int) float64 { return 100 }), false, "too few to judge"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := (&evidence{sc: sc, requests: tc.reqs}).check(CheckTTFTSLOHeld)
			if v.Pass != tc.pass || !strings.Contains(v.Figure+" "+v.Detail, tc.want) {
				t.Errorf("%s = pass %v, %q (%s); want pass %v, containing %q", CheckTTFTSLOHeld, v.Pass, v.Figure, v.Detail, tc.pass, tc.want)
			}
		})
	}
}

func TestMeasureSpike(t *testing.T) {
	sc := spikeScenario(t)
	rs := []RequestEvent{
		{T: 1, Priority: "interactive", Stream: true, Status: 200, TTFTMS: 40},
		{T: 11, Priority: "interactive", Stream: true, Status: 200, TTFTMS: 900},
		{T: 12, Priority: "batch", Stream: true, Status: 200, TTFTMS: 3000},
		{T: 13, Priority: "interactive", Status: 503, RetryAfter: "1"},
		{T: 13, Priority: "batch", Status: 429, RetryAfter: "1"},
		{T: 14, Priority: "batch", Stream: true, Status: 200, Err: "first token timeout: no first token within 10s", LatencyMS: 10000},
		{T: 15, Priority: "interactive", Err: "context deadline exceeded"},
		{T: 16, Priority: "interactive", Stream: true, Status: 200, TTFTMS: 300, Err: errCutAtEnd},
		{T: 17, Err: "client: in-flight bound reached, arrival shed"},
		{T: 25, Priority: "interactive", Status: 502},
	}
	got := measureSpike(sc, "interactive", rs)
	if got.ClassBefore != 40 || got.ClassDuring != 900 || got.AllDuring != 10000 || !got.AllDuringLower || got.ClassDuringLower {
		t.Errorf("TTFT p95 before %g, during %g (lower %v), all during %g (lower %v); want 40, 900 (false), 10000 (true)",
			got.ClassBefore, got.ClassDuring, got.ClassDuringLower, got.AllDuring, got.AllDuringLower)
	}
	if got.Requests != 7 || got.Failed != 2 || got.Refused != 2 || got.Shed != 1 {
		t.Errorf("during: %d requests, %d failed, %d refused, %d shed; want 7, 2, 2, 1", got.Requests, got.Failed, got.Refused, got.Shed)
	}
	got.Path, got.EstErr = "Leasehold", &EstimateError{P50: 0.23, N: 410}
	var b bytes.Buffer
	WriteSpike(&b, []SpikeRow{got, {Path: "broken", Error: "start topology: boom\nmore"}})
	for _, want := range []string{
		"| path | interactive p95 TTFT before | interactive p95 TTFT during |",
		"| Leasehold | 40 ms | 900 ms | ≥10000 ms | 28.6% | 28.6% | 23% (n=410) |",
		"| broken | error: start topology: boom ||||||",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestBaselineOf(t *testing.T) {
	sc := spikeScenario(t)
	for _, tc := range []struct {
		path, admission string
		slo             time.Duration
	}{
		{BaselineDirect, AdmissionDirect, time.Second},
		{BaselineLocal, AdmissionLocal, 0},
		{BaselineNoSLO, AdmissionLedger, 0},
	} {
		v := baselineOf(sc, tc.path)
		if _, slo := v.Topology.sloClass(); v.Topology.Admission != tc.admission || slo != tc.slo {
			t.Errorf("%s: admission %s, slo %s; want %s, %s", tc.path, v.Topology.Admission, slo, tc.admission, tc.slo)
		}
		if _, err := Prepare(v, Options{}); err != nil {
			t.Errorf("%s: %v", tc.path, err)
		}
	}
	if _, slo := sc.Topology.sloClass(); slo != time.Second {
		t.Errorf("baselineOf changed the scenario: slo %s", slo)
	}
}

func TestHistogramMedian(t *testing.T) {
	exp := `# HELP leasehold_router_ttft_estimate_error_ratio x
# TYPE leasehold_router_ttft_estimate_error_ratio histogram
leasehold_router_ttft_estimate_error_ratio_bucket{engine="engine-0",le="0.1"} 10
leasehold_router_ttft_estimate_error_ratio_bucket{engine="engine-0",le="0.5"} 30
leasehold_router_ttft_estimate_error_ratio_bucket{engine="engine-0",le="+Inf"} 40
leasehold_router_ttft_estimate_error_ratio_sum{engine="engine-0"} 9
leasehold_router_ttft_estimate_error_ratio_count{engine="engine-0"} 40
leasehold_router_ttft_estimate_error_ratio_bucket{engine="engine-1",le="0.1"} 0
leasehold_router_ttft_estimate_error_ratio_bucket{engine="engine-1",le="0.5"} 10
leasehold_router_ttft_estimate_error_ratio_bucket{engine="engine-1",le="+Inf"} 10
leasehold_router_other_bucket{le="0.1"} 99
`
	by := map[float64]float64{}
	if err := sumBuckets(strings.NewReader(exp), TTFTErrorMetric, by); err != nil {
		t.Fatal(err)
	}
	// 50 observations: 10 below 0.1, 40 below 0.5; the 25th lies 15/30 of
	// the way from 0.1 to 0.5.
	got := histogramMedian(by)
	if got == nil || got.N != 50 || math.Abs(got.P50-0.3) > 1e-9 {
		t.Errorf("median = %+v, want p50 0.3 over 50", got)
	}
	if got := histogramMedian(map[float64]float64{0.1: 0, math.Inf(1): 0}); got != nil {
		t.Errorf("median of nothing = %+v, want nil", got)
	}
	if got := histogramMedian(map[float64]float64{0.1: 1, 1: 1, math.Inf(1): 5}); got == nil || got.P50 != 1 {
		t.Errorf("median past the last bound = %+v, want the last bound, 1", got)
	}
	if err := sumBuckets(strings.NewReader(TTFTErrorMetric+`_bucket{le="x"} 1`), TTFTErrorMetric, by); err == nil {
		t.Errorf("a bad le parsed")
	}
}

// TestFleetHealthSettings: the topology's breaker, first-byte timeout and
// ttft_slo reach the fleet file the processes read, the breaker's unset
// fields at the fleet's defaults.
func TestFleetHealthSettings(t *testing.T) {
	sc := spikeScenario(t)
	sc.Topology.Breaker = &BreakerSpec{Failures: 3, Cooldown: Duration(2 * time.Second)}
	sc.Topology.FirstByteTimeout = Duration(time.Second)
	c := &cluster{sc: sc, engines: []*engineNode{{id: "engine-0", addr: "127.0.0.1:1", kvTokens: 16384, slots: 16}}}
	b, err := c.fleetYAML(func(int) string { return "http://127.0.0.1:1" })
	if err != nil {
		t.Fatal(err)
	}
	f, err := fleet.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	want := ledger.BreakerSpec{Failures: 3, Cooldown: 2 * time.Second, Probes: ledger.DefaultBreakerProbes, Successes: ledger.DefaultBreakerSuccesses}
	if p := f.Pools[0]; p.Breaker != want || p.FirstByteTimeout != time.Second {
		t.Errorf("pool breaker %+v, first_byte_timeout %s; want %+v, 1s", p.Breaker, p.FirstByteTimeout, want)
	}
	if got := fmt.Sprint(f.TTFTSLOs); got != "map[interactive:1s]" {
		t.Errorf("ttft_slo = %s, want map[interactive:1s]", got)
	}
	// Without them the pool keeps the fleet's defaults.
	plain := &cluster{sc: testScenario(t), engines: c.engines}
	if b, err = plain.fleetYAML(func(int) string { return "http://127.0.0.1:1" }); err != nil {
		t.Fatal(err)
	}
	if f, err = fleet.Parse(b); err != nil {
		t.Fatal(err)
	}
	if p := f.Pools[0]; p.Breaker != (ledger.BreakerSpec{}).WithDefaults() || p.FirstByteTimeout != 0 || len(f.TTFTSLOs) != 0 {
		t.Errorf("plain pool breaker %+v, first_byte_timeout %s, slos %v; want the defaults", p.Breaker, p.FirstByteTimeout, f.TTFTSLOs)
	}
}
