package chaos

// Recovery after ledger loss (docs/design.md, "Recovery after ledger
// loss"; issue 18): how soon grants come after a cold start and after the
// ledger restarts empty under load, judged from the clients' own records
// against the bounds the issue sets. A scenario with topology.cold_start
// starts its load the moment the routers are up (not when the ledger
// grants), and the runner records that moment as a "mark" event.

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Recovery checks and their bounds.
const (
	// CheckColdStart: the first grant came within ColdStartBound of the
	// routers being up (topology.cold_start).
	CheckColdStart = "cold_start"
	// CheckRecoveryResumes: after every ledger restart (restart_redis, or
	// kill_reserver with restart_after on the embedded ledger) grants
	// resumed within ResumeBound of the ledger being back.
	CheckRecoveryResumes = "recovery_resumes"

	ColdStartBound = 2 * time.Second
	ResumeBound    = 3 * time.Second

	// markRoutersUp names the mark event of the routers being up.
	markRoutersUp = "routers_up"
)

// MarkEvent is a moment of the run that is not a fault: the routers up.
type MarkEvent struct {
	Type string  `json:"type"` // "mark"
	T    float64 `json:"t"`
	Name string  `json:"name"`
}

// mark writes a mark event for at.
func (r *recorder) mark(name string, at time.Time) float64 {
	e := MarkEvent{Type: "mark", T: r.since(at), Name: name}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.write(e)
	return e.T
}

// grantedAt is when the client saw the router dispatch request r, in
// seconds since load start: its response headers (a stream's come with the
// engine's first byte), else its end. The grant came before: the figures
// built on it err late. ok is false for a request that was not granted.
func grantedAt(r RequestEvent) (t float64, ok bool) {
	if r.Status != 200 {
		return 0, false
	}
	if r.HeadersMS > 0 {
		return r.T + r.HeadersMS/1000, true
	}
	return r.End, true
}

// checkColdStart: the first grant within ColdStartBound of the routers
// being up.
func (ev *evidence) checkColdStart() Verdict {
	v := Verdict{}
	if !ev.sc.Topology.ColdStart || math.IsNaN(ev.routersUp) {
		v.Figure, v.Detail = "n/a", "the load did not start with the routers (topology.cold_start)"
		return v
	}
	first := math.Inf(1)
	for _, r := range ev.requests {
		if t, ok := grantedAt(r); ok {
			first = min(first, t)
		}
	}
	if math.IsInf(first, 1) {
		v.Figure, v.Detail = "no grant", "no request was granted"
		return v
	}
	d := first - ev.routersUp
	v.Pass = d <= ColdStartBound.Seconds()
	v.Figure = fmt.Sprintf("first grant %.2fs after the routers were up (bound %s)", d, ColdStartBound)
	if !v.Pass {
		v.Detail = "grants waited for the recovery window rather than the engines' telemetry"
	}
	return v
}

// ledgerBack is one ledger restart: killed at inject, back at heal.
type ledgerBack struct {
	what          string
	inject, heal  float64
	resumed       float64 // first grant after heal; +Inf if none
	partitionedIn int     // requests of routers cut from the ledger across it, running when grants resumed
}

// ledgerRestarts pairs each ledger restart's inject and heal events and
// finds the first grant after each: a request that started after the kill
// (it could not have been granted before it: the ledger was gone) and was
// granted.
func (ev *evidence) ledgerRestarts() []ledgerBack {
	var out []ledgerBack
	inject := map[string]float64{}
	for _, f := range ev.faults {
		if f.Kind != FaultRestartRedis && f.Kind != FaultKillReserver {
			continue
		}
		key := f.Kind + "/" + f.Target
		switch f.Phase {
		case "inject":
			inject[key] = f.T
		case "heal":
			in, ok := inject[key]
			if !ok || f.Err != "" {
				continue
			}
			b := ledgerBack{what: f.Target, inject: in, heal: f.T, resumed: math.Inf(1)}
			for _, r := range ev.requests {
				if t, ok := grantedAt(r); ok && r.T >= in {
					b.resumed = min(b.resumed, t)
				}
			}
			b.partitionedIn = ev.partitionedRunning(in, b.resumed)
			out = append(out, b)
		}
	}
	return out
}

// partitionedRunning counts the requests of routers cut from the ledger
// (partition faults on the ledger link spanning the kill at killed) that
// were granted before the kill and still running at t: load the new
// ledger knew only through the engines' telemetry.
func (ev *evidence) partitionedRunning(killed, t float64) int {
	cut := map[string]bool{}
	from, to := map[string]float64{}, map[string]float64{}
	for _, f := range ev.faults {
		if f.Kind != FaultPartition || !strings.HasPrefix(f.Detail, LinkLedger+" ") {
			continue
		}
		switch f.Phase {
		case "inject":
			from[f.Target] = f.T
		case "heal":
			to[f.Target] = f.T
		}
	}
	for r, a := range from {
		if b, ok := to[r]; a <= killed && (!ok || b >= killed) {
			cut[r] = true
		}
	}
	n := 0
	for _, r := range ev.requests {
		if g, ok := grantedAt(r); cut[r.Router] && ok && g < killed && r.End > t {
			n++
		}
	}
	return n
}

// checkRecoveryResumes: after every ledger restart grants resumed within
// ResumeBound of the ledger being back.
func (ev *evidence) checkRecoveryResumes() Verdict {
	v := Verdict{}
	backs := ev.ledgerRestarts()
	if len(backs) == 0 {
		v.Figure, v.Detail = "n/a", "no ledger restart (restart_redis, or kill_reserver with restart_after) was healed"
		return v
	}
	v.Pass = true
	var figs []string
	for _, b := range backs {
		if math.IsInf(b.resumed, 1) {
			v.Pass = false
			v.Detail += fmt.Sprintf("%s back at %.2fs: no grant after it; ", b.what, b.heal)
			figs = append(figs, b.what+": none")
			continue
		}
		d := b.resumed - b.heal
		if d > ResumeBound.Seconds() {
			v.Pass = false
			v.Detail += fmt.Sprintf("%s back at %.2fs: first grant %.2fs later; ", b.what, b.heal, d)
		}
		f := fmt.Sprintf("grants resumed %.2fs after %s was back", d, b.what)
		if b.partitionedIn > 0 {
			f += fmt.Sprintf(" (%d requests of a partitioned router still running then)", b.partitionedIn)
		}
		figs = append(figs, f)
	}
	slices.Sort(figs)
	v.Figure = strings.Join(figs, "; ") + fmt.Sprintf(" (bound %s)", ResumeBound)
	return v
}
