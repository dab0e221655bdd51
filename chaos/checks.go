package chaos

// The checks, one function each. Each reads the recorded events (never the
// runner's beliefs) and returns a verdict with the figure it judged.

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// checks maps each check name to its function. A name not listed is judged
// by a compare run only (runCompare).
var checks = map[string]func(*evidence) Verdict{
	CheckNoOverCapacity:   (*evidence).checkNoOverCapacity,
	CheckReclaim:          (*evidence).checkReclaim,
	CheckNoLeasesAtEnd:    (*evidence).checkNoLeasesAtEnd,
	CheckNoDeadHolder:     (*evidence).checkNoDeadHolder,
	CheckCleanErrors:      (*evidence).checkCleanErrors,
	CheckFaultsApplied:    (*evidence).checkFaultsApplied,
	CheckCompleted:        (*evidence).checkCompleted,
	CheckStaleSeen:        (*evidence).checkStaleSeen,
	CheckQuotaRejected:    (*evidence).checkQuotaRejected,
	CheckPriorityHeadroom: (*evidence).checkPriorityHeadroom,
	CheckTenantQuota:      (*evidence).checkTenantQuota,
	// Issue 16 (enginefail.go, spike.go).
	CheckFailuresAfterCrash: (*evidence).checkFailuresAfterCrash,
	CheckHangBounded:        (*evidence).checkHangBounded,
	CheckBreakerTransitions: (*evidence).checkBreakerTransitions,
	CheckTTFTSLOHeld:        (*evidence).checkTTFTSLOHeld,
	// Issue 17 (ratecheck.go).
	CheckTokenRate: (*evidence).checkTokenRate,
	// Issue 18 (recovery.go).
	CheckColdStart:       (*evidence).checkColdStart,
	CheckRecoveryResumes: (*evidence).checkRecoveryResumes,
	// Issue 18 (checks_failover.go).
	CheckGrantsResume: (*evidence).checkGrantsResume,
}

// check runs the named check.
func (ev *evidence) check(name string) Verdict {
	f, ok := checks[name]
	if !ok {
		return Verdict{Check: name, Figure: "n/a", Detail: "check " + name + " applies to compare scenarios only"}
	}
	v := f(ev)
	v.Check = name
	return v
}

// checkNoOverCapacity: no engine admitted more sequences than its slots,
// nor, in a worst_case pool, more KV tokens (prompt + max_tokens) than its
// capacity; in an elastic pool no engine's requests really held more KV
// than its capacity (actual demand) and none was preempted. The figures
// are the engines' own (/admin/stats).
func (ev *evidence) checkNoOverCapacity() Verdict {
	v := Verdict{}
	peaks := enginePeaks(ev.engines)
	if len(peaks) == 0 {
		v.Figure, v.Detail = "no sample", "no engine sample answered"
		return v
	}
	if ev.sc.Topology.elastic() {
		return ev.checkElasticCapacity(peaks)
	}
	worst := peaks[0]
	v.Pass = true
	for _, p := range peaks {
		if max(p.KVRatio, p.SlotRatio) > max(worst.KVRatio, worst.SlotRatio) {
			worst = p
		}
		if p.PeakDemand > p.KVCapacity || p.PeakSeqs > p.Slots {
			v.Pass = false
			v.Detail += fmt.Sprintf("%s: admitted %d/%d KV tokens, %d/%d sequences; ", p.Engine, p.PeakDemand, p.KVCapacity, p.PeakSeqs, p.Slots)
		}
	}
	v.Figure = fmt.Sprintf("peak %.2f KV, %.2f slots (%s)", worst.KVRatio, worst.SlotRatio, worst.Engine)
	return v
}

// checkElasticCapacity is checkNoOverCapacity for an elastic pool.
func (ev *evidence) checkElasticCapacity(peaks []EnginePeak) Verdict {
	v := Verdict{Pass: true}
	worst := peaks[0]
	var preempted int64
	for _, p := range peaks {
		if max(p.ActualRatio, p.SlotRatio) > max(worst.ActualRatio, worst.SlotRatio) {
			worst = p
		}
		preempted += p.Preemptions
		if p.PeakActual > p.KVCapacity || p.PeakSeqs > p.Slots || p.Preemptions > 0 {
			v.Pass = false
			v.Detail += fmt.Sprintf("%s: requests held %d/%d KV tokens, %d/%d sequences, %d preemptions; ",
				p.Engine, p.PeakActual, p.KVCapacity, p.PeakSeqs, p.Slots, p.Preemptions)
		}
	}
	v.Figure = fmt.Sprintf("peak %.2f actual KV, %.2f slots (%s), %d preemptions", worst.ActualRatio, worst.SlotRatio, worst.Engine, preempted)
	return v
}

// checkReclaim: every router killed, stopped or cut from the ledger past the
// TTL had its leases gone within the bound.
func (ev *evidence) checkReclaim() Verdict {
	v := Verdict{}
	bound := ev.settle()
	v.Pass = true
	if len(ev.reclaims) == 0 {
		v.Figure, v.Detail = "n/a", "no router was killed, stopped or cut from the ledger past the TTL"
		return v
	}
	worstS := 0.0
	for _, r := range ev.reclaims {
		if r.Seconds < 0 || r.Seconds > bound.Seconds() {
			v.Pass = false
			v.Detail += fmt.Sprintf("%s (%s): %d leases of %s not gone within %s; ", r.Router, r.Cause, r.Leases, strings.Join(r.Holders, ","), bound)
		}
		if r.Seconds < 0 {
			worstS = -1
		} else if worstS >= 0 {
			worstS = max(worstS, r.Seconds)
		}
	}
	leases := 0
	for _, r := range ev.reclaims {
		leases += r.Leases
	}
	if worstS < 0 {
		v.Figure = fmt.Sprintf("never (bound %s)", bound)
	} else {
		v.Figure = fmt.Sprintf("%.1fs ≤ %s (%d leases)", worstS, bound, leases)
	}
	if leases == 0 {
		v.Detail += "the routers held no lease at the fault; "
	}
	return v
}

// checkNoLeasesAtEnd: the audit lists no lease after the drain.
func (ev *evidence) checkNoLeasesAtEnd() Verdict {
	v := Verdict{}
	v.Pass = ev.endLeases == 0
	switch {
	case ev.endLeases < 0:
		v.Figure, v.Detail = "unknown", ev.endErr
	default:
		v.Figure = fmt.Sprintf("%d leases %.1fs after load", ev.endLeases, ev.endWait.Seconds())
	}
	return v
}

// checkNoDeadHolder: no audit after the bound still shows a dead router
// holding a lease.
func (ev *evidence) checkNoDeadHolder() Verdict {
	v := Verdict{}
	bound := ev.settle()
	v.Pass = true
	n := 0
	for _, r := range ev.reclaims {
		if !r.Dead {
			continue
		}
		for _, a := range ev.audits {
			if a.Err != "" || a.T <= r.T+bound.Seconds() {
				continue
			}
			for _, h := range r.Holders {
				if a.ByHolder[h] > 0 {
					n++
					v.Pass = false
					v.Detail = fmt.Sprintf("%s still held %d leases at t=%.1fs (killed at %.1fs)", h, a.ByHolder[h], a.T, r.T)
				}
			}
		}
	}
	v.Figure = fmt.Sprintf("%d samples with a dead holder's lease", n)
	return v
}

// checkCleanErrors: every error is a documented rejection or falls in a
// fault's window.
func (ev *evidence) checkCleanErrors() Verdict {
	v := Verdict{}
	v.Pass = true
	windows := faultWindows(ev.faults, ev.settle())
	bad := map[string]int{}
	for _, r := range ev.requests {
		if strings.HasPrefix(r.Err, "client:") || (r.Status == 200 && r.Err == "") {
			continue
		}
		var why string
		switch {
		case (r.Status == 503 || r.Status == 429) && r.RetryAfter == "":
			why = fmt.Sprintf("%d without Retry-After", r.Status)
		case (r.Status == 503 || r.Status == 429) && r.Code == "":
			why = fmt.Sprintf("%d without an error code", r.Status)
		case r.Status == 503 || r.Status == 429:
		case slices.Contains(documented4xx, r.Status):
		case overlaps(windows, r.T, r.End):
			// A transport error, cut stream or 5xx while a fault
			// touched the path.
		case r.Status == 0:
			why = "transport error outside any fault: " + firstLine(r.Err)
		case r.Status == 200:
			why = "stream cut outside any fault"
		default:
			why = fmt.Sprintf("HTTP %d outside any fault", r.Status)
		}
		if why != "" {
			bad[why]++
			v.Pass = false
		}
	}
	var parts []string
	total := 0
	for k, n := range bad {
		parts = append(parts, fmt.Sprintf("%d× %s", n, k))
		total += n
	}
	sort.Strings(parts)
	v.Detail = strings.Join(parts, "; ")
	v.Figure = fmt.Sprintf("%d unexplained errors", total)
	return v
}

// checkFaultsApplied: every fault step took effect.
func (ev *evidence) checkFaultsApplied() Verdict {
	v := Verdict{}
	// Every fault step took effect (a clock_offset router reported its
	// offset, a restart came back, ...): otherwise the other checks
	// judged a run without the fault.
	v.Pass = true
	failed := 0
	for _, f := range ev.faults {
		if f.Err != "" {
			failed++
			v.Pass = false
			v.Detail += fmt.Sprintf("%s %s %s at %.1fs: %s; ", f.Kind, f.Target, f.Phase, f.T, firstLine(f.Err))
		}
	}
	v.Figure = fmt.Sprintf("%d of %d fault steps failed", failed, len(ev.faults))
	return v
}

// checkCompleted: some request completed.
func (ev *evidence) checkCompleted() Verdict {
	v := Verdict{}
	s := summarize(ev.requests, faultWindows(ev.faults, ev.settle()))
	v.Pass = s.Completed > 0
	v.Figure = fmt.Sprintf("%d completed, %d rejected of %d", s.Completed, s.Rejected, s.Total)
	if !v.Pass {
		v.Detail = "no request completed"
	}
	return v
}

// checkStaleSeen: every engine whose metrics were off past stale_after
// showed stale in the audit.
func (ev *evidence) checkStaleSeen() Verdict {
	v := Verdict{}
	// Every engine whose metrics were off for longer than stale_after
	// (+1 s to see it) must show stale in the audit meanwhile.
	v.Pass = true
	staleAfter := ev.sc.Topology.StaleAfter.D().Seconds()
	inject := map[string]float64{}
	judged, seen := 0, 0
	for _, f := range ev.faults {
		if f.Kind != FaultStaleTelemetry {
			continue
		}
		if f.Phase == "inject" {
			inject[f.Target] = f.T
			continue
		}
		from, ok := inject[f.Target]
		if !ok || f.T-from < staleAfter+1 {
			continue
		}
		judged++
		found := false
		for _, a := range ev.audits {
			if a.T >= from && a.T <= f.T+0.5 && slices.Contains(a.Stale, f.Target) {
				found = true
				break
			}
		}
		if found {
			seen++
		} else {
			v.Pass = false
			v.Detail += fmt.Sprintf("%s: metrics off %.1fs-%.1fs but never stale in the audit; ", f.Target, from, f.T)
		}
	}
	if judged == 0 {
		v.Figure, v.Detail = "n/a", "no engine's metrics were off past stale_after"
		return v
	}
	v.Figure = fmt.Sprintf("%d/%d engines shown stale", seen, judged)
	return v
}

// checkQuotaRejected: the workload met a tenant quota (some 429).
func (ev *evidence) checkQuotaRejected() Verdict {
	v := Verdict{}
	n := 0
	for _, r := range ev.requests {
		if r.Status == 429 {
			n++
		}
	}
	v.Pass = n > 0
	v.Figure = fmt.Sprintf("%d 429s", n)
	if !v.Pass {
		v.Detail = "no tenant-quota rejection: the workload did not reach a quota"
	}
	return v
}

// checkPriorityHeadroom: no priority class held more of an engine than its
// max_fill.
func (ev *evidence) checkPriorityHeadroom() Verdict {
	limits := make([]limit, len(ev.sc.Topology.Priorities))
	for i, p := range ev.sc.Topology.Priorities {
		limits[i] = limit{p.Name, p.MaxFill}
	}
	fill := ev.peakAudit(func(a AuditSample) map[string]float64 { return a.PriorityFill })
	return withinLimits(fill, limits, "%s leases held %.2f of an engine, max_fill %.2f; ")
}

// checkTenantQuota: no tenant held more of the pool than its kv_share.
func (ev *evidence) checkTenantQuota() Verdict {
	var limits []limit
	for _, t := range ev.sc.Topology.Tenants {
		limits = append(limits, limit{t.Name, t.KVShare})
	}
	return withinLimits(ev.peakAudit(func(a AuditSample) map[string]float64 { return a.TenantShare }),
		limits, "%s held %.2f of the pool, kv_share %.2f; ")
}

// limit is one named bound on a fraction (a class's max_fill, a tenant's
// kv_share).
type limit struct {
	name string
	max  float64
}

// peakAudit is, per key, the largest value of field over the audits.
func (ev *evidence) peakAudit(field func(AuditSample) map[string]float64) map[string]float64 {
	peak := map[string]float64{}
	for _, a := range ev.audits {
		for k, x := range field(a) {
			peak[k] = max(peak[k], x)
		}
	}
	return peak
}

// withinLimits passes when no peak exceeds its limit; over formats a
// failure from the name, the peak and the limit.
func withinLimits(peak map[string]float64, limits []limit, over string) Verdict {
	v := Verdict{Pass: true}
	var parts []string
	for _, l := range limits {
		got := peak[l.name]
		parts = append(parts, fmt.Sprintf("%s %.2f≤%.2f", l.name, got, l.max))
		if got > l.max+1e-9 {
			v.Pass = false
			v.Detail += fmt.Sprintf(over, l.name, got, l.max)
		}
	}
	v.Figure = strings.Join(parts, ", ")
	return v
}
