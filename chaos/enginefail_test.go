package chaos

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// reqs returns n requests sent from t0 to t1 (evenly), each built by mk.
func reqs(n int, t0, t1 float64, mk func(i int) RequestEvent) []RequestEvent {
	out := make([]RequestEvent, n)
	for i := range n {
		r := mk(i)
		r.T = t0 + (t1-t0)*float64(i)/float64(n)
		r.End = r.T + 0.2
		out[i] = r
	}
	return out
}

func ok200(int) RequestEvent {
	return RequestEvent{Status: 200, Stream: true, HeadersMS: 50, LatencyMS: 400, TTFTMS: 60}
}

func TestEngineFailureChecks(t *testing.T) {
	sc := testScenario(t)
	sc.Topology.FirstByteTimeout = Duration(time.Second)
	sc.Workload.Duration = Duration(10 * time.Second)
	kill := []FaultEvent{
		{T: 1, Kind: FaultEngineKill, Target: "engine-0", Phase: "inject"},
		{T: 9, Kind: FaultEngineKill, Target: "engine-0", Phase: "heal"},
	}
	errs := []FaultEvent{
		{T: 11, Kind: FaultEngineErrors, Target: "engine-2", Phase: "inject"},
		{T: 13, Kind: FaultEngineErrors, Target: "engine-2", Phase: "heal"},
	}
	hang := []FaultEvent{
		{T: 2, Kind: FaultEngineHang, Target: "engine-1", Phase: "inject"},
		{T: 5, Kind: FaultEngineHang, Target: "engine-1", Phase: "heal"},
	}
	// 100 requests sent 3s-9s (from 2s after the kill), the first `bad`
	// of them failed.
	afterKill := func(bad int, fail RequestEvent) []RequestEvent {
		return reqs(100, 3, 9, func(i int) RequestEvent {
			if i < bad {
				return fail
			}
			return ok200(i)
		})
	}
	withHang := func(first float64) []RequestEvent {
		rs := reqs(50, 12, 20, ok200) // outside every fault window: the normal first byte
		return append(rs, reqs(20, 2, 5, func(i int) RequestEvent {
			r := ok200(i)
			if i == 0 {
				r.HeadersMS = first
			}
			return r
		})...)
	}
	slowNormal := reqs(50, 12, 20, func(int) RequestEvent {
		return RequestEvent{Status: 200, Stream: true, HeadersMS: 1200, LatencyMS: 1500}
	})
	opened := func(engine string, at float64) BreakerEvent {
		return BreakerEvent{T: at, Engine: engine, From: breakerClosed, To: breakerOpen}
	}
	shown := []AuditSample{{T: 1, Breakers: map[string]string{"engine-0": "closed"}}}
	for _, tc := range []struct {
		name  string
		check string
		ev    evidence
		pass  bool
		want  string
	}{
		{"1% failed after the kill", CheckFailuresAfterCrash, evidence{faults: kill, requests: append(
			// Failures in the first 2 s after the kill do not count.
			reqs(20, 1, 3, func(int) RequestEvent { return RequestEvent{Status: 502} }),
			afterKill(1, RequestEvent{Status: 502})...)}, true, "1 of 100 requests sent from 3.0s failed (1.00%"},
		{"2% failed after the kill", CheckFailuresAfterCrash, evidence{faults: kill, requests: afterKill(2, RequestEvent{Err: "EOF"})}, false, "2× transport error"},
		{"a cut stream fails", CheckFailuresAfterCrash, evidence{faults: kill, requests: afterKill(2, RequestEvent{Status: 200, Err: "stream cut"})}, false, "2× stream cut"},
		{"503s are refusals", CheckFailuresAfterCrash, evidence{faults: kill, requests: afterKill(30, RequestEvent{Status: 503, RetryAfter: "1"})}, true, "0 of 100"},
		{"500s fail", CheckFailuresAfterCrash, evidence{faults: kill, requests: afterKill(5, RequestEvent{Status: 500})}, false, "5× HTTP 500"},
		{"no kill", CheckFailuresAfterCrash, evidence{requests: afterKill(0, RequestEvent{})}, false, "no engine_kill"},
		{"after the heal too", CheckFailuresAfterCrash, evidence{faults: kill, requests: append(afterKill(1, RequestEvent{Status: 500}),
			reqs(10, 9, 10, func(int) RequestEvent { return RequestEvent{Status: 500} })...)}, false, "11 of 110 requests sent from 3.0s failed"},

		{"one timeout at most", CheckHangBounded, evidence{faults: hang, requests: withHang(1900)}, true, "max first byte 1.90s < 2 × 1s; 1 of 20"},
		{"two timeouts", CheckHangBounded, evidence{faults: hang, requests: withHang(2100)}, false, "1 requests waited two first-byte timeouts"},
		{"no answer counts its latency", CheckHangBounded, evidence{faults: hang, requests: append(withHang(100),
			RequestEvent{T: 3, End: 6, Stream: true, Err: "EOF", LatencyMS: 3000})}, false, "max first byte 3.00s"},
		{"slow normal first byte", CheckHangBounded, evidence{faults: hang, requests: append(slowNormal, reqs(5, 2, 5, ok200)...)}, false, "cannot tell one timeout from two"},
		{"nothing to compare with", CheckHangBounded, evidence{faults: hang, requests: append(reqs(5, 2, 5, ok200),
			// Sent within a timeout of the heal: still touched by the hang.
			reqs(5, 5, 5.9, ok200)...)}, false, "no streamed request answered outside the hangs"},
		{"no hang", CheckHangBounded, evidence{requests: withHang(100)}, false, "no engine_hang"},
		{"nothing sent in the hang", CheckHangBounded, evidence{faults: hang, requests: reqs(5, 12, 20, ok200)}, false, "no streamed request"},

		{"every killed or hung engine opened", CheckBreakerTransitions, evidence{faults: append(kill, hang...), audits: shown,
			breakers: []BreakerEvent{opened("engine-0", 1.4), opened("engine-1", 3.1), {T: 4, Engine: "engine-0", From: "open", To: "half_open"}}},
			true, "2 of 2 killed or hung engines opened; 3 transitions"},
		{"closed again or not", CheckBreakerTransitions, evidence{faults: append(kill, hang...), audits: shown,
			breakers: []BreakerEvent{opened("engine-0", 1.4), opened("engine-1", 3.1), {T: 4, Engine: "engine-0", From: "open", To: "half_open"},
				{T: 7, Engine: "engine-1", From: "half_open", To: "closed"}, {T: 9.5, Engine: "engine-0", From: "half_open", To: "closed"}, {T: 11, Engine: "engine-1", From: "closed", To: "half_open"}}},
			true, "engine-0 (engine_kill 1.0s-9.0s) opened 0.4s in, closed 0.5s after the heal; engine-1 (engine_hang 2.0s-5.0s) opened 1.1s in, closed 2.0s after the heal"},
		{"never closed", CheckBreakerTransitions, evidence{faults: hang, audits: shown,
			breakers: []BreakerEvent{opened("engine-1", 3.1), {T: 5, Engine: "engine-1", From: "open", To: "half_open"}}},
			true, "engine-1 (engine_hang 2.0s-5.0s) opened 1.1s in, still half_open at the end"},
		{"opened within the settle after the heal", CheckBreakerTransitions, evidence{faults: hang, audits: shown,
			breakers: []BreakerEvent{opened("engine-1", 7.5)}}, true, "engine-1 (engine_hang 2.0s-5.0s) opened 5.5s in"},
		{"one never opened", CheckBreakerTransitions, evidence{faults: append(kill, hang...), audits: shown,
			breakers: []BreakerEvent{opened("engine-0", 1.4), opened("engine-2", 3)}}, false, "never opened: engine-1 (engine_hang 2.0s-5.0s)"},
		{"opened before the fault", CheckBreakerTransitions, evidence{faults: hang, audits: shown,
			breakers: []BreakerEvent{opened("engine-1", 1.5)}}, false, "never opened: engine-1"},
		{"500s reported, not judged", CheckBreakerTransitions, evidence{faults: append(kill, errs...),
			audits:   []AuditSample{{T: 1, Breakers: map[string]string{"engine-2": "closed"}}, {T: 12, BreakerFailures: map[string]int{"engine-2": 2}}},
			breakers: []BreakerEvent{opened("engine-0", 1.4)}}, true, "500s, not judged: engine-2 (engine_errors 11.0s-13.0s) not opened, at most 2 consecutive failures counted"},
		{"500s only", CheckBreakerTransitions, evidence{faults: errs, audits: shown, breakers: []BreakerEvent{opened("engine-2", 11.5)}},
			false, "no engine was killed or hung"},
		{"no breaker in the audit", CheckBreakerTransitions, evidence{faults: kill, audits: []AuditSample{{T: 1}}}, false, "the ledger keeps none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := tc.ev
			ev.sc = sc
			v := ev.check(tc.check)
			if v.Pass != tc.pass || !strings.Contains(v.Figure+" "+v.Detail, tc.want) {
				t.Errorf("%s = pass %v, %q (%s); want pass %v, containing %q", tc.check, v.Pass, v.Figure, v.Detail, tc.pass, tc.want)
			}
		})
	}
}

func TestBreakerState(t *testing.T) {
	for _, tc := range []struct {
		raw   string
		state string
		ok    bool
	}{
		{`"open"`, "open", true},
		{`""`, "closed", true},
		{`{"state":"half_open","failures":0}`, "half_open", true},
		{`{"state":""}`, "closed", true},
		{`{"failures":2}`, "", false},
		{`null`, "", false},
		{``, "", false},
		{`7`, "", false},
	} {
		if n, want := breakerFailures(json.RawMessage(tc.raw)), map[string]int{`{"failures":2}`: 2}[tc.raw]; n != want {
			t.Errorf("breakerFailures(%s) = %d, want %d", tc.raw, n, want)
		}
		state, ok := breakerState(json.RawMessage(tc.raw))
		if state != tc.state || ok != tc.ok {
			t.Errorf("breakerState(%s) = %q, %v; want %q, %v", tc.raw, state, ok, tc.state, tc.ok)
		}
	}
}

// TestBreakerEventsLogged: consecutive audits' breaker states become
// transitions in the event log, read back by ReadBreakerEvents.
func TestBreakerEventsLogged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	rec, err := newRecorder(path)
	if err != nil {
		t.Fatal(err)
	}
	rec.breakers(1, map[string]string{"engine-0": "closed", "engine-1": "closed"})
	rec.breakers(2, map[string]string{"engine-0": "open", "engine-1": "closed"})
	rec.breakers(3, map[string]string{"engine-0": "open", "engine-1": "half_open"})
	rec.breakers(4, map[string]string{"engine-0": "half_open", "engine-2": "open"})
	if err := rec.close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadBreakerEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, b := range got {
		lines = append(lines, fmt.Sprintf("%g %s %s>%s", b.T, b.Engine, b.From, b.To))
	}
	want := "2 engine-0 closed>open, 3 engine-1 closed>half_open, 4 engine-0 open>half_open, 4 engine-2 closed>open"
	if strings.Join(lines, ", ") != want {
		t.Errorf("breaker events = %s\nwant %s", strings.Join(lines, ", "), want)
	}
	if len(rec.breakerEvents) != len(got) {
		t.Errorf("recorder kept %d events, log has %d", len(rec.breakerEvents), len(got))
	}
}
