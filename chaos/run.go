package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Options are a run's settings that are not part of the scenario.
type Options struct {
	// Short applies the scenario's short (CI) overrides.
	Short bool
	// Ledger, when set, overrides topology.ledger (memory, redis or etcd).
	Ledger string
	// Etcd is the host:port of the etcd a topology.ledger etcd run uses
	// (required then); each run keeps its keys under a prefix of its own.
	Etcd string
	// Duration, when set, overrides workload.duration.
	Duration time.Duration
	// Seed, when set, overrides workload.seed.
	Seed uint64
	// RunsDir is where run directories are made (default DefaultRunsDir).
	RunsDir string
	// RunDir, when set, is the exact run directory (replay uses a fresh
	// one under the recorded run).
	RunDir string
	// Binaries are prebuilt executables; zero means Build into RunDir/bin.
	Binaries Binaries
	// Progress receives a progress bar redrawn in place when it is a
	// terminal, else one line per run (nil: none).
	Progress io.Writer
	// SampleInterval is how often engines and the audit are sampled
	// (default 250ms).
	SampleInterval time.Duration
	// NoChart skips the chart.
	NoChart bool
}

// DefaultRunsDir is $TMPDIR/leasehold-chaos: runs stay out of the work tree.
func DefaultRunsDir() string { return filepath.Join(os.TempDir(), "leasehold-chaos") }

// Result is one run's report (result.json in the run directory).
type Result struct {
	Scenario string    `json:"scenario"`
	Ledger   string    `json:"ledger"`
	Routers  int       `json:"routers"`
	Admin    string    `json:"admission"`
	Reserve  string    `json:"reserve"`
	Seed     uint64    `json:"seed"`
	Short    bool      `json:"short"`
	RunDir   string    `json:"run_dir"`
	Started  time.Time `json:"started"`
	Seconds  float64   `json:"seconds"`
	Pass     bool      `json:"pass"`
	// Error is set when the run could not complete (no verdicts then).
	Error    string       `json:"error,omitempty"`
	Checks   []Verdict    `json:"checks"`
	Engines  []EnginePeak `json:"engines,omitempty"`
	Requests Requests     `json:"requests"`
	Compare  []CompareRow `json:"compare,omitempty"`
	Chart    string       `json:"chart,omitempty"`
	// Router sums the routers' ledger-call counters when the load ended
	// (nil without routers, or when one could not be read: RouterErr).
	Router    *RouterCounters `json:"router,omitempty"`
	RouterErr string          `json:"router_error,omitempty"`
	// TTFTEstimate is the routers' TTFT estimate error when the load
	// ended (nil where they export none).
	TTFTEstimate *EstimateError `json:"ttft_estimate_error,omitempty"`
	// Spike is a scenario with baselines' table: each baseline path, then
	// the scenario's own run (whose checks and figures the rest of the
	// Result holds).
	Spike []SpikeRow `json:"spike,omitempty"`
}

// CompareRow is one variant of a compare scenario.
type CompareRow struct {
	Admission string  `json:"admission"`
	Routers   int     `json:"routers"`
	KVRatio   float64 `json:"peak_kv_ratio"`
	SlotRatio float64 `json:"peak_slot_ratio"`
	Completed int     `json:"completed"`
	Rejected  int     `json:"rejected"`
	Over      bool    `json:"over_capacity"`
	// Actual marks a row judged on actual demand (ledger admission in an
	// elastic pool): KVRatio is then the KV requests really held.
	Actual      bool  `json:"actual_demand"`
	Preemptions int64 `json:"preemptions"`
	// Goodput is the engines' generated tokens per second.
	Goodput float64 `json:"output_tokens_per_second"`
	RunDir  string  `json:"run_dir"`
	Error   string  `json:"error,omitempty"`
}

// Prepare applies opts' overrides to sc and validates the result.
func Prepare(sc *Scenario, opts Options) (*Scenario, error) {
	s := sc.clone()
	if opts.Short {
		s = sc.WithShort()
	}
	s.Short = nil
	if opts.Ledger != "" {
		s.Topology.Ledger = opts.Ledger
	}
	if opts.Duration > 0 {
		s.Workload.Duration = Duration(opts.Duration)
	}
	if opts.Seed != 0 {
		s.Workload.Seed = opts.Seed
	}
	if s.Topology.Ledger != LedgerSentinel {
		// A Sentinel scenario run on another ledger: its failover is that
		// ledger's loss (a Redis restart, the reserver's below).
		s.Topology.RedisReplicas, s.Topology.WaitReplicas = 0, 0
		for i, f := range s.Faults {
			if f.Kind == FaultFailoverRedis {
				s.Faults[i] = Fault{At: f.At, Kind: FaultRestartRedis, For: Duration(300 * time.Millisecond)}
			}
		}
	}
	if s.Topology.Ledger == LedgerMemory {
		// The embedded ledger's restart is its reserver's.
		for i, f := range s.Faults {
			if f.Kind == FaultRestartRedis {
				d := f.For
				s.Faults[i] = Fault{At: f.At, Kind: FaultKillReserver, Target: "reserver-0", RestartAfter: &d}
			}
		}
		s.Topology.Reservers = 1
	}
	s.defaults()
	return s, s.Validate()
}

// Run runs sc (after opts' overrides) and returns its report. The error is
// for runs that could not be carried out; failed checks are in the Result.
func Run(ctx context.Context, sc *Scenario, opts Options) (*Result, error) {
	s, err := Prepare(sc, opts)
	if err != nil {
		return nil, err
	}
	dir := opts.RunDir
	if dir == "" {
		base := opts.RunsDir
		if base == "" {
			base = DefaultRunsDir()
		}
		dir = filepath.Join(base, fmt.Sprintf("%s-%s-%s", s.Name, s.Topology.Ledger, time.Now().Format("20060102-150405.000")))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if opts.Binaries.Reserver == "" {
		bins, err := Build(ctx, filepath.Join(dir, "bin"))
		if err != nil {
			return nil, err
		}
		opts.Binaries = bins
	}
	if err := writeScenario(s, filepath.Join(dir, "scenario.yaml")); err != nil {
		return nil, err
	}
	var res *Result
	if s.Compare != nil {
		res, err = runCompare(ctx, s, dir, opts)
	} else if len(s.Baselines) > 0 && !opts.Short {
		res, err = runBaselines(ctx, s, dir, opts)
	} else {
		res, err = runOne(ctx, s, dir, opts)
	}
	if err != nil {
		return nil, err
	}
	res.Short = opts.Short
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "result.json"), b, 0o644); err != nil {
		return nil, err
	}
	return res, nil
}

func writeScenario(s *Scenario, path string) error {
	b, err := s.Marshal()
	if err != nil {
		return err
	}
	head := "# Resolved scenario of this run (overrides applied): `chaos replay` reruns it.\n"
	return os.WriteFile(path, append([]byte(head), b...), 0o644)
}

// Replay reruns the scenario recorded in runDir (same seed, same fault
// schedule) into runDir/replay-<time> and returns its report.
func Replay(ctx context.Context, runDir string, opts Options) (*Result, error) {
	b, err := os.ReadFile(filepath.Join(runDir, "scenario.yaml"))
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	sc, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("replay %s: %w", runDir, err)
	}
	opts.Short, opts.Ledger, opts.Duration, opts.Seed = false, "", 0, 0
	if opts.RunDir == "" {
		opts.RunDir = filepath.Join(runDir, "replay-"+time.Now().Format("20060102-150405.000"))
	}
	return Run(ctx, sc, opts)
}

// runCompare runs every (admission, routers) variant with the same load.
func runCompare(ctx context.Context, s *Scenario, dir string, opts Options) (*Result, error) {
	res := &Result{Scenario: s.Name, Ledger: s.Topology.Ledger, Reserve: s.Topology.Reserve, Seed: s.Workload.Seed, RunDir: dir, Started: time.Now()}
	maxLocal, maxLedger := -1.0, -1.0
	var errs []string
	for _, adm := range s.Compare.Admission {
		for _, n := range s.Compare.Routers {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			v := s.clone()
			v.Name = fmt.Sprintf("%s-%s-%d", s.Name, adm, n)
			v.Compare, v.Short = nil, nil
			v.Topology.Routers, v.Topology.Admission = n, adm
			v.Checks = []string{CheckNoOverCapacity, CheckCompleted}
			vdir := filepath.Join(dir, fmt.Sprintf("%s-%d", adm, n))
			if err := os.MkdirAll(vdir, 0o755); err != nil {
				return nil, err
			}
			if err := writeScenario(v, filepath.Join(vdir, "scenario.yaml")); err != nil {
				return nil, err
			}
			row := CompareRow{Admission: adm, Routers: n, RunDir: vdir}
			r, err := runOne(ctx, v, vdir, opts)
			if err != nil {
				row.Error = err.Error()
				errs = append(errs, v.Name+": "+err.Error())
			} else {
				row.Actual = adm == AdmissionLedger && v.Topology.elastic()
				var generated int64
				var secs float64
				for _, p := range r.Engines {
					ratio := p.KVRatio
					if row.Actual {
						ratio = p.ActualRatio
					}
					row.KVRatio = max(row.KVRatio, ratio)
					row.SlotRatio = max(row.SlotRatio, p.SlotRatio)
					row.Preemptions += p.Preemptions
					generated += p.Generated
					secs = max(secs, p.Seconds)
				}
				if secs > 0 {
					row.Goodput = float64(generated) / secs
				}
				row.Completed, row.Rejected = r.Requests.Completed, r.Requests.Rejected
				row.Over = row.KVRatio > 1 || row.SlotRatio > 1 || (row.Actual && row.Preemptions > 0)
				worst := max(row.KVRatio, row.SlotRatio)
				if adm == AdmissionLocal {
					maxLocal = max(maxLocal, worst)
				} else {
					maxLedger = max(maxLedger, worst)
				}
			}
			res.Compare = append(res.Compare, row)
		}
	}
	res.Error = strings.Join(errs, "; ")
	if slices.Contains(s.Compare.Admission, AdmissionLocal) {
		v := Verdict{Check: CheckLocalOver, Pass: maxLocal > 1, Figure: fmt.Sprintf("max %.2f > 1.00", maxLocal)}
		if !v.Pass {
			v.Detail = "local admission never over-admitted: the load is too light to show the gap"
		}
		res.Checks = append(res.Checks, v)
	}
	if slices.Contains(s.Compare.Admission, AdmissionLedger) {
		var preempted int64
		for _, r := range res.Compare {
			if r.Actual {
				preempted += r.Preemptions
			}
		}
		v := Verdict{Check: CheckLedgerWithin, Pass: maxLedger >= 0 && maxLedger <= 1 && preempted == 0, Figure: fmt.Sprintf("max %.2f ≤ 1.00", maxLedger)}
		if s.Topology.elastic() {
			v.Figure += fmt.Sprintf(", %d preemptions", preempted)
		}
		if maxLedger > 1 || preempted > 0 {
			v.Detail = "the ledger let an engine over capacity"
		}
		res.Checks = append(res.Checks, v)
	}
	res.Pass = res.Error == ""
	for _, c := range res.Checks {
		res.Pass = res.Pass && c.Pass
	}
	res.Seconds = time.Since(res.Started).Seconds()
	return res, nil
}

// runOne starts the topology, drives the load with the fault timeline,
// samples, drains, checks and stops everything.
func runOne(ctx context.Context, s *Scenario, dir string, opts Options) (res *Result, err error) {
	res = &Result{
		Scenario: s.Name, Ledger: s.Topology.Ledger, Routers: s.Topology.Routers, Admin: s.Topology.Admission, Reserve: s.Topology.Reserve,
		Seed: s.Workload.Seed, RunDir: dir, Started: time.Now(),
	}
	interval := opts.SampleInterval
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	if s.Topology.Ledger == LedgerEtcd && opts.Etcd == "" {
		return nil, fmt.Errorf("%s: topology.ledger etcd needs an etcd endpoint (--etcd host:port)", s.Name)
	}
	c, err := startCluster(ctx, s, dir, opts.Binaries, opts.Etcd)
	if err != nil {
		return nil, fmt.Errorf("%s: start topology: %w", s.Name, err)
	}
	defer func() {
		c.stop()
		httpClient.CloseIdleConnections()
	}()
	for _, e := range c.engines {
		if err := postJSON(ctx, "http://"+e.addr+"/admin/reset", struct{}{}); err != nil {
			return nil, fmt.Errorf("%s: reset %s: %w", s.Name, e.id, err)
		}
	}
	if s.Topology.Admission == AdmissionLedger && !s.Topology.ColdStart {
		if err := c.waitRecovered(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
	}
	rec, err := newRecorder(filepath.Join(dir, "events.jsonl"))
	if err != nil {
		return nil, err
	}
	routersUp := math.NaN()
	if !c.routersUp.IsZero() {
		routersUp = rec.mark(markRoutersUp, c.routersUp)
	}
	defer func() {
		if cerr := rec.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()

	sctx, stopSampling := context.WithCancel(ctx)
	var swg sync.WaitGroup
	swg.Add(1)
	go func() {
		defer swg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			c.sampleEngines(sctx, rec)
			if s.Topology.Admission == AdmissionLedger {
				_, _ = c.sampleAudit(sctx, rec)
			}
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
		}
	}()

	tr := newTraffic(s, c, rec)
	fp := &failpoints{sc: s, c: c, rec: rec, tr: tr}
	start := rec.start
	stop := start.Add(s.Workload.Duration.D())
	fctx, cancelFaults := context.WithCancel(ctx)
	defer cancelFaults()
	fp.run(fctx, start)

	barDone := make(chan struct{})
	var bwg sync.WaitGroup
	if opts.Progress != nil {
		bwg.Add(1)
		go func() {
			defer bwg.Done()
			showProgress(opts.Progress, s, tr, start, barDone)
		}()
	}
	tr.run(ctx, stop)
	tr.client.CloseIdleConnections()
	close(barDone)
	bwg.Wait()
	fp.wait()
	if len(c.routers) > 0 {
		if rc, err := c.routerCounters(ctx); err != nil {
			res.RouterErr = err.Error()
		} else {
			res.Router = &rc
		}
		if e, err := c.ttftEstimateError(ctx); err != nil {
			res.RouterErr = err.Error()
		} else {
			res.TTFTEstimate = e
		}
	}

	// Drain: every lease should be released now that the load is over.
	ev := &evidence{sc: s, endLeases: -1, routersUp: routersUp}
	if s.Topology.Admission == AdmissionLedger {
		drainStart := time.Now()
		limit := drainStart.Add(s.Topology.SessionTTL.D() + 3*time.Second)
		for {
			a, err := c.sampleAudit(ctx, rec)
			if err == nil {
				ev.endLeases = len(a.Leases)
				ev.endErr = ""
			} else {
				ev.endErr = err.Error()
			}
			if ev.endLeases == 0 || time.Now().After(limit) || ctx.Err() != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		ev.endWait = time.Since(drainStart)
	} else {
		ev.endLeases = 0
	}
	stopSampling()
	swg.Wait()
	c.sampleEngines(context.WithoutCancel(ctx), rec)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	rec.mu.Lock()
	ev.requests, ev.faults, ev.engines = rec.requests, rec.faults, rec.engines
	ev.audits, ev.reclaims, ev.breakers = rec.audits, rec.reclaims, rec.breakerEvents
	rec.mu.Unlock()
	res.Pass = true
	for _, name := range s.Checks {
		if s.Topology.Admission != AdmissionLedger && isLedgerCheck(name) {
			continue
		}
		v := ev.check(name)
		res.Checks = append(res.Checks, v)
		res.Pass = res.Pass && v.Pass
	}
	res.Engines = enginePeaks(ev.engines)
	res.Requests = summarize(ev.requests, faultWindows(ev.faults, ev.settle()))
	if !opts.NoChart {
		path := filepath.Join(dir, "usage.png")
		if err := chart(path, s, ev); err != nil {
			res.Error = "chart: " + err.Error()
		} else {
			res.Chart = path
		}
	}
	res.Seconds = time.Since(res.Started).Seconds()
	return res, nil
}

// isLedgerCheck: checks that read the ledger audit, meaningless without it.
func isLedgerCheck(name string) bool {
	switch name {
	case CheckReclaim, CheckNoLeasesAtEnd, CheckNoDeadHolder, CheckPriorityHeadroom, CheckTenantQuota, CheckStaleSeen,
		CheckBreakerTransitions:
		return true
	}
	return false
}

// showProgress shows the run's progress on w until doneC is closed: a
// bar redrawn in place on a terminal; elsewhere (a pipe, a log file,
// where carriage-return frames pile up as hundreds of lines) one line
// when the run's traffic ends.
func showProgress(w io.Writer, s *Scenario, tr *traffic, start time.Time, doneC <-chan struct{}) {
	if f, ok := w.(interface{ Fd() uintptr }); !ok || !term.IsTerminal(int(f.Fd())) {
		<-doneC
		fmt.Fprintf(w, "%-28s %d requests in %s\n", s.Name, tr.issued.Load(), time.Since(start).Round(100*time.Millisecond))
		return
	}
	total := s.Workload.Duration.D().Milliseconds()
	bar := progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(fmt.Sprintf("%-28s", s.Name)),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-doneC:
			bar.Describe(fmt.Sprintf("%-28s", fmt.Sprintf("%s %d req", s.Name, tr.issued.Load())))
			_ = bar.Finish()
			return
		case <-t.C:
			bar.Describe(fmt.Sprintf("%-28s", fmt.Sprintf("%s %d req", s.Name, tr.issued.Load())))
			_ = bar.Set64(min(total, time.Since(start).Milliseconds()))
		}
	}
}

// ErrChecksFailed is returned by callers that turn a failed Result into an
// exit status.
var ErrChecksFailed = errors.New("chaos: checks failed")
