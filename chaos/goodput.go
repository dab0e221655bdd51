package chaos

// The goodput benchmark: one workload sent along several paths to the same
// engines (straight to them, through routers admitting locally, through
// Leasehold in each reservation mode) at several loads, each variant on a
// fresh topology, and what the clients got and the engines did, side by
// side. make bench runs it (BenchmarkReport); docs/benchmarks.md explains
// the figures.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// RouterCounters sums the routers' own counters at the end of the load.
type RouterCounters struct {
	// Requests is every request the routers answered.
	Requests float64 `json:"requests"`
	// Attempts are ledger Acquire calls (admit_seconds observations),
	// Grants the leases granted (each is released once), Grows the ledger
	// Grow calls.
	Attempts float64 `json:"attempts"`
	Grants   float64 `json:"grants"`
	Grows    float64 `json:"grows"`
	// Reasserts are leases re-inserted after the ledger lost them, Lost
	// those that could not be (lease_reasserts_total, lease_lost_total).
	Reasserts float64 `json:"reasserts"`
	Lost      float64 `json:"lost"`
}

// LedgerCalls is the ledger calls per request the routers answered:
// Acquire attempts, Grows and one Release per grant.
func (rc RouterCounters) LedgerCalls() float64 {
	if rc.Requests == 0 {
		return 0
	}
	return (rc.Attempts + rc.Grants + rc.Grows) / rc.Requests
}

// routerCounterNames maps each RouterCounters field to its metric.
var routerCounterNames = []struct {
	metric string
	field  func(*RouterCounters) *float64
}{
	{"leasehold_router_requests_total", func(rc *RouterCounters) *float64 { return &rc.Requests }},
	{"leasehold_router_admit_seconds_count", func(rc *RouterCounters) *float64 { return &rc.Attempts }},
	{"leasehold_router_grants_total", func(rc *RouterCounters) *float64 { return &rc.Grants }},
	{"leasehold_router_lease_grows_total", func(rc *RouterCounters) *float64 { return &rc.Grows }},
	{"leasehold_router_lease_reasserts_total", func(rc *RouterCounters) *float64 { return &rc.Reasserts }},
	{"leasehold_router_lease_lost_total", func(rc *RouterCounters) *float64 { return &rc.Lost }},
}

// routerCounters reads every router's /metrics and sums the counters.
func (c *cluster) routerCounters(ctx context.Context) (RouterCounters, error) {
	var rc RouterCounters
	for _, r := range c.routers {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.addr+"/metrics", nil)
		if err != nil {
			return rc, err
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			return rc, fmt.Errorf("%s /metrics: %w", r.id, err)
		}
		err = sumCounters(resp.Body, &rc)
		resp.Body.Close()
		if err != nil {
			return rc, fmt.Errorf("%s /metrics: %w", r.id, err)
		}
	}
	return rc, nil
}

// sumCounters adds every series of the counters in routerCounterNames read
// from the text exposition in r.
func sumCounters(r io.Reader, rc *RouterCounters) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, n := range routerCounterNames {
			rest, ok := strings.CutPrefix(line, n.metric)
			if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
				continue
			}
			v, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
			if err != nil {
				return fmt.Errorf("%q: %w", line, err)
			}
			*n.field(rc) += v
		}
	}
	return sc.Err()
}

// Variant is one run of a benchmark: a path at a load.
type Variant struct {
	// Path and Load label the table row.
	Path, Load string
	Scenario   *Scenario
	// Warmup is the start of the load left out of the client figures
	// (learned lengths converge, queues fill); the engines' peaks and
	// preemptions count the whole run.
	Warmup time.Duration
}

// GoodputRow is what one variant measured.
type GoodputRow struct {
	Path string `json:"path"`
	Load string `json:"load"`
	// Rate is the offered arrivals per second (0: closed loop).
	Rate float64 `json:"rate"`
	// Requests are the arrivals after the warmup; Completed those answered
	// in full, Refused those answered 503 or 429, Failed the rest (other
	// statuses, transport errors, cut streams), Cut those still in flight
	// when the load ended.
	Requests  int `json:"requests"`
	Completed int `json:"completed"`
	Refused   int `json:"refused"`
	Failed    int `json:"failed"`
	Cut       int `json:"cut"`
	// TokensPerSec is the completion tokens of requests completed in the
	// window after the warmup (whenever they arrived), per second of it.
	TokensPerSec float64 `json:"completed_tokens_per_second"`
	// TTFTp50 and TTFTp95 (ms) are over streamed requests admitted after
	// the warmup; a request cut before its first token counts with its
	// age at the cut, TTFTCensored of them, and TTFTLower says that such
	// a request fell below p95, which is then a lower bound.
	TTFTp50      float64 `json:"ttft_p50_ms"`
	TTFTp95      float64 `json:"ttft_p95_ms"`
	TTFTCensored int     `json:"ttft_censored"`
	TTFTLower    bool    `json:"ttft_p95_lower_bound"`
	// Preemptions are the engines' over the run, PerK per 1,000 requests
	// the engines finished or were given.
	Preemptions int64   `json:"preemptions"`
	PreemptPerK float64 `json:"preemptions_per_1000"`
	// PeakActual is the worst engine's peak actual KV demand (prompt +
	// tokens generated of every accepted, unfinished sequence) over its
	// capacity; PeakKVUsed its peak of KV really held by running
	// sequences, PeakRunning the most sequences it ran at once.
	PeakActual  float64 `json:"peak_actual_kv_ratio"`
	PeakKVUsed  int64   `json:"peak_kv_tokens_used"`
	KVCapacity  int64   `json:"kv_capacity_tokens"`
	PeakRunning int     `json:"peak_running"`
	// Router is the routers' counters (nil straight to the engines).
	Router *RouterCounters `json:"router,omitempty"`
	RunDir string          `json:"run_dir"`
	Error  string          `json:"error,omitempty"`
}

// RefusedPct is Refused over Requests, in percent.
func (g GoodputRow) RefusedPct() float64 { return pct(g.Refused, g.Requests) }

// FailedPct is Failed over Requests, in percent.
func (g GoodputRow) FailedPct() float64 { return pct(g.Failed, g.Requests) }

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// RunVariants runs each variant on a fresh topology under dir and measures
// it. A variant that could not run has its Error set; ctx's error stops
// the rest.
func RunVariants(ctx context.Context, vs []Variant, dir string, opts Options) ([]GoodputRow, error) {
	var rows []GoodputRow
	for i, v := range vs {
		if ctx.Err() != nil {
			return rows, ctx.Err()
		}
		s, err := Prepare(v.Scenario, Options{})
		if err != nil {
			return rows, err
		}
		vdir := filepath.Join(dir, fmt.Sprintf("%02d-%s", i, s.Name))
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return rows, err
		}
		if err := writeScenario(s, filepath.Join(vdir, "scenario.yaml")); err != nil {
			return rows, err
		}
		row := GoodputRow{Path: v.Path, Load: v.Load, Rate: s.Workload.Rate, RunDir: vdir}
		o := opts
		o.NoChart = true
		res, err := runOne(ctx, s, vdir, o)
		if err != nil {
			row.Error = err.Error()
			rows = append(rows, row)
			continue
		}
		reqs, _, _, _, _, err := ReadEvents(filepath.Join(vdir, "events.jsonl"))
		if err != nil {
			return rows, err
		}
		row.measure(s, v.Warmup, res, reqs)
		rows = append(rows, row)
	}
	return rows, nil
}

// measure fills g from one run.
func (g *GoodputRow) measure(s *Scenario, warmup time.Duration, res *Result, reqs []RequestEvent) {
	from, to := warmup.Seconds(), s.Workload.Duration.D().Seconds()
	var tokens int
	var served int64 // answered 200 over the whole run, for preemptions per request
	var ttft, censored []float64
	for _, r := range reqs {
		if r.Status == 200 {
			served++
		}
		if r.Status == 200 && r.Err == "" && r.End >= from && r.End <= to {
			tokens += r.Completion
		}
		if r.T < from {
			continue
		}
		if r.Err == errCutAtEnd {
			g.Cut++
			g.Requests++
			if r.Stream && r.TTFTMS == 0 && r.Status == 200 {
				ttft = append(ttft, r.LatencyMS)
				censored = append(censored, r.LatencyMS)
			} else if r.TTFTMS > 0 {
				ttft = append(ttft, r.TTFTMS)
			}
			continue
		}
		if strings.HasPrefix(r.Err, "client:") {
			continue // shed by the client's in-flight bound
		}
		g.Requests++
		switch {
		case r.Status == 200 && r.Err == "":
			g.Completed++
		case r.Status == 503 || r.Status == 429:
			g.Refused++
		default:
			g.Failed++
		}
		if r.TTFTMS > 0 {
			ttft = append(ttft, r.TTFTMS)
		}
	}
	if to > from {
		g.TokensPerSec = float64(tokens) / (to - from)
	}
	sort.Float64s(ttft)
	g.TTFTp50, g.TTFTp95 = quantile(ttft, 0.50), quantile(ttft, 0.95)
	g.TTFTCensored = len(censored)
	for _, c := range censored {
		// Its true TTFT is higher: p95 stands only if it was above already.
		g.TTFTLower = g.TTFTLower || c < g.TTFTp95
	}
	for _, p := range res.Engines {
		g.Preemptions += p.Preemptions
		g.PeakActual = max(g.PeakActual, p.ActualRatio)
		g.PeakKVUsed = max(g.PeakKVUsed, p.PeakKVUsed)
		g.KVCapacity = max(g.KVCapacity, p.KVCapacity)
		g.PeakRunning = max(g.PeakRunning, p.PeakRunning)
	}
	if served > 0 {
		g.PreemptPerK = 1000 * float64(g.Preemptions) / float64(served)
	}
	g.Router = res.Router
}

// quantile is the q-quantile of sorted xs (0 when empty).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[min(len(xs)-1, int(q*float64(len(xs))))]
}

// WriteGoodput writes rows as a markdown table; ratios are against the
// row of path base at the same load.
func WriteGoodput(w io.Writer, rows []GoodputRow, base string) {
	ref := map[string]GoodputRow{}
	for _, r := range rows {
		if r.Path == base && r.Error == "" {
			ref[r.Load] = r
		}
	}
	fmt.Fprintln(w, "| load | path | output tok/s | × "+base+" | TTFT p50 / p95 ms | preemptions /1k req | peak actual KV / capacity | peak running | refused | failed | ledger calls /req |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(w, "| %s | %s | error: %s |||||||||\n", r.Load, r.Path, r.Error)
			continue
		}
		ratio := "-"
		if b, ok := ref[r.Load]; ok && b.TokensPerSec > 0 {
			ratio = fmt.Sprintf("%.2f×", r.TokensPerSec/b.TokensPerSec)
		}
		ttft := fmt.Sprintf("%.0f / %.0f", r.TTFTp50, r.TTFTp95)
		if r.TTFTLower {
			ttft = fmt.Sprintf("%.0f / ≥%.0f", r.TTFTp50, r.TTFTp95)
		}
		calls := "-"
		if r.Router != nil && r.Router.Attempts > 0 {
			calls = fmt.Sprintf("%.2f", r.Router.LedgerCalls())
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %s | %s | %.1f | %.2f | %d | %.1f%% | %.1f%% | %s |\n",
			r.Load, r.Path, r.TokensPerSec, ratio, ttft, r.PreemptPerK, r.PeakActual, r.PeakRunning,
			r.RefusedPct(), r.FailedPct(), calls)
	}
}

// Paths of the goodput benchmark.
const (
	PathDirect    = "straight to engines"
	PathLocal     = "4 routers, --admission=local"
	PathWorstCase = "Leasehold worst_case"
	PathElastic   = "Leasehold elastic"
)

// GoodputRate is the goodput benchmark's lower load, in requests per
// second: about 60% of the three engines' 48 slots busy on average, which
// they hold without preempting (the straight row at 1× shows it).
const GoodputRate = 20

// goodputScenario is the goodput benchmark's topology and workload: three
// engines of 16 slots and 16,384 KV tokens each, natural output lengths
// lognormal (median 80, σ 1.1: p99 near 1,000 tokens), a 4,096-token
// context; streamed chat requests of 128-512 prompt tokens, half with
// max_tokens 2,048 and half with none, open loop at rate.
func goodputScenario(name, path string, rate float64, warmup, measure time.Duration) *Scenario {
	s := &Scenario{
		Name: name,
		Topology: Topology{
			Ledger: LedgerRedis, Routers: 4, Admission: AdmissionLedger, Reserve: string(ledger.ReserveElastic),
			Engines: []EngineGroup{{
				Count: 3, KVTokens: 16384, Slots: 16, Speed: 2,
				OutputTokens: 80, OutputDist: "lognormal", OutputSigma: 1.1, MaxModelLen: 4096,
			}},
			Tenants: []TenantSpec{{Name: "bench", KVShare: 1, SlotShare: 1}},
			// Refuse at once when the fleet is full: under overload a
			// queue only adds waiting to the first token.
			RouterFlags: []string{"--queue-depth", "0"},
		},
		Workload: Workload{
			Duration: Duration(warmup + measure), Rate: rate, MaxInFlight: 4096,
			PromptTokens: Dist{Min: 128, Max: 512}, OutputTokens: Dist{Min: 2048}, NoMaxTokens: 0.5,
			Stream: 1, Timeout: Duration(time.Minute), CutAtEnd: true,
		},
		Checks: []string{CheckCompleted},
	}
	switch path {
	case PathDirect:
		s.Topology.Admission = AdmissionDirect
	case PathLocal:
		s.Topology.Admission = AdmissionLocal
	case PathWorstCase:
		s.Topology.Reserve = string(ledger.ReserveWorstCase)
	}
	return s
}

// GoodputVariants are the goodput benchmark: every path at 1× and 3×
// GoodputRate, each measured for measure after a warmup.
func GoodputVariants(warmup, measure time.Duration) []Variant {
	var vs []Variant
	for _, load := range []float64{1, 3} {
		for i, p := range []string{PathDirect, PathLocal, PathWorstCase, PathElastic} {
			name := fmt.Sprintf("goodput-%gx-%d", load, i)
			vs = append(vs, Variant{
				Path: p, Load: fmt.Sprintf("%g×", load), Warmup: warmup,
				Scenario: goodputScenario(name, p, load*GoodputRate, warmup, measure),
			})
		}
	}
	return vs
}

// FirstUseVariants re-measure issue 14's first table, as a new user meets
// Leasehold: one engine (16,384 KV tokens, 64 slots, uniform outputs of
// mean 128, a 4,096-token context, speed 10), one router on the embedded
// ledger, 48 closed-loop clients of non-streamed chat, with max_tokens
// 1,024 and with none, straight to the engine and through the router.
func FirstUseVariants(warmup, measure time.Duration) []Variant {
	var vs []Variant
	for _, maxTok := range []int{1024, 0} {
		load := "max_tokens 1024"
		if maxTok == 0 {
			load = "no max_tokens"
		}
		for i, adm := range []string{AdmissionDirect, AdmissionLedger} {
			s := &Scenario{
				Name: fmt.Sprintf("first-use-%d-%d", maxTok, i),
				Topology: Topology{
					Routers: 1, Admission: adm,
					Engines: []EngineGroup{{KVTokens: 16384, Slots: 64, Speed: 10, OutputTokens: 128, MaxModelLen: 4096}},
					Tenants: []TenantSpec{{Name: "bench", KVShare: 1, SlotShare: 1}},
				},
				Workload: Workload{
					Duration: Duration(warmup + measure), Concurrency: 48,
					PromptTokens: Dist{Min: 64, Max: 256}, OutputTokens: Dist{Min: max(maxTok, 1)},
					Timeout: Duration(time.Minute), CutAtEnd: true,
				},
				Checks: []string{CheckCompleted},
			}
			if maxTok == 0 {
				s.Workload.NoMaxTokens = 1
			}
			path := "straight to the engine"
			if adm == AdmissionLedger {
				path = "router (elastic)"
			}
			vs = append(vs, Variant{Path: path, Load: load, Warmup: warmup, Scenario: s})
		}
	}
	return vs
}

// HeadroomVariants justify growth_headroom: the goodput workload at 3×
// GoodputRate, half of it non-streamed (growth the router does not see
// until the answer ends, charged by reconciliation), on engines whose KV
// rather than slots binds (8,192 KV tokens for 16 slots), straight to the
// engines and through Leasehold elastic at each headroom.
func HeadroomVariants(warmup, measure time.Duration, headrooms []float64) []Variant {
	tight := func(s *Scenario) *Scenario {
		s.Topology.Engines[0].KVTokens = 8192
		s.Workload.Stream = 0.5
		return s
	}
	vs := []Variant{{Path: PathDirect, Load: "3×", Warmup: warmup,
		Scenario: tight(goodputScenario("headroom-direct", PathDirect, 3*GoodputRate, warmup, measure))}}
	for i, h := range headrooms {
		s := tight(goodputScenario(fmt.Sprintf("headroom-%d", i), PathElastic, 3*GoodputRate, warmup, measure))
		s.Topology.GrowthHeadroom = &h
		vs = append(vs, Variant{Path: fmt.Sprintf("elastic, growth_headroom %g", h), Load: "3×", Warmup: warmup, Scenario: s})
	}
	return vs
}
