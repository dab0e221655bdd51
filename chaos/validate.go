package chaos

// The checks. Each reads the recorded events (never the runner's beliefs)
// and returns a verdict with the figure it judged.

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Verdict is one check's outcome.
type Verdict struct {
	Check  string `json:"check"`
	Pass   bool   `json:"pass"`
	Figure string `json:"figure"`
	// Detail explains a failure (or notes why a check had nothing to judge).
	Detail string `json:"detail,omitempty"`
}

// EnginePeak is one engine's peak use of its capacity, from its own
// /admin/stats.
type EnginePeak struct {
	Engine     string  `json:"engine"`
	KVCapacity int64   `json:"kv_capacity_tokens"`
	Slots      int     `json:"slots"`
	PeakDemand int64   `json:"peak_admitted_demand_tokens"`
	PeakSeqs   int     `json:"peak_accepted_sequences"`
	KVRatio    float64 `json:"kv_ratio"`
	SlotRatio  float64 `json:"slot_ratio"`
}

// Requests sums the client side.
type Requests struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	// Rejected are 503/429 answers (with or without Retry-After).
	Rejected    int            `json:"rejected"`
	ByStatus    map[string]int `json:"by_status"`
	ByCode      map[string]int `json:"by_code,omitempty"`
	Transport   int            `json:"transport_errors"`
	StreamCuts  int            `json:"stream_cuts"`
	Shed        int            `json:"client_shed"`
	P50MS       float64        `json:"p50_ms"`
	P99MS       float64        `json:"p99_ms"`
	Duplicates  int            `json:"duplicates,omitempty"`
	FaultErrors int            `json:"errors_during_faults"`
}

// documented4xx are the client errors the router documents for bad input.
var documented4xx = []int{400, 401, 403, 404, 413, 422, 429}

// evidence is what the checks read.
type evidence struct {
	sc       *Scenario
	requests []RequestEvent
	faults   []FaultEvent
	engines  []EngineSample
	audits   []AuditSample
	reclaims []ReclaimEvent
	// endLeases is the audit's lease count after the drain (-1: unknown),
	// endWait how long the drain wait took.
	endLeases int
	endWait   time.Duration
	endErr    string
}

func enginePeaks(samples []EngineSample) []EnginePeak {
	by := map[string]*EnginePeak{}
	for _, s := range samples {
		if s.Err != "" {
			continue
		}
		p := by[s.Engine]
		if p == nil {
			p = &EnginePeak{Engine: s.Engine}
			by[s.Engine] = p
		}
		p.KVCapacity, p.Slots = s.KVCapacity, s.Slots
		p.PeakDemand = max(p.PeakDemand, s.PeakDemand, s.AdmittedDemand)
		p.PeakSeqs = max(p.PeakSeqs, s.PeakAcceptedSeqs, s.AcceptedSeqs)
	}
	var out []EnginePeak
	for _, p := range by {
		if p.KVCapacity > 0 {
			p.KVRatio = float64(p.PeakDemand) / float64(p.KVCapacity)
		}
		if p.Slots > 0 {
			p.SlotRatio = float64(p.PeakSeqs) / float64(p.Slots)
		}
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return engineLess(out[i].Engine, out[j].Engine) })
	return out
}

// engineLess orders "engine-2" before "engine-10".
func engineLess(a, b string) bool {
	ia, ea := strconv.Atoi(a[strings.LastIndexByte(a, '-')+1:])
	ib, eb := strconv.Atoi(b[strings.LastIndexByte(b, '-')+1:])
	if ea == nil && eb == nil && a[:strings.LastIndexByte(a, '-')] == b[:strings.LastIndexByte(b, '-')] {
		return ia < ib
	}
	return a < b
}

// faultWindows are [inject - 0.1s, heal + settle] per fault target (the
// slack covers clock reads around a signal); errors in them are attributed
// to the fault.
func faultWindows(faults []FaultEvent, settle time.Duration) [][2]float64 {
	open := map[string]float64{}
	var out [][2]float64
	for _, f := range faults {
		key := f.Kind + "/" + f.Target
		switch f.Phase {
		case "inject":
			if _, ok := open[key]; ok {
				out = append(out, [2]float64{open[key], f.T + settle.Seconds()})
			}
			open[key] = f.T
		case "heal":
			start, ok := open[key]
			if !ok {
				start = f.T
			}
			delete(open, key)
			out = append(out, [2]float64{start, f.T + settle.Seconds()})
		}
	}
	for _, start := range open {
		out = append(out, [2]float64{start, start + settle.Seconds()})
	}
	for i := range out {
		out[i][0] -= 0.1
	}
	return out
}

func overlaps(ws [][2]float64, a, b float64) bool {
	for _, w := range ws {
		if a <= w[1] && b >= w[0] {
			return true
		}
	}
	return false
}

func summarize(reqs []RequestEvent, windows [][2]float64) Requests {
	s := Requests{ByStatus: map[string]int{}, ByCode: map[string]int{}}
	var lat []float64
	for _, r := range reqs {
		if strings.HasPrefix(r.Err, "client:") {
			s.Shed++
			continue
		}
		s.Total++
		if r.Duplicate {
			s.Duplicates++
		}
		switch {
		case r.Status == 0:
			s.Transport++
		case r.Status == 200 && r.Err != "":
			s.StreamCuts++
		case r.Status == 200:
			s.Completed++
			lat = append(lat, r.LatencyMS)
		case r.Status == 503 || r.Status == 429:
			s.Rejected++
		}
		if r.Status != 0 {
			s.ByStatus[strconv.Itoa(r.Status)]++
		}
		if r.Code != "" {
			s.ByCode[r.Code]++
		}
		if (r.Status != 200 || r.Err != "") && overlaps(windows, r.T, r.End) {
			s.FaultErrors++
		}
	}
	sort.Float64s(lat)
	if n := len(lat); n > 0 {
		s.P50MS = lat[n/2]
		s.P99MS = lat[min(n-1, n*99/100)]
	}
	return s
}

func (ev *evidence) settle() time.Duration {
	return ev.sc.Topology.SessionTTL.D() + time.Second + expiryLateness(ev.sc.Topology.Ledger)
}

// check runs the named check.
func (ev *evidence) check(name string) Verdict {
	v := Verdict{Check: name}
	ttl := ev.sc.Topology.SessionTTL.D()
	bound := ttl + time.Second + expiryLateness(ev.sc.Topology.Ledger)
	switch name {
	case CheckNoOverCapacity:
		peaks := enginePeaks(ev.engines)
		if len(peaks) == 0 {
			v.Figure, v.Detail = "no sample", "no engine sample answered"
			return v
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
	case CheckReclaim:
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
	case CheckNoLeasesAtEnd:
		v.Pass = ev.endLeases == 0
		switch {
		case ev.endLeases < 0:
			v.Figure, v.Detail = "unknown", ev.endErr
		default:
			v.Figure = fmt.Sprintf("%d leases %.1fs after load", ev.endLeases, ev.endWait.Seconds())
		}
	case CheckNoDeadHolder:
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
	case CheckCleanErrors:
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
	case CheckFaultsApplied:
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
	case CheckCompleted:
		s := summarize(ev.requests, faultWindows(ev.faults, ev.settle()))
		v.Pass = s.Completed > 0
		v.Figure = fmt.Sprintf("%d completed, %d rejected of %d", s.Completed, s.Rejected, s.Total)
		if !v.Pass {
			v.Detail = "no request completed"
		}
	case CheckStaleSeen:
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
	case CheckQuotaRejected:
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
	case CheckPriorityHeadroom:
		v.Pass = true
		fills := map[string]float64{}
		for _, a := range ev.audits {
			for p, f := range a.PriorityFill {
				fills[p] = max(fills[p], f)
			}
		}
		var parts []string
		for _, p := range ev.sc.Topology.Priorities {
			got := fills[p.Name]
			parts = append(parts, fmt.Sprintf("%s %.2f≤%.2f", p.Name, got, p.MaxFill))
			if got > p.MaxFill+1e-9 {
				v.Pass = false
				v.Detail += fmt.Sprintf("%s leases held %.2f of an engine, max_fill %.2f; ", p.Name, got, p.MaxFill)
			}
		}
		v.Figure = strings.Join(parts, ", ")
	case CheckTenantQuota:
		v.Pass = true
		shares := map[string]float64{}
		for _, a := range ev.audits {
			for t, s := range a.TenantShare {
				shares[t] = max(shares[t], s)
			}
		}
		var parts []string
		for _, t := range ev.sc.Topology.Tenants {
			got := shares[t.Name]
			parts = append(parts, fmt.Sprintf("%s %.2f≤%.2f", t.Name, got, t.KVShare))
			if got > t.KVShare+1e-9 {
				v.Pass = false
				v.Detail += fmt.Sprintf("%s held %.2f of the pool, kv_share %.2f; ", t.Name, got, t.KVShare)
			}
		}
		v.Figure = strings.Join(parts, ", ")
	default:
		v.Figure, v.Detail = "n/a", "check "+name+" applies to compare scenarios only"
	}
	return v
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	if len(s) > 120 {
		return s[:120]
	}
	return s
}
