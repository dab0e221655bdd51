package chaos

import (
	"math"
	"strings"
	"testing"
)

func TestRecoveryChecks(t *testing.T) {
	cold := testScenario(t)
	cold.Topology.ColdStart = true
	// A Redis restart killed at 4s, back at 4.5s, and router-2 cut from
	// the ledger from 3.9s to 6.9s.
	restart := []FaultEvent{
		{T: 3.9, Kind: FaultPartition, Target: "router-2", Phase: "inject", Detail: "ledger drop 0s"},
		{T: 4, Kind: FaultRestartRedis, Target: "redis", Phase: "inject"},
		{T: 4.5, Kind: FaultRestartRedis, Target: "redis", Phase: "heal"},
		{T: 6.9, Kind: FaultPartition, Target: "router-2", Phase: "heal", Detail: "ledger pass"},
	}
	for _, tc := range []struct {
		name  string
		check string
		ev    evidence
		pass  bool
		fig   string
	}{
		{"cold start within the bound", CheckColdStart, evidence{sc: cold, routersUp: -0.1, requests: []RequestEvent{
			{T: 0, End: 3, Status: 503}, {T: 0.2, End: 4, Status: 200, HeadersMS: 1500}, {T: 0.5, End: 2, Status: 200, HeadersMS: 100},
		}}, true, "first grant 0.70s after the routers were up"},
		{"cold start past the bound", CheckColdStart, evidence{sc: cold, routersUp: 0, requests: []RequestEvent{
			{T: 0, End: 3, Status: 503}, {T: 2.5, End: 4, Status: 200, HeadersMS: 10},
		}}, false, "first grant 2.51s"},
		{"cold start: non-streamed counts its end", CheckColdStart, evidence{sc: cold, routersUp: 0, requests: []RequestEvent{
			{T: 0.1, End: 2.4, Status: 200},
		}}, false, "first grant 2.40s"},
		{"cold start: nothing granted", CheckColdStart, evidence{sc: cold, routersUp: 0, requests: []RequestEvent{{Status: 503}}}, false, "no grant"},
		{"cold start: load not started with the routers", CheckColdStart, evidence{routersUp: 0}, false, "n/a"},
		{"cold start: routers up not recorded", CheckColdStart, evidence{sc: cold, routersUp: math.NaN()}, false, "n/a"},
		{"resumed within the bound, partitioned requests running", CheckRecoveryResumes, evidence{faults: restart, requests: []RequestEvent{
			// Granted before the kill: not a resumption, however late
			// its headers; router-2's two still run at 5.7s.
			{T: 3.5, End: 7, Status: 200, HeadersMS: 300, Router: "router-2"},
			{T: 3.6, End: 5.6, Status: 200, HeadersMS: 300, Router: "router-2"},
			{T: 3.7, End: 6, Status: 200, HeadersMS: 200, Router: "router-2"},
			{T: 3.75, End: 8, Status: 200, HeadersMS: 900, Router: "router-2"}, // headers after the kill: not counted
			{T: 3.8, End: 9, Status: 200, HeadersMS: 1000, Router: "router-0"},
			{T: 4.1, End: 5, Status: 503, Router: "router-0"},
			{T: 5.2, End: 8, Status: 200, HeadersMS: 500, Router: "router-1"},
		}}, true, "grants resumed 1.20s after redis was back (2 requests of a partitioned router still running then)"},
		{"resumed past the bound", CheckRecoveryResumes, evidence{faults: restart, requests: []RequestEvent{
			{T: 4.2, End: 9, Status: 200, HeadersMS: 3400},
		}}, false, "first grant 3.10s later"},
		{"never resumed", CheckRecoveryResumes, evidence{faults: restart, requests: []RequestEvent{{T: 4.2, Status: 503}}}, false, "no grant after it"},
		{"reserver restart on the embedded ledger", CheckRecoveryResumes, evidence{faults: []FaultEvent{
			{T: 2, Kind: FaultKillReserver, Target: "reserver-0", Phase: "inject"},
			{T: 2.3, Kind: FaultKillReserver, Target: "reserver-0", Phase: "heal"},
		}, requests: []RequestEvent{{T: 2.5, End: 4, Status: 200, HeadersMS: 800}}}, true, "1.00s after reserver-0 was back"},
		{"no ledger restart", CheckRecoveryResumes, evidence{faults: restart[:1]}, false, "n/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := tc.ev
			if ev.sc == nil {
				ev.sc = testScenario(t)
			}
			v := ev.check(tc.check)
			if v.Pass != tc.pass || !strings.Contains(v.Figure+" "+v.Detail, tc.fig) {
				t.Errorf("%s = pass %v, %q (%s); want pass %v, containing %q", tc.check, v.Pass, v.Figure, v.Detail, tc.pass, tc.fig)
			}
		})
	}
}

func TestColdStartNeedsTopology(t *testing.T) {
	sc := testScenario(t)
	sc.Checks = []string{CheckColdStart}
	if err := sc.Validate(); err == nil || !strings.Contains(err.Error(), "cold_start") {
		t.Errorf("Validate with cold_start checked but not configured = %v, want an error naming topology.cold_start", err)
	}
	sc.Topology.ColdStart = true
	if err := sc.Validate(); err != nil {
		t.Errorf("Validate with cold_start configured = %v, want nil", err)
	}
}
