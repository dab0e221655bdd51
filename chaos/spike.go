package chaos

// The spike: seed 002's stress test scaled to one machine. Open-loop
// arrivals step up by workload.spike.factor for workload.spike.for, a
// priority class carries a ttft_slo, and ttft_slo_held judges the class's
// p95 time to first token during the step. A scenario with baselines
// first runs the same load along other paths (straight to the engines,
// routers admitting locally, Leasehold without the SLO) and reports every
// path in one table, as seed 002 printed its: p95 TTFT before and during
// the spike, failures, share refused.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Baseline paths (Scenario.Baselines).
const (
	BaselineDirect = "direct" // no routers: clients send straight to the engines
	BaselineLocal  = "local"  // routers with --admission=local, no ttft_slo
	BaselineNoSLO  = "no_slo" // the scenario itself without ttft_slo
)

var baselinePaths = []string{BaselineDirect, BaselineLocal, BaselineNoSLO}

// CheckOthersExceed is judged by a scenario with baselines: every baseline
// path's p95 TTFT of the SLO class during the spike exceeds the SLO that
// the scenario's own run holds.
const CheckOthersExceed = "others_exceed_slo"

// rateAt is the open-loop arrival rate at elapsed time since load start.
func (w Workload) rateAt(elapsed time.Duration) float64 {
	if sp := w.Spike; sp != nil && elapsed >= sp.At.D() && elapsed < sp.At.D()+sp.For.D() {
		return w.Rate * sp.Factor
	}
	return w.Rate
}

// sloClass is the first priority class with a ttft_slo ("", 0: none).
func (t Topology) sloClass() (string, time.Duration) {
	for _, p := range t.Priorities {
		if p.TTFTSLO > 0 {
			return p.Name, p.TTFTSLO.D()
		}
	}
	return "", 0
}

// spikeWindow is the spike's [from, to) in seconds since load start, or
// the whole load without a spike.
func (w Workload) spikeWindow() (from, to float64) {
	if sp := w.Spike; sp != nil {
		return sp.At.D().Seconds(), (sp.At + sp.For).D().Seconds()
	}
	return 0, w.Duration.D().Seconds()
}

// ttftOf is r's time to first token in ms for a streamed request the
// system admitted (status 200): its first text, or, when none came (the
// stream was cut, the client gave up), its whole latency, a lower bound
// (censored true). ok is false for a request not admitted or not streamed.
func ttftOf(r RequestEvent) (ms float64, censored, ok bool) {
	if !r.Stream || r.Status != 200 {
		return 0, false, false
	}
	if r.TTFTMS > 0 {
		return r.TTFTMS, false, true
	}
	return r.LatencyMS, true, true
}

// classTTFT is the sorted TTFTs (ms) of class's admitted streamed requests
// sent in [from, to) ("" class: every class), and whether a censored one
// lies at or below the p95 (p95 is then a lower bound).
func classTTFT(reqs []RequestEvent, class string, from, to float64) (xs []float64, lower bool) {
	var cens []float64
	for _, r := range reqs {
		if r.T < from || r.T >= to || (class != "" && r.Priority != class) {
			continue
		}
		if ms, c, ok := ttftOf(r); ok {
			xs = append(xs, ms)
			if c {
				cens = append(cens, ms)
			}
		}
	}
	sort.Float64s(xs)
	p95 := quantile(xs, 0.95)
	for _, c := range cens {
		lower = lower || c <= p95
	}
	return xs, lower
}

// checkTTFTSLOHeld: the p95 time to first token of the SLO class's
// admitted streamed requests sent during the spike (the whole load
// without one) is within its ttft_slo; a request admitted that never got
// its first token counts with its whole latency.
func (ev *evidence) checkTTFTSLOHeld() Verdict {
	v := Verdict{}
	class, slo := ev.sc.Topology.sloClass()
	from, to := ev.sc.Workload.spikeWindow()
	xs, _ := classTTFT(ev.requests, class, from, to)
	refused := 0
	for _, r := range ev.requests {
		if r.Priority == class && r.T >= from && r.T < to && (r.Status == 503 || r.Status == 429) {
			refused++
		}
	}
	p95 := quantile(xs, 0.95)
	const enough = 10
	v.Pass = len(xs) >= enough && p95 <= float64(slo.Milliseconds())
	v.Figure = fmt.Sprintf("%s p95 TTFT %.0f ms ≤ %s over %d admitted, %d refused, sent %.1fs-%.1fs",
		class, p95, slo, len(xs), refused, from, to)
	switch {
	case len(xs) < enough:
		v.Detail = fmt.Sprintf("fewer than %d %s requests admitted in the window: too few to judge a p95", enough, class)
	case !v.Pass:
		v.Detail = fmt.Sprintf("%s requests admitted during the spike missed their SLO", class)
	}
	return v
}

// SpikeRow is one path's figures from a spike run.
type SpikeRow struct {
	Path string `json:"path"`
	// Class is the SLO class the TTFT columns are for, SLO its ttft_slo
	// in the scenario's own run.
	Class string  `json:"class"`
	SLOMS float64 `json:"slo_ms"`
	// ClassBefore and ClassDuring are the class's p95 TTFT (ms) of
	// admitted streamed requests sent before and during the spike;
	// AllDuring over every class during it. *Lower marks a p95 that a
	// request admitted but never given its first token makes a lower
	// bound.
	ClassBefore      float64 `json:"class_p95_ttft_before_ms"`
	ClassDuring      float64 `json:"class_p95_ttft_during_ms"`
	ClassDuringLower bool    `json:"class_p95_during_lower_bound,omitempty"`
	AllDuring        float64 `json:"all_p95_ttft_during_ms"`
	AllDuringLower   bool    `json:"all_p95_during_lower_bound,omitempty"`
	// Requests are those sent during the spike; Failed those that got no
	// answer, a status other than 200, 503 or 429, or a cut stream;
	// Refused those answered 503 or 429.
	Requests int `json:"requests_during"`
	Failed   int `json:"failed_during"`
	Refused  int `json:"refused_during"`
	// Shed are arrivals the client's in-flight bound dropped (not sent).
	Shed int `json:"client_shed,omitempty"`
	// EstErr is the routers' TTFT estimate error, nil where unknown.
	EstErr *EstimateError `json:"ttft_estimate_error,omitempty"`
	Pass   bool           `json:"pass"`
	RunDir string         `json:"run_dir"`
	Error  string         `json:"error,omitempty"`
}

// measureSpike fills a row from one run's requests.
func measureSpike(s *Scenario, class string, reqs []RequestEvent) SpikeRow {
	row := SpikeRow{Class: class}
	from, to := s.Workload.spikeWindow()
	before, _ := classTTFT(reqs, class, 0, from)
	during, lower := classTTFT(reqs, class, from, to)
	all, allLower := classTTFT(reqs, "", from, to)
	row.ClassBefore, row.ClassDuring, row.ClassDuringLower = quantile(before, 0.95), quantile(during, 0.95), lower
	row.AllDuring, row.AllDuringLower = quantile(all, 0.95), allLower
	for _, r := range reqs {
		if r.T < from || r.T >= to {
			continue
		}
		if strings.HasPrefix(r.Err, "client:") && r.Err != errCutAtEnd {
			row.Shed++
			continue
		}
		row.Requests++
		switch {
		case r.Status == 200 && (r.Err == "" || r.Err == errCutAtEnd):
		case r.Status == 503 || r.Status == 429:
			row.Refused++
		default:
			row.Failed++
		}
	}
	return row
}

// baselineOf is s along path p, same load, checks that apply there.
func baselineOf(s *Scenario, p string) *Scenario {
	v := s.clone()
	v.Name = s.Name + "-" + p
	v.Baselines, v.Short = nil, nil
	v.Checks = []string{CheckCompleted}
	noSLO := func() {
		for i := range v.Topology.Priorities {
			v.Topology.Priorities[i].TTFTSLO = 0
		}
	}
	switch p {
	case BaselineDirect:
		v.Topology.Admission = AdmissionDirect
	case BaselineLocal:
		v.Topology.Admission = AdmissionLocal
		noSLO()
	case BaselineNoSLO:
		noSLO()
	}
	return v
}

// baselineLabel names a path in the table.
func baselineLabel(s *Scenario, p string) string {
	switch p {
	case BaselineDirect:
		return "straight to the engines"
	case BaselineLocal:
		return fmt.Sprintf("%d routers, --admission=local", s.Topology.Routers)
	case BaselineNoSLO:
		return "Leasehold, no ttft_slo"
	}
	class, slo := s.Topology.sloClass()
	return fmt.Sprintf("Leasehold, %s ttft_slo %s", class, slo)
}

// runBaselines runs every baseline of s, then s itself, each on a fresh
// topology under dir, and reports them side by side (Result.Spike); the
// result's checks are the scenario's own run's and others_exceed_slo.
func runBaselines(ctx context.Context, s *Scenario, dir string, opts Options) (*Result, error) {
	class, slo := s.Topology.sloClass()
	type run struct {
		path string
		sc   *Scenario
	}
	var runs []run
	for _, p := range s.Baselines {
		runs = append(runs, run{p, baselineOf(s, p)})
	}
	runs = append(runs, run{"", s})
	var own *Result
	var rows []SpikeRow
	for i, r := range runs {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		vdir := filepath.Join(dir, fmt.Sprintf("%d-%s", i, r.sc.Name))
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return nil, err
		}
		if err := writeScenario(r.sc, filepath.Join(vdir, "scenario.yaml")); err != nil {
			return nil, err
		}
		row := SpikeRow{Path: baselineLabel(s, r.path), Class: class, RunDir: vdir}
		res, err := runOne(ctx, r.sc, vdir, opts)
		if err != nil {
			row.Error = err.Error()
			rows = append(rows, row)
			continue
		}
		reqs, _, _, _, _, err := ReadEvents(filepath.Join(vdir, "events.jsonl"))
		if err != nil {
			return nil, err
		}
		m := measureSpike(r.sc, class, reqs)
		m.Path, m.RunDir, m.Pass, m.EstErr = row.Path, vdir, res.Pass, res.TTFTEstimate
		if r.path == "" {
			own = res
			m.SLOMS = float64(slo.Milliseconds())
		}
		rows = append(rows, m)
	}
	if own == nil {
		own = &Result{Scenario: s.Name, Ledger: s.Topology.Ledger, Routers: s.Topology.Routers, Admin: s.Topology.Admission,
			Reserve: s.Topology.Reserve, Seed: s.Workload.Seed, Started: time.Now(), Error: rows[len(rows)-1].Error}
	}
	res := *own
	res.RunDir, res.Spike = dir, rows
	v := Verdict{Check: CheckOthersExceed, Pass: true}
	var parts []string
	for _, r := range rows[:len(rows)-1] {
		ok := r.Error == "" && r.ClassDuring > float64(slo.Milliseconds())
		v.Pass = v.Pass && ok
		parts = append(parts, fmt.Sprintf("%s %.0f ms", r.Path, r.ClassDuring))
		if !ok {
			v.Detail += fmt.Sprintf("%s held the SLO or did not run (%s); ", r.Path, r.Error)
		}
	}
	v.Figure = fmt.Sprintf("%s p95 TTFT during the spike > %s: %s", class, slo, strings.Join(parts, ", "))
	res.Checks = append(append([]Verdict(nil), res.Checks...), v)
	res.Pass = res.Error == ""
	for _, c := range res.Checks {
		res.Pass = res.Pass && c.Pass
	}
	return &res, nil
}

// WriteSpike writes rows as seed 002's table, in markdown.
func WriteSpike(w io.Writer, rows []SpikeRow) {
	if len(rows) == 0 {
		return
	}
	c := rows[0].Class
	fmt.Fprintf(w, "| path | %s p95 TTFT before | %s p95 TTFT during | all p95 TTFT during | failed | refused (503/429) | TTFT estimate error p50 |\n", c, c)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(w, "| %s | error: %s ||||||\n", r.Path, firstLine(r.Error))
			continue
		}
		est := "-"
		if r.EstErr != nil {
			est = r.EstErr.String()
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.1f%% | %.1f%% | %s |\n", r.Path,
			ms(r.ClassBefore, false), ms(r.ClassDuring, r.ClassDuringLower), ms(r.AllDuring, r.AllDuringLower),
			pct(r.Failed, r.Requests), pct(r.Refused, r.Requests), est)
	}
}

// ms formats a p95 in ms, "≥" when it is a lower bound.
func ms(x float64, lower bool) string {
	if lower {
		return fmt.Sprintf("≥%.0f ms", x)
	}
	return fmt.Sprintf("%.0f ms", x)
}
