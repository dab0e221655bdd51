package chaos

// grants_resume: how soon grants come back after a Redis failover
// (failover_redis, sentinel.go).

import (
	"fmt"
	"math"
	"time"
)

// GrantsResumeBound is how soon after a replica's promotion grants must
// resume (issue 18's bound). Without wait_replicas the promoted replica
// starts a new epoch (the redis package, "Ledger loss"), and its engines
// leave recovery as soon as telemetry taken after it shows them, not at
// the window's end: the same bound holds.
const GrantsResumeBound = 3 * time.Second

// checkGrantsResume: after every failover_redis, the first streamed
// request sent after the kill that was answered began streaming (its
// first byte, which the router sends only after the ledger granted its
// lease) within GrantsResumeBound of the promotion. The figure is the
// worst failover's delay, measured from the promotion (ROLE master on the
// replica) to that first byte.
func (ev *evidence) checkGrantsResume() Verdict {
	v := Verdict{Pass: true}
	bound := GrantsResumeBound
	killed := map[string]float64{}
	worst, n := -1.0, 0
	for _, f := range ev.faults {
		if f.Kind != FaultFailoverRedis {
			continue
		}
		if f.Phase == "inject" {
			killed[f.Target] = f.T
			continue
		}
		if f.Err != "" {
			v.Pass = false
			v.Detail += fmt.Sprintf("failover at %.1fs: %s; ", killed[f.Target], firstLine(f.Err))
			continue
		}
		n++
		kill, promoted := killed[f.Target], f.T
		first := math.Inf(1)
		for _, r := range ev.requests {
			if r.Stream && r.Status == 200 && r.Err == "" && r.HeadersMS > 0 && r.T >= kill {
				first = min(first, r.T+r.HeadersMS/1000)
			}
		}
		if math.IsInf(first, 1) {
			v.Pass = false
			v.Detail += fmt.Sprintf("failover at %.1fs: no streamed request sent after the kill was answered; ", kill)
			continue
		}
		d := max(0, first-promoted)
		worst = max(worst, d)
		if d > bound.Seconds() {
			v.Pass = false
			v.Detail += fmt.Sprintf("failover at %.1fs: promoted at %.2fs, first grant's byte at %.2fs (%.2fs > %s); ", kill, promoted, first, d, bound)
		}
	}
	if n == 0 && v.Detail == "" {
		v.Figure, v.Detail = "n/a", "no failover_redis in the run"
		return v
	}
	v.Figure = fmt.Sprintf("%.2fs after promotion (bound %s)", max(worst, 0), bound)
	return v
}
