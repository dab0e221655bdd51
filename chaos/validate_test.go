package chaos

import (
	"strings"
	"testing"
)

func testScenario(t *testing.T) *Scenario {
	t.Helper()
	sc, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func TestChecks(t *testing.T) {
	sc := testScenario(t) // session_ttl 2s: reclaim bound 3s
	worst := testScenario(t)
	worst.Topology.Reserve = "worst_case"
	for _, tc := range []struct {
		name  string
		check string
		ev    evidence
		pass  bool
		fig   string
	}{
		{"within capacity", CheckNoOverCapacity, evidence{sc: worst, engines: []EngineSample{
			{Engine: "engine-0", KVCapacity: 1000, Slots: 4, PeakDemand: 1000, PeakAcceptedSeqs: 4},
		}}, true, "peak 1.00 KV, 1.00 slots"},
		{"over KV", CheckNoOverCapacity, evidence{sc: worst, engines: []EngineSample{
			{Engine: "engine-0", KVCapacity: 1000, Slots: 4, PeakDemand: 900},
			{Engine: "engine-1", KVCapacity: 1000, Slots: 4, PeakDemand: 1001},
		}}, false, "engine-1"},
		{"over slots", CheckNoOverCapacity, evidence{sc: worst, engines: []EngineSample{
			{Engine: "engine-0", KVCapacity: 1000, Slots: 4, AcceptedSeqs: 5},
		}}, false, "1.25 slots"},
		// Elastic pools (the default) are judged on what requests really
		// held and on preemptions, not on admitted demand.
		{"elastic: admitted above capacity, held within", CheckNoOverCapacity, evidence{engines: []EngineSample{
			{Engine: "engine-0", KVCapacity: 1000, Slots: 4, PeakDemand: 3000, PeakActual: 1000, PeakAcceptedSeqs: 4},
		}}, true, "peak 1.00 actual KV, 1.00 slots (engine-0), 0 preemptions"},
		{"elastic: held above capacity", CheckNoOverCapacity, evidence{engines: []EngineSample{
			{Engine: "engine-0", KVCapacity: 1000, Slots: 4, PeakActual: 900},
			{Engine: "engine-1", KVCapacity: 1000, Slots: 4, ActualDemand: 1001},
		}}, false, "engine-1: requests held 1001/1000"},
		{"elastic: preempted", CheckNoOverCapacity, evidence{engines: []EngineSample{
			{Engine: "engine-0", T: 1, KVCapacity: 1000, Slots: 4, PeakActual: 500, Preemptions: 2},
			{Engine: "engine-0", T: 2, KVCapacity: 1000, Slots: 4, PeakActual: 600, Preemptions: 5},
		}}, false, "3 preemptions"},
		{"elastic: over slots", CheckNoOverCapacity, evidence{engines: []EngineSample{
			{Engine: "engine-0", KVCapacity: 1000, Slots: 4, AcceptedSeqs: 5},
		}}, false, "1.25 slots"},
		{"reclaimed in time", CheckReclaim, evidence{reclaims: []ReclaimEvent{{Router: "router-0", Leases: 3, Seconds: 2.4}}}, true, "2.4s"},
		{"reclaimed late", CheckReclaim, evidence{reclaims: []ReclaimEvent{{Router: "router-0", Leases: 3, Seconds: 3.2}}}, false, "3.2s"},
		{"never reclaimed", CheckReclaim, evidence{reclaims: []ReclaimEvent{{Router: "router-0", Leases: 3, Seconds: -1}}}, false, "never"},
		{"no kill", CheckReclaim, evidence{}, true, "n/a"},
		{"faults applied", CheckFaultsApplied, evidence{faults: []FaultEvent{{Kind: FaultClockOffset, Target: "router-0", Phase: "inject"}}}, true, "0 of 1"},
		{"offset not taken", CheckFaultsApplied, evidence{faults: []FaultEvent{
			{Kind: FaultClockOffset, Target: "router-0", Phase: "inject"},
			{Kind: FaultClockOffset, Target: "router-1", Phase: "inject", Err: "router did not report clock_offset=-30s at start"},
		}}, false, "1 of 2"},
		{"leases left", CheckNoLeasesAtEnd, evidence{endLeases: 2}, false, "2 leases"},
		{"dead holder after TTL", CheckNoDeadHolder, evidence{
			reclaims: []ReclaimEvent{{T: 1, Router: "router-0", Dead: true, Holders: []string{"router-0/a"}}},
			audits:   []AuditSample{{T: 3.5, ByHolder: map[string]int{"router-0/a": 1}}, {T: 4.5, ByHolder: map[string]int{"router-0/a": 1}}},
		}, false, "1 samples"},
		{"clean rejections", CheckCleanErrors, evidence{requests: []RequestEvent{
			{Status: 200}, {Status: 503, RetryAfter: "1", Code: "engine_kv_full"}, {Status: 429, RetryAfter: "2", Code: "tenant_kv_quota"}, {Status: 400},
		}}, true, "0 unexplained"},
		{"503 without Retry-After", CheckCleanErrors, evidence{requests: []RequestEvent{{Status: 503, Code: "x"}}}, false, "1 unexplained"},
		{"502 outside a fault", CheckCleanErrors, evidence{requests: []RequestEvent{{T: 9, End: 9.1, Status: 502}}}, false, "1 unexplained"},
		{"502 during a fault", CheckCleanErrors, evidence{
			faults:   []FaultEvent{{T: 5, Kind: FaultEngineCrash, Target: "engine-0", Phase: "inject"}, {T: 6, Kind: FaultEngineCrash, Target: "engine-0", Phase: "heal"}},
			requests: []RequestEvent{{T: 6.5, End: 6.6, Status: 502}, {T: 4.95, End: 5.0, Err: "EOF"}},
		}, true, "0 unexplained"},
		{"transport error after the settle", CheckCleanErrors, evidence{
			faults:   []FaultEvent{{T: 1, Kind: FaultKillRouter, Target: "router-0", Phase: "inject"}},
			requests: []RequestEvent{{T: 4.5, End: 4.6, Err: "EOF"}},
		}, false, "1 unexplained"},
		{"stale shown", CheckStaleSeen, evidence{
			faults: []FaultEvent{{T: 1, Kind: FaultStaleTelemetry, Target: "engine-0", Phase: "inject"}, {T: 5, Kind: FaultStaleTelemetry, Target: "engine-0", Phase: "heal"}},
			audits: []AuditSample{{T: 2}, {T: 3.5, Stale: []string{"engine-0"}}},
		}, true, "1/1"},
		{"stale never shown", CheckStaleSeen, evidence{
			faults: []FaultEvent{{T: 1, Kind: FaultStaleTelemetry, Target: "engine-0", Phase: "inject"}, {T: 5, Kind: FaultStaleTelemetry, Target: "engine-0", Phase: "heal"}},
			audits: []AuditSample{{T: 2}, {T: 3.5}, {T: 6, Stale: []string{"engine-0"}}},
		}, false, "never stale"},
		{"stale too short to judge", CheckStaleSeen, evidence{
			faults: []FaultEvent{{T: 1, Kind: FaultStaleTelemetry, Target: "engine-0", Phase: "inject"}, {T: 2, Kind: FaultStaleTelemetry, Target: "engine-0", Phase: "heal"}},
		}, true, "n/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := tc.ev
			if ev.sc == nil {
				ev.sc = sc
			}
			v := ev.check(tc.check)
			if v.Pass != tc.pass || !strings.Contains(v.Figure+" "+v.Detail, tc.fig) {
				t.Errorf("%s = pass %v, %q (%s); want pass %v, containing %q", tc.check, v.Pass, v.Figure, v.Detail, tc.pass, tc.fig)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	s := summarize([]RequestEvent{
		{Status: 200, LatencyMS: 10}, {Status: 200, LatencyMS: 30}, {Status: 200, Err: "stream cut"},
		{Status: 503, Code: "engine_kv_full"}, {Err: "EOF"}, {Err: "client: shed"},
	}, nil)
	if s.Total != 5 || s.Completed != 2 || s.Rejected != 1 || s.Transport != 1 || s.StreamCuts != 1 || s.Shed != 1 {
		t.Errorf("summary = %+v", s)
	}
	if s.ByCode["engine_kv_full"] != 1 || s.P50MS != 30 {
		t.Errorf("codes %v, p50 %v", s.ByCode, s.P50MS)
	}
}
