package chaos

// The engine faults of issue 16 and what judges them: an engine killed
// (engine_kill: its listener and every connection close at once, as a
// crashed process's do), one that leaves new requests unanswered
// (engine_hang) and one that answers 500 to everything (engine_errors);
// the breaker states the ledger shows for each engine, recorded as
// transitions in the event log; and the checks failures_after_crash,
// hang_bounded and breaker_transitions.
//
// engine_kill is a real SIGKILL of the enginesim process rather than a
// mode of POST /admin/fail: only the kernel closes a listener and every
// connection the way a crash does (connects refused, streams reset), and
// nothing of the engine is left to answer meanwhile. It restarts empty on
// the same port after `for`. hang and errors are enginesim's own
// /admin/fail modes (internal/enginesim/fail.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Breaker states as the event log writes them.
const (
	breakerClosed   = "closed"
	breakerOpen     = "open"
	breakerHalfOpen = "half_open"
)

// BreakerEvent is a change of one engine's circuit breaker, as seen by
// consecutive audit samples (so a state that lasted less than a sample
// interval may be missed; the cooldown of an open breaker is longer).
type BreakerEvent struct {
	Type   string  `json:"type"` // "breaker"
	T      float64 `json:"t"`
	Engine string  `json:"engine"`
	From   string  `json:"from"`
	To     string  `json:"to"`
}

func (e *BreakerEvent) stamp() { e.Type = "breaker" }

// breakerState reads an audit engine row's breaker: a bare state string or
// an object with a "state" field; "" (the ledger's zero state) is closed.
// ok is false when the row has no breaker at all.
func breakerState(raw json.RawMessage) (state string, ok bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		var o struct {
			State *string `json:"state"`
		}
		if json.Unmarshal(raw, &o) != nil || o.State == nil {
			return "", false
		}
		s = *o.State
	}
	if s == "" {
		s = breakerClosed
	}
	return s, true
}

// breakerFailures reads the consecutive-failure count of an audit engine
// row's breaker object (0 when it has none).
func breakerFailures(raw json.RawMessage) int {
	var o struct {
		Failures int `json:"failures"`
	}
	if json.Unmarshal(raw, &o) != nil {
		return 0
	}
	return o.Failures
}

// breakers records, at t, the engines' breaker states from one audit and a
// BreakerEvent for each that changed since the previous audit. An engine
// seen for the first time in a state other than closed is recorded as a
// change from closed.
func (r *recorder) breakers(t float64, states map[string]string) {
	names := make([]string, 0, len(states))
	for e := range states {
		names = append(names, e)
	}
	sort.Strings(names)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.breaker == nil {
		r.breaker = map[string]string{}
	}
	for _, e := range names {
		from, ok := r.breaker[e]
		if !ok {
			from = breakerClosed
		}
		if to := states[e]; to != from {
			ev := BreakerEvent{T: t, Engine: e, From: from, To: to}
			ev.stamp()
			r.breakerEvents = append(r.breakerEvents, ev)
			r.write(ev)
		}
		r.breaker[e] = states[e]
	}
}

// engineFault runs an engine_kill, engine_hang or engine_errors fault on
// its targets for ft.For, then heals it.
func (f *failpoints) engineFault(ctx, bg context.Context, ft Fault) {
	switch ft.Kind {
	case FaultEngineHang:
		f.engineFail(ctx, bg, ft, map[string]any{"hang": true}, map[string]any{"hang": false})
		return
	case FaultEngineErrors:
		f.engineFail(ctx, bg, ft, map[string]any{"errors": true}, map[string]any{"errors": false})
		return
	}
	es := f.engines(ft.Target)
	for _, e := range es {
		at := time.Now()
		e.kill()
		f.note(at, ft, e.id, "inject", "SIGKILL", nil)
	}
	sleep(ctx, ft.For.D())
	for _, e := range es {
		err := e.start()
		if err == nil {
			err = waitReady(bg, []*engineNode{e})
		}
		f.note(time.Now(), ft, e.id, "heal", "restarted empty", err)
	}
}

// engineFaultWindows are, per engine, the [inject, heal] spans of faults of
// the given kinds (heal: the end of the load when none was recorded).
func (ev *evidence) engineFaultWindows(kinds ...string) map[string][][2]float64 {
	open := map[string]float64{}
	out := map[string][][2]float64{}
	for _, f := range ev.faults {
		if !contains(kinds, f.Kind) {
			continue
		}
		key := f.Kind + "/" + f.Target
		switch f.Phase {
		case "inject":
			open[key] = f.T
		case "heal":
			if from, ok := open[key]; ok {
				out[f.Target] = append(out[f.Target], [2]float64{from, f.T})
				delete(open, key)
			}
		}
	}
	for key, from := range open {
		target := key[strings.IndexByte(key, '/')+1:]
		out[target] = append(out[target], [2]float64{from, ev.sc.Workload.Duration.D().Seconds()})
	}
	return out
}

// failed reports whether r failed in the way failures_after_crash counts:
// no response (a transport error), a 5xx other than 503, or a stream cut
// after its 200.
func failed(r RequestEvent) (string, bool) {
	switch {
	case r.Status == 0:
		return "transport error", true
	case r.Status >= 500 && r.Status != 503:
		return fmt.Sprintf("HTTP %d", r.Status), true
	case r.Status == 200 && r.Err != "":
		return "stream cut", true
	}
	return "", false
}

// checkFailuresAfterCrash: of the requests sent from 2 s after the first
// engine_kill to the end of the load (the other faults of the run
// included), at most 1% failed with a transport error, a 5xx other than
// 503 or a cut stream (503s are refusals, which clean_errors judges).
func (ev *evidence) checkFailuresAfterCrash() Verdict {
	v := Verdict{}
	crash := -1.0
	for _, f := range ev.faults {
		if f.Kind == FaultEngineKill && f.Phase == "inject" && (crash < 0 || f.T < crash) {
			crash = f.T
		}
	}
	if crash < 0 {
		v.Figure, v.Detail = "n/a", "no engine_kill in this run: nothing to judge"
		return v
	}
	from := crash + 2
	total, bad := 0, 0
	why := map[string]int{}
	for _, r := range ev.requests {
		if r.T < from || strings.HasPrefix(r.Err, "client:") {
			continue
		}
		total++
		if k, ok := failed(r); ok {
			bad++
			why[k]++
		}
	}
	v.Pass = total > 0 && bad*100 <= total
	v.Figure = fmt.Sprintf("%d of %d requests sent from %.1fs failed (%.2f%%, bound 1%%)", bad, total, from, pct(bad, total))
	v.Detail = countsText(why)
	if total == 0 {
		v.Detail = "no request was sent from 2s after the kill"
	}
	return v
}

// countsText writes m as "n× key; ..." sorted by key.
func countsText(m map[string]int) string {
	var parts []string
	for k, n := range m {
		parts = append(parts, fmt.Sprintf("%d× %s", n, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// checkHangBounded: no streamed request sent while an engine hung waited
// two first-byte timeouts for its first response byte, so none was held
// by a hung engine more than once (a request that met the hung engine
// waits one timeout, then goes elsewhere). The bound tells one timeout
// from two only while a first byte normally comes within one timeout: the
// p99 of streamed requests sent outside every hang (and its last timeout)
// must be below it.
func (ev *evidence) checkHangBounded() Verdict {
	v := Verdict{}
	fbt := ev.sc.Topology.FirstByteTimeout.D().Seconds() * 1000
	hangs := ev.engineFaultWindows(FaultEngineHang)
	if len(hangs) == 0 {
		v.Figure, v.Detail = "n/a", "no engine_hang in this run: nothing to judge"
		return v
	}
	var windows, touched [][2]float64
	for _, ws := range hangs {
		for _, w := range ws {
			windows = append(windows, w)
			touched = append(touched, [2]float64{w[0] - 0.1, w[1] + fbt/1000})
		}
	}
	var normal []float64
	judged, paid, over := 0, 0, 0
	worst := 0.0
	for _, r := range ev.requests {
		if !r.Stream || strings.HasPrefix(r.Err, "client:") {
			continue
		}
		first := r.HeadersMS
		if r.Status == 0 || first == 0 {
			first = r.LatencyMS
		}
		if !overlaps(touched, r.T, r.T) {
			if r.Status == 200 {
				normal = append(normal, first)
			}
			continue
		}
		in := false
		for _, w := range windows {
			in = in || (r.T >= w[0] && r.T < w[1])
		}
		if !in {
			continue
		}
		judged++
		worst = max(worst, first)
		if first >= fbt {
			paid++
		}
		if first >= 2*fbt {
			over++
		}
	}
	sort.Float64s(normal)
	p99 := quantile(normal, 0.99)
	v.Pass = judged > 0 && over == 0 && len(normal) > 0 && p99 < fbt
	v.Figure = fmt.Sprintf("max first byte %.2fs < 2 × %s; %d of %d streamed requests sent during a hang waited one timeout; p99 outside hangs %.2fs",
		worst/1000, ev.sc.Topology.FirstByteTimeout, paid, judged, p99/1000)
	switch {
	case judged == 0:
		v.Detail = "no streamed request was sent during a hang"
	case over > 0:
		v.Detail = fmt.Sprintf("%d requests waited two first-byte timeouts or more for their first byte", over)
	case len(normal) == 0:
		v.Detail = "no streamed request answered outside the hangs: nothing says how long a first byte normally takes"
	case p99 >= fbt:
		v.Detail = "a first byte normally takes a first-byte timeout or more here: the bound cannot tell one timeout from two"
	}
	return v
}

// breakerAtEnd is engine e's last breaker state in the event log.
func (ev *evidence) breakerAtEnd(e string) string {
	st := breakerClosed
	for _, b := range ev.breakers {
		if b.Engine == e {
			st = b.To
		}
	}
	return st
}

// checkBreakerTransitions: the ledger's breaker of every engine killed or
// hung opened while the fault lasted (or within the settle time after
// it), as the event log's breaker events show. There every dispatch
// fails. An engine answering 500s is reported, not judged: every router
// that met a 500 demotes the engine on its own (internal/enginehealth),
// so whether breaker.failures failed dispatches reach the ledger depends
// on how many routers try it first. (The requests it was streaming when
// the fault began still succeed, but they were granted before its first
// failure and no longer reset the count: ledger.Breaker.Fresh.) Every
// transition seen is listed, and whether each judged breaker closed again
// after its engine healed (reported, not judged).
func (ev *evidence) checkBreakerTransitions() Verdict {
	v := Verdict{}
	faulted := map[string]map[string][][2]float64{}
	n := 0
	for _, k := range []string{FaultEngineKill, FaultEngineHang, FaultEngineErrors} {
		faulted[k] = ev.engineFaultWindows(k)
		n += len(faulted[k])
	}
	if n == 0 {
		v.Figure, v.Detail = "n/a", "no engine fault in this run: nothing to judge"
		return v
	}
	shown := false
	for _, a := range ev.audits {
		shown = shown || len(a.Breakers) > 0
	}
	if !shown {
		v.Figure, v.Detail = "no breaker state", "no audit sample showed a breaker state per engine (engines[].breaker): the ledger keeps none"
		return v
	}
	settle := ev.settle().Seconds()
	v.Pass = true
	var opened, missed, reported []string
	judged := 0
	for _, k := range []string{FaultEngineKill, FaultEngineHang, FaultEngineErrors} {
		names := make([]string, 0, len(faulted[k]))
		for e := range faulted[k] {
			names = append(names, e)
		}
		sort.Slice(names, func(i, j int) bool { return engineLess(names[i], names[j]) })
		for _, e := range names {
			for _, w := range faulted[k][e] {
				at := -1.0
				for _, b := range ev.breakers {
					if b.Engine == e && b.To == breakerOpen && b.T >= w[0] && b.T <= w[1]+settle {
						at = b.T
						break
					}
				}
				what := fmt.Sprintf("%s (%s %.1fs-%.1fs)", e, k, w[0], w[1])
				switch {
				case k == FaultEngineErrors && at < 0:
					most := 0
					for _, a := range ev.audits {
						if a.T >= w[0] && a.T <= w[1]+settle {
							most = max(most, a.BreakerFailures[e])
						}
					}
					reported = append(reported, fmt.Sprintf("%s not opened, at most %d consecutive failures counted", what, most))
				case k == FaultEngineErrors:
					reported = append(reported, fmt.Sprintf("%s opened %.1fs in", what, at-w[0]))
				case at < 0:
					judged++
					v.Pass = false
					missed = append(missed, what)
				default:
					judged++
					closed := "still " + ev.breakerAtEnd(e) + " at the end"
					for _, b := range ev.breakers {
						if b.Engine == e && b.To == breakerClosed && b.T > w[1] {
							closed = fmt.Sprintf("closed %.1fs after the heal", b.T-w[1])
							break
						}
					}
					opened = append(opened, fmt.Sprintf("%s opened %.1fs in, %s", what, at-w[0], closed))
				}
			}
		}
	}
	v.Figure = fmt.Sprintf("%d of %d killed or hung engines opened; %d transitions logged", len(opened), judged, len(ev.breakers))
	var parts []string
	if len(missed) > 0 {
		parts = append(parts, "never opened: "+strings.Join(missed, ", "))
	}
	parts = append(parts, opened...)
	if len(reported) > 0 {
		parts = append(parts, "500s, not judged: "+strings.Join(reported, ", "))
	}
	var trans []string
	for _, b := range ev.breakers {
		trans = append(trans, fmt.Sprintf("%.1fs %s %s→%s", b.T, b.Engine, b.From, b.To))
	}
	if len(trans) > 0 {
		parts = append(parts, "transitions: "+strings.Join(trans, ", "))
	}
	v.Detail = strings.Join(parts, "; ")
	if judged == 0 {
		v.Pass = false
		v.Detail = "no engine was killed or hung: nothing to judge; " + v.Detail
	}
	return v
}
