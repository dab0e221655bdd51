package chaos

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestSumCounters(t *testing.T) {
	text := `# HELP leasehold_router_requests_total Requests.
# TYPE leasehold_router_requests_total counter
leasehold_router_requests_total{code="200",pool="sim"} 40
leasehold_router_requests_total{code="503",pool="sim"} 2
leasehold_router_requests_total_other 99
leasehold_router_admit_seconds_bucket{result="granted",le="0.001"} 7
leasehold_router_admit_seconds_count{result="granted"} 40
leasehold_router_admit_seconds_count{result="rejected"} 2
leasehold_router_grants_total{pool="sim"} 40
leasehold_router_lease_grows_total{pool="sim"} 21
`
	var rc RouterCounters
	if err := sumCounters(strings.NewReader(text), &rc); err != nil {
		t.Fatal(err)
	}
	want := RouterCounters{Requests: 42, Attempts: 42, Grants: 40, Grows: 21}
	if rc != want {
		t.Fatalf("sumCounters = %+v, want %+v", rc, want)
	}
	if got := rc.LedgerCalls(); got != 103.0/42 {
		t.Errorf("LedgerCalls = %v, want 103/42", got)
	}
	if err := sumCounters(strings.NewReader("leasehold_router_grants_total{pool=\"sim\"} many\n"), &rc); err == nil {
		t.Error("a value that is not a number: no error")
	}
}

// TestGoodputMeasure checks the figures of one run from its events: the
// warmup left out, tokens only of requests completed in the window, cut
// requests' TTFT as a lower bound.
func TestGoodputMeasure(t *testing.T) {
	s := &Scenario{Workload: Workload{Duration: Duration(10 * time.Second), Rate: 5}}
	reqs := []RequestEvent{
		{T: 1, End: 1.5, Status: 200, Stream: true, TTFTMS: 900, Completion: 1000}, // warmup
		{T: 1, End: 2.5, Status: 200, Stream: true, TTFTMS: 900, Completion: 50},   // arrived in the warmup, ended after
		{T: 3, End: 4, Status: 200, Stream: true, TTFTMS: 10, Completion: 100},
		{T: 4, End: 5, Status: 200, Stream: true, TTFTMS: 30, Completion: 300},
		{T: 5, End: 5, Status: 503},
		{T: 6, End: 6, Status: 502},
		{T: 7, End: 10, Status: 200, Stream: true, LatencyMS: 3000, Err: errCutAtEnd}, // queued at the engine
		{T: 8, End: 8, Err: "client: in-flight bound reached, arrival shed"},
	}
	res := &Result{Engines: []EnginePeak{
		{KVCapacity: 1000, PeakActual: 500, ActualRatio: 0.5, Preemptions: 1, PeakRunning: 4, PeakKVUsed: 400},
		{KVCapacity: 1000, PeakActual: 1200, ActualRatio: 1.2, Preemptions: 2, PeakRunning: 3, PeakKVUsed: 900},
	}}
	var g GoodputRow
	g.measure(s, 2*time.Second, res, reqs)
	if g.Requests != 5 || g.Completed != 2 || g.Refused != 1 || g.Failed != 1 || g.Cut != 1 {
		t.Errorf("requests %d completed %d refused %d failed %d cut %d, want 5 2 1 1 1", g.Requests, g.Completed, g.Refused, g.Failed, g.Cut)
	}
	if g.TokensPerSec != 450.0/8 {
		t.Errorf("tokens/s = %v, want 450 over the 8 s after the warmup", g.TokensPerSec)
	}
	if g.TTFTp50 != 30 || g.TTFTp95 != 3000 || g.TTFTCensored != 1 || g.TTFTLower {
		t.Errorf("TTFT p50 %v p95 %v censored %d lower %v, want 30, 3000 (the cut request's age), 1, false", g.TTFTp50, g.TTFTp95, g.TTFTCensored, g.TTFTLower)
	}
	if g.Preemptions != 3 || g.PreemptPerK != 1000*3.0/5 || g.PeakActual != 1.2 || g.PeakRunning != 4 || g.PeakKVUsed != 900 {
		t.Errorf("engines: %+v", g)
	}
	var b strings.Builder
	WriteGoodput(&b, []GoodputRow{{Path: "direct", Load: "1×", TokensPerSec: 100}, {Path: "x", Load: "1×", TokensPerSec: 95}}, "direct")
	if !strings.Contains(b.String(), "| 1× | x | 95 | 0.95× |") {
		t.Errorf("table lacks the same-load ratio:\n%s", b.String())
	}
}

// TestGoodputVariantsRun runs two tiny variants, straight to an engine and
// through a router, with real processes, and checks each measured what
// its path has.
func TestGoodputVariantsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: real processes")
	}
	bins := binaries(t)
	var vs []Variant
	for _, p := range []string{PathDirect, PathElastic} {
		s := goodputScenario("tiny-"+strings.Fields(p)[0], p, 20, time.Second, 2*time.Second)
		s.Topology.Ledger, s.Topology.Routers = LedgerMemory, 1
		s.Topology.Engines[0].Count, s.Topology.Engines[0].Speed = 1, 20
		vs = append(vs, Variant{Path: p, Load: "1×", Warmup: time.Second, Scenario: s})
	}
	rows, err := RunVariants(context.Background(), vs, t.TempDir(), Options{Binaries: bins})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Error != "" || r.Completed == 0 || r.TokensPerSec <= 0 || r.TTFTp50 <= 0 || r.KVCapacity != 16384 {
			t.Errorf("%s: %+v", r.Path, r)
		}
	}
	if rows[0].Router != nil {
		t.Errorf("straight to the engine read router counters: %+v", rows[0].Router)
	}
	// Every request through the router made at least one Acquire, and
	// most were granted (a capacity refusal under this tiny engine is
	// allowed: the run has no queue), each grant an Acquire that also
	// costs a Release.
	if rc := rows[1].Router; rc == nil || rc.Attempts < rc.Requests || rc.Grants > rc.Attempts ||
		rc.Grants < rc.Requests/2 || rc.LedgerCalls() < 1+rc.Grants/rc.Requests {
		t.Errorf("through the router: counters %+v, want an Acquire per request and a Release per grant", rc)
	}
}
