package chaos

// The checks. Each reads the recorded events (never the runner's beliefs)
// and returns a verdict with the figure it judged.

import (
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
	// PeakActual is the peak actual demand, ActualRatio it over capacity,
	// Preemptions and Generated what the engine counted over the run.
	PeakActual  int64   `json:"peak_actual_demand_tokens"`
	ActualRatio float64 `json:"actual_kv_ratio"`
	Preemptions int64   `json:"preemptions"`
	Generated   int64   `json:"generation_tokens"`
	// PeakRunning and PeakKVUsed are the engine's own peaks of running
	// sequences and of KV tokens they held.
	PeakRunning int   `json:"peak_running"`
	PeakKVUsed  int64 `json:"peak_kv_tokens_used"`
	// Seconds spans the engine's first and last samples.
	Seconds float64 `json:"seconds"`
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
	breakers []BreakerEvent
	// endLeases is the audit's lease count after the drain (-1: unknown),
	// endWait how long the drain wait took.
	endLeases int
	endWait   time.Duration
	endErr    string
	// routersUp is when the routers were up, in seconds since load start
	// (negative: before it); NaN when not recorded (see recovery.go).
	routersUp float64
}

func enginePeaks(samples []EngineSample) []EnginePeak {
	by := map[string]*EnginePeak{}
	first := map[string]EngineSample{}
	for _, s := range samples {
		if s.Err != "" {
			continue
		}
		p := by[s.Engine]
		if p == nil {
			p = &EnginePeak{Engine: s.Engine}
			by[s.Engine] = p
			first[s.Engine] = s
		}
		p.KVCapacity, p.Slots = s.KVCapacity, s.Slots
		p.PeakDemand = max(p.PeakDemand, s.PeakDemand, s.AdmittedDemand)
		p.PeakSeqs = max(p.PeakSeqs, s.PeakAcceptedSeqs, s.AcceptedSeqs)
		p.PeakActual = max(p.PeakActual, s.PeakActual, s.ActualDemand)
		p.PeakRunning = max(p.PeakRunning, s.PeakRunning)
		p.PeakKVUsed = max(p.PeakKVUsed, s.PeakKVUsed)
		// Counters since the engine's start (or a restart: then the
		// later figure is the count since it).
		f := first[s.Engine]
		p.Preemptions = max(p.Preemptions, s.Preemptions-f.Preemptions, 0)
		p.Generated = max(p.Generated, s.Generated-f.Generated, 0)
		p.Seconds = max(p.Seconds, s.T-f.T)
	}
	var out []EnginePeak
	for _, p := range by {
		if p.KVCapacity > 0 {
			p.KVRatio = float64(p.PeakDemand) / float64(p.KVCapacity)
			p.ActualRatio = float64(p.PeakActual) / float64(p.KVCapacity)
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

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	if len(s) > 120 {
		return s[:120]
	}
	return s
}
