package route

// BenchmarkReport measures what the router adds to a streaming request:
// the same closed-loop load (internal/benchkit) sent straight to one
// simulated engine (the baseline: measured first and last, the midpoint of
// the two, whose difference shows the run's noise), through a bare reverse
// proxy (the floor of any HTTP hop), through one router with an in-memory
// ledger, and through one router with a Redis ledger (per-request leases,
// and block leases), at 1 (unloaded), 64 and 256 concurrent streaming
// clients, against two engines: one run fast (high --speed, short outputs)
// so that the router's own cost is visible, and one paced like a loaded GPU.
// Each process's CPU time per request is printed too: client, engine and
// router share the machine, so at saturation throughput follows the CPU
// each request costs. The fleet's capacity is so large that nothing is
// refused (and recovery_window is 0, so a fresh ledger grants at once):
// rejections and errors are counted and printed, and a run with any is not
// a clean figure. Each request's latency less the engine's own time for it
// (the usage chunk's x_enginesim.service_us) is what the path adds outside
// the engine: the last byte judged without the engine's step variance.
//
//	LEASEHOLD_BENCH_PHASE=2s go test -run '^$' -bench '^BenchmarkReport$' -benchtime 1x ./internal/route/
//
// With LEASEHOLD_BENCH_PROFILE=DIR each router's CPU profile and
// allocations over its first loaded round are written to DIR
// (router-<ledger>-<engine>-<clients>.pprof, .allocs.pprof) from its
// --debug-listen profiler. LEASEHOLD_BENCH_ENGINES=stress or =gpu measures
// one engine only; LEASEHOLD_BENCH_LOADS=64,256 some client counts only.
// The bare proxy and the three routers are measured in alternating rounds,
// the order rotated each round (8 rounds of half a phase against the
// stress engine, where CPU is judged; 2 rounds of a whole phase against
// the GPU-paced one, where throughput is; $LEASEHOLD_BENCH_ROUNDS sets
// both), so that load from elsewhere on a shared machine falls on all of
// them alike; their rows pool the rounds. The "router CPU vs bare proxy"
// column is each router's CPU per request over the bare proxy's at the
// same load over the same rounds; the summary lines give each round's
// ratio and judge their median against the targets of issue 20: ≤ 1.5×
// with a ledger call per request, ≤ 1.1× with block leases, in the
// proxy-stress setting.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/benchkit"
	"github.com/leasehold/leasehold/internal/freeport"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

const (
	// benchSlots and benchKV are the engine's and the fleet's capacity:
	// far above what 256 clients can hold, so nothing queues or is refused.
	benchSlots = 65536
	benchKV    = 1 << 30
	// benchMaxTokens is each request's max_tokens; the engine's natural
	// output (--output-tokens) is shorter, so requests end on their own.
	benchMaxTokens = 32
	benchOutput    = 8
	// benchSpeed makes a decode step 1/(50 × benchSpeed) s: a request's
	// time at the engine is its 1 ms scheduler ticks, not simulated decode.
	benchSpeed = 2000
	// benchGPUDecode and benchGPUOutput pace the GPU-paced engine like a
	// loaded GPU: a 20 ms decode step (50 tokens/s per sequence) and
	// answers of up to max_tokens.
	benchGPUDecode = 50
	benchGPUOutput = 32
)

// benchBody asks for the usage chunk, which carries the engine's own time
// for the request (x_enginesim.service_us): what a path adds outside the
// engine is measured per request, free of the engine's step variance.
var benchBody = []byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":32,"messages":[` +
	`{"role":"system","content":"You are terse."},` +
	`{"role":"user","content":"Summarize capacity leasing in one short sentence, please."}]}`)

// benchTarget is one way to the engine: a base URL and the clients' state.
type benchTarget struct {
	name   string
	url    string
	client *http.Client
	// think bounds the uniform random pause before each request; it is
	// not part of the request's latency.
	think time.Duration
	// lat and ttfb hold each caller's latency and time-to-first-byte
	// samples, outside its latency minus the engine's own time for the
	// request (one writer per slice: the caller's goroutine).
	lat, ttfb, outside [][]time.Duration
	rejections         atomic.Int64 // 429/503 answers; other failures are benchkit errors
	firstErr           atomic.Value // string: the first failure that was not a rejection
}

func newBenchTarget(name, url string, callers int) *benchTarget {
	tr := &http.Transport{MaxIdleConns: 2 * callers, MaxIdleConnsPerHost: 2 * callers, DisableCompression: true}
	return &benchTarget{name: name, url: url + "/v1/chat/completions", client: &http.Client{Transport: tr, Timeout: 30 * time.Second},
		lat: make([][]time.Duration, callers), ttfb: make([][]time.Duration, callers), outside: make([][]time.Duration, callers)}
}

// op sends one streaming chat completion and reads it to its end,
// recording the time to the first body byte.
func (bt *benchTarget) op(ctx context.Context, c, seq int) error {
	err := bt.request(ctx, c, seq)
	if err != nil && ctx.Err() == nil && !errors.Is(err, errRejected) {
		bt.firstErr.CompareAndSwap(nil, err.Error())
	}
	return err
}

var errRejected = errors.New("rejected")

func (bt *benchTarget) request(ctx context.Context, c, _ int) error {
	if bt.think > 0 {
		select {
		case <-time.After(rand.N(bt.think)):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	t0 := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, bt.url, bytes.NewReader(benchBody))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-bench")
	resp, err := bt.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		if (resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests) && ctx.Err() == nil {
			bt.rejections.Add(1)
			return fmt.Errorf("%w: status %d", errRejected, resp.StatusCode)
		}
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	var buf [4096]byte
	var first time.Duration
	var tailBuf []byte
	for {
		n, err := resp.Body.Read(buf[:])
		if n > 0 {
			if first == 0 {
				first = time.Since(t0)
			}
			tailBuf = append(tailBuf, buf[:n]...)
			if len(tailBuf) > 1024 {
				tailBuf = tailBuf[len(tailBuf)-1024:]
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	all := time.Since(t0)
	if !bytes.Contains(tailBuf, []byte("[DONE]")) {
		return errors.New("stream ended without [DONE]")
	}
	service, ok := serviceTime(tailBuf)
	if !ok {
		return errors.New("stream ended without the engine's x_enginesim.service_us")
	}
	bt.ttfb[c] = append(bt.ttfb[c], first)
	bt.lat[c] = append(bt.lat[c], all)
	bt.outside[c] = append(bt.outside[c], all-service)
	return nil
}

// serviceTime finds the engine's x_enginesim.service_us in the end of a
// stream.
func serviceTime(tail []byte) (time.Duration, bool) {
	_, after, ok := bytes.Cut(tail, []byte(`"service_us":`))
	if !ok {
		return 0, false
	}
	var us int64
	n := 0
	for ; n < len(after) && after[n] >= '0' && after[n] <= '9'; n++ {
		us = us*10 + int64(after[n]-'0')
	}
	return time.Duration(us) * time.Microsecond, n > 0
}

func (bt *benchTarget) close() { bt.client.CloseIdleConnections() }

// benchRow is one measured target.
type benchRow struct {
	res benchkit.Result
	// p50 and p99 are of completed requests, from sending to the last
	// byte (think time excluded).
	p50, p99 time.Duration
	// out50 is the p50 of latency minus the engine's own time: what the
	// path adds outside the engine, per request.
	out50      time.Duration
	ttfb50     time.Duration
	ttfb99     time.Duration
	rejections int64
	firstErr   string // the first other failure, if any
	// cpu is CPU time per request of the client (this process), the
	// engine and the router (0 for the direct path); -1 when unknown.
	cpu [3]time.Duration
}

// cpuTime returns the user+system CPU time of process pid (0: this
// process) from /proc, or -1 where there is no /proc.
func cpuTime(pid int) time.Duration {
	path := "/proc/self/stat"
	if pid > 0 {
		path = fmt.Sprintf("/proc/%d/stat", pid)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	// Fields after the parenthesised command: state is field 3, utime 14,
	// stime 15, in clock ticks (USER_HZ, 100 on Linux).
	rest := string(data)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return -1
	}
	var ut, st int64
	if _, err := fmt.Sscan(f[11], &ut); err != nil {
		return -1
	}
	if _, err := fmt.Sscan(f[12], &st); err != nil {
		return -1
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// cpuMicros formats CPU time per request in µs.
func cpuMicros(d time.Duration) string {
	if d < 0 {
		return "n/a"
	}
	return benchkit.Micros(d)
}

// measure runs bt's load; prof, when not nil, is started with the measured
// phase (after the warm-up) and waited for.
func measure(ctx context.Context, bt *benchTarget, callers int, d time.Duration, pids [3]int, prof func(time.Duration) <-chan struct{}) benchRow {
	defer bt.close()
	warmUp(ctx, bt, callers, d)
	ph := runPhase(ctx, bt, callers, d, pids, prof)
	return bt.row(ph.res, ph.cpu, pids)
}

// warmUp runs a short load that opens the connections (the router's to
// the engine too) so that what follows measures steady state, then clears
// bt's samples.
func warmUp(ctx context.Context, bt *benchTarget, callers int, d time.Duration) {
	benchkit.Run(ctx, bt.name, callers, min(d/4, 500*time.Millisecond), bt.op)
	bt.lat, bt.ttfb, bt.outside = make([][]time.Duration, callers), make([][]time.Duration, callers), make([][]time.Duration, callers)
	bt.rejections.Store(0)
	bt.firstErr = atomic.Value{}
}

// phase is one measured load run: its result and the CPU time each
// process (client, engine, router; -1 unknown, 0 for a pid < 0) spent in
// it, in total.
type phase struct {
	res benchkit.Result
	cpu [3]time.Duration
}

// runPhase runs bt's load for d, adding to bt's samples; prof as for
// measure.
func runPhase(ctx context.Context, bt *benchTarget, callers int, d time.Duration, pids [3]int, prof func(time.Duration) <-chan struct{}) phase {
	runtime.GC()
	var before [3]time.Duration
	for i, pid := range pids {
		if pid >= 0 {
			before[i] = cpuTime(pid)
		}
	}
	profDone := make(<-chan struct{})
	if prof != nil {
		profDone = prof(d)
	}
	res := benchkit.Run(ctx, bt.name, callers, d, bt.op)
	if prof != nil {
		<-profDone
	}
	ph := phase{res: res}
	for i, pid := range pids {
		after := time.Duration(-1)
		if pid >= 0 {
			after = cpuTime(pid)
		}
		switch {
		case pid < 0:
			ph.cpu[i] = 0
		case after < 0 || before[i] < 0:
			ph.cpu[i] = -1
		default:
			ph.cpu[i] = after - before[i]
		}
	}
	return ph
}

// row is bt's figures from its samples, res (the phases' requests and time
// together) and cpu (the phases' CPU time together).
func (bt *benchTarget) row(res benchkit.Result, cpu [3]time.Duration, pids [3]int) benchRow {
	var perReq [3]time.Duration
	for i, c := range cpu {
		switch {
		case pids[i] < 0:
			perReq[i] = 0
		case c < 0 || res.Ops == 0:
			perReq[i] = -1
		default:
			perReq[i] = c / time.Duration(res.Ops)
		}
	}
	lat, ttfb := merged(bt.lat), merged(bt.ttfb)
	firstErr, _ := bt.firstErr.Load().(string)
	return benchRow{res: res, p50: benchkit.Quantile(lat, 0.5), p99: benchkit.Quantile(lat, 0.99), out50: benchkit.Quantile(merged(bt.outside), 0.5),
		ttfb50: benchkit.Quantile(ttfb, 0.5), ttfb99: benchkit.Quantile(ttfb, 0.99),
		rejections: bt.rejections.Load(), cpu: perReq, firstErr: firstErr}
}

// midpoint is the baseline of two runs of the same path: their latencies'
// midpoints and their pooled throughput.
func midpoint(a, b benchRow) benchRow {
	mid := func(x, y time.Duration) time.Duration { return (x + y) / 2 }
	r := a
	r.res.Ops, r.res.Errors, r.res.Elapsed = a.res.Ops+b.res.Ops, a.res.Errors+b.res.Errors, a.res.Elapsed+b.res.Elapsed
	r.p50, r.p99, r.ttfb50, r.ttfb99 = mid(a.p50, b.p50), mid(a.p99, b.p99), mid(a.ttfb50, b.ttfb50), mid(a.ttfb99, b.ttfb99)
	r.out50 = mid(a.out50, b.out50)
	return r
}

// metricSum is the sum of every series of a counter on base's /metrics
// (-1 when it cannot be read).
func metricSum(base, name string) float64 {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	var sum float64
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(rest[strings.LastIndexByte(rest, ' ')+1:], &v); err == nil {
			sum += v
		}
	}
	return sum
}

// merged returns every caller's samples, sorted.
func merged(per [][]time.Duration) []time.Duration {
	var all []time.Duration
	for _, s := range per {
		all = append(all, s...)
	}
	slices.Sort(all)
	return all
}

// benchFleet writes the fleet file of one pool "m" over engine url.
func benchFleet(b *testing.B, url string) string {
	b.Helper()
	yaml := fmt.Sprintf(`pools:
  - name: m
    engines:
      - {id: gpu-0, url: %q, kv_tokens: %d, slots: %d, stale_after: 0s}
tenants:
  - {name: bench, api_keys: ["sk-bench"], kv_share: 1}
lease:
  recovery_window: 0s
`, url, benchKV, benchSlots)
	path := filepath.Join(b.TempDir(), "fleet.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

// benchRouter is a router process and its profiler's address.
type benchRouter struct {
	*proc
	debug string
}

func startBenchRouter(b *testing.B, name, ledgerURL, fleetPath string, extra ...string) benchRouter {
	b.Helper()
	addr, debug := freeport.AddrT(b), freeport.AddrT(b)
	r := startProc(b, name, "router", addr, append([]string{"--ledger", ledgerURL, "--config", fleetPath, "--listen", addr, "--id", name,
		"--max-model-len", "2048", "--log-level", "warn", "--debug-listen", debug}, extra...)...)
	waitHTTP(b, r.url()+"/readyz", 15*time.Second)
	return benchRouter{proc: r, debug: debug}
}

// onlyEnv, when set, lists the engines (tags: stress, gpu) measured;
// loadsEnv, when set, the numbers of clients (of 1, 64, 256).
const (
	onlyEnv  = "LEASEHOLD_BENCH_ENGINES"
	loadsEnv = "LEASEHOLD_BENCH_LOADS"
)

// benchLoads is loads narrowed to those $LEASEHOLD_BENCH_LOADS lists.
func benchLoads(loads []int) []int {
	only := os.Getenv(loadsEnv)
	if only == "" {
		return loads
	}
	want := strings.Split(only, ",")
	return slices.DeleteFunc(slices.Clone(loads), func(n int) bool { return !slices.Contains(want, fmt.Sprint(n)) })
}

// cpuRatio formats the router CPU per request of r over the bare proxy's
// (floor), or "n/a" when either is unknown.
func cpuRatio(r, floor benchRow) string {
	if r.cpu[2] <= 0 || floor.cpu[2] <= 0 {
		return "n/a"
	}
	return benchkit.Ratio(float64(r.cpu[2]), float64(floor.cpu[2]))
}

// profileEnv names the directory router CPU profiles are written to;
// with traceEnv set too, execution traces (name.trace) are written beside
// them.
const (
	profileEnv = "LEASEHOLD_BENCH_PROFILE"
	traceEnv   = "LEASEHOLD_BENCH_TRACE"
)

// profile fetches a CPU profile of d from the router's profiler into
// $LEASEHOLD_BENCH_PROFILE/name.pprof, and the allocations over the same
// time into name.allocs.pprof, in the background; wait for the
// returned channel. Without the variable it does nothing.
func (br benchRouter) profile(b *testing.B, name string, d time.Duration) <-chan struct{} {
	done := make(chan struct{})
	dir := os.Getenv(profileEnv)
	if dir == "" {
		close(done)
		return done
	}
	kinds := []string{"profile", "allocs"}
	if os.Getenv(traceEnv) != "" {
		kinds = append(kinds, "trace")
	}
	var wg sync.WaitGroup
	for _, kind := range kinds {
		wg.Go(func() {
			url := fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", br.debug, kind, max(1, int(d/time.Second)))
			resp, err := http.Get(url)
			if err != nil {
				b.Logf("%s %s: %v", kind, name, err)
				return
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			if err == nil {
				ext := map[string]string{"profile": ".pprof", "allocs": ".allocs.pprof", "trace": ".trace"}[kind]
				err = os.WriteFile(filepath.Join(dir, name+ext), data, 0o644)
			}
			if err != nil {
				b.Logf("%s %s: %v", kind, name, err)
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	return done
}

// benchEngine is one way of running the simulated engine in the report.
type benchEngine struct {
	// tag names the engine in profiles and summaries: stress or gpu.
	tag   string
	title string
	// args are the enginesim flags beyond listen, model and capacity.
	args []string
	// loads are the numbers of concurrent clients measured.
	loads []int
	// phase scales benchkit.Phase for this engine's requests.
	phase int
	// think is the upper bound of a uniform random pause before each
	// request (0: none), the same on every path.
	think time.Duration
	// rounds is how many alternating rounds measure the bare proxy and
	// the routers, unless $LEASEHOLD_BENCH_ROUNDS says; each round runs a
	// phase over roundDiv. A closed loop's requests still running when a
	// phase ends are not counted, so a round shorter than the direct
	// phases counts a smaller share of its time: against the GPU-paced
	// engine (0.65 s requests) rounds are whole phases, as long as the
	// direct ones, so that throughput compares like with like.
	rounds, roundDiv int
}

func BenchmarkReport(b *testing.B) {
	if testing.Short() {
		b.Skip("report benchmark: skipped in -short")
	}
	ctx := context.Background()
	d := benchkit.Phase()
	build := exec.Command("go", "build", "-o", filepath.Join(binDir, "bareproxy"), "./testdata/bareproxy")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build bareproxy: %v\n%s", err, out)
	}
	var summary []string
	out := &strings.Builder{}
	for _, be := range []benchEngine{
		{
			tag:   "stress",
			title: fmt.Sprintf("Proxy stress: one enginesim at --speed %d, --output-tokens %d (1-2 ms per request at the engine)", benchSpeed, benchOutput),
			args:  []string{"--speed", fmt.Sprint(benchSpeed), "--output-tokens", fmt.Sprint(benchOutput)},
			loads: []int{1, 64, 256}, phase: 1, rounds: 8, roundDiv: 2,
		},
		{
			tag:   "gpu",
			title: fmt.Sprintf("GPU-paced: one enginesim at --speed 1, %d tokens/s per sequence (a %s decode step), --output-tokens %d", benchGPUDecode, time.Second/benchGPUDecode, benchGPUOutput),
			args: []string{"--speed", "1", "--decode-tokens-per-sec", fmt.Sprint(benchGPUDecode),
				"--output-tokens", fmt.Sprint(benchGPUOutput)},
			loads: []int{1, 64, 256}, phase: 3, think: time.Second / benchGPUDecode, rounds: 2, roundDiv: 1,
		},
	} {
		if only := os.Getenv(onlyEnv); only != "" && !slices.Contains(strings.Split(only, ","), be.tag) {
			continue
		}
		summary = append(summary, reportEngine(ctx, b, be, d*time.Duration(be.phase), out)...)
	}
	fmt.Fprintln(out, "\nCPU µs/req is each process's user+system CPU time (/proc, 10 ms ticks) over the phase divided by the requests served;")
	fmt.Fprintln(out, "the Redis server's own CPU is not included.")
	fmt.Fprintln(out)
	for _, s := range summary {
		fmt.Fprintln(out, s)
	}
	fmt.Print(out.String())
}

// reportEngine measures be's engine directly and through the two routers,
// writes the table to out and returns the summary lines of the loaded rows.
func reportEngine(ctx context.Context, b *testing.B, be benchEngine, d time.Duration, out io.Writer) []string {
	engAddr := freeport.AddrT(b)
	eng := startProc(b, "enginesim", "enginesim", engAddr, append([]string{"--listen", engAddr, "--model", "m",
		"--kv-tokens", fmt.Sprint(benchKV), "--slots", fmt.Sprint(benchSlots), "--max-model-len", "2048"}, be.args...)...)
	defer eng.stop(5 * time.Second)
	waitHTTP(b, eng.url()+"/health", 10*time.Second)
	fleetPath := benchFleet(b, eng.url())
	rs := redisserver.Start(b)
	// One router on a ledger of its own: the ledger's cost without a store.
	memRouter := startBenchRouter(b, "router-memory", "memory://", fleetPath, "--test-memory-ledger")
	defer memRouter.stop(5 * time.Second)
	redisRouter := startBenchRouter(b, "router-redis", rs.URL(), fleetPath)
	defer redisRouter.stop(5 * time.Second)
	// Block leases: blocks of 256 slots (two per engine and tenant at
	// most), so at 256 clients nearly every request is admitted locally.
	blockRouter := startBenchRouter(b, "router-redis-blocks", rs.URL(), fleetPath,
		"--block-lease-kv", "65536", "--block-lease-slots", "256")
	defer blockRouter.stop(5 * time.Second)
	bareAddr := freeport.AddrT(b)
	bare := startProc(b, "bareproxy", "bareproxy", bareAddr, "--listen", bareAddr, "--upstream", eng.url())
	defer bare.stop(5 * time.Second)
	waitHTTP(b, bare.url()+"/readyz", 10*time.Second)

	think := ""
	if be.think > 0 {
		think = fmt.Sprintf("; each client pauses a uniform random 0-%s before each request, on every path", be.think)
	}
	rounds := benchRounds(be.rounds)
	fmt.Fprintf(out, "\n### %s\n\nStreaming chat, max_tokens %d; %s per direct phase; the bare proxy and the routers in %d alternating rounds of %s each%s.\n\n",
		be.title, benchMaxTokens, d, rounds, d/time.Duration(be.roundDiv), think)
	fmt.Fprintln(out, "| path | clients | req/s | p50 µs | p99 µs | TTFB p50 µs | TTFB p99 µs | added p50 µs | added p99 µs | added TTFB p50 µs | added p50 outside the engine µs | vs direct | CPU µs/req client / engine / router | router CPU vs bare proxy | rejected / errors |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var summary, errNotes []string
	enginePID := eng.cmd.Process.Pid
	tag := be.tag
	for _, callers := range benchLoads(be.loads) {
		target := func(name, url string) *benchTarget {
			bt := newBenchTarget(name, url, callers)
			bt.think = be.think
			return bt
		}
		first := measure(ctx, target("direct to enginesim (first)", eng.url()), callers, d, [3]int{0, enginePID, -1}, nil)
		profile := func(br benchRouter, name string) func(time.Duration) <-chan struct{} {
			return func(d time.Duration) <-chan struct{} {
				return br.profile(b, fmt.Sprintf("%s-%s-%d", name, tag, callers), d)
			}
		}
		// The bare proxy and the routers alternate in rounds (of half a
		// phase against the stress engine): what else runs on the machine
		// meanwhile falls on them alike, and the CPU ratios are taken
		// within each round.
		paths := []*altPath{
			{bt: target("bare reverse proxy (floor: no admission)", bare.url()), pids: [3]int{0, enginePID, bare.cmd.Process.Pid}},
			{bt: target("router, memory:// ledger", memRouter.url()), pids: [3]int{0, enginePID, memRouter.cmd.Process.Pid}, prof: profile(memRouter, "router-memory")},
			{bt: target("router, Redis ledger", redisRouter.url()), pids: [3]int{0, enginePID, redisRouter.cmd.Process.Pid}, prof: profile(redisRouter, "router-redis")},
			{bt: target("router, Redis ledger, block leases", blockRouter.url()), pids: [3]int{0, enginePID, blockRouter.cmd.Process.Pid}, prof: profile(blockRouter, "router-redis-blocks")},
		}
		alt := alternate(ctx, paths, callers, rounds, d/time.Duration(be.roundDiv))
		floor, mem, red, blk := alt[0], alt[1], alt[2], alt[3]
		last := measure(ctx, target("direct to enginesim (last)", eng.url()), callers, d, [3]int{0, enginePID, -1}, nil)
		// The baseline is the midpoint of the direct runs before and after
		// the others, so drift over the run cancels; their difference (A/A)
		// is the noise any added figure carries.
		direct := midpoint(first, last)
		for i, r := range []benchRow{first, last, floor, mem, red, blk} {
			added50, added99 := benchkit.Micros(r.p50-direct.p50), benchkit.Micros(r.p99-direct.p99)
			addedTTFB, routerCPU, vsBare := benchkit.Micros(r.ttfb50-direct.ttfb50), "—", "—"
			if i > 1 {
				routerCPU, vsBare = cpuMicros(r.cpu[2]), cpuRatio(r, floor)
			}
			fmt.Fprintf(out, "| %s | %d | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s / %s | %s | %d / %d |\n",
				r.res.Name, callers, r.res.Throughput(), benchkit.Micros(r.p50), benchkit.Micros(r.p99),
				benchkit.Micros(r.ttfb50), benchkit.Micros(r.ttfb99), added50, added99, addedTTFB, benchkit.Micros(r.out50-direct.out50),
				benchkit.Ratio(r.res.Throughput(), direct.res.Throughput()),
				cpuMicros(r.cpu[0]), cpuMicros(r.cpu[1]), routerCPU, vsBare, r.rejections, int64(r.res.Errors)-r.rejections)
		}
		for _, r := range []benchRow{first, last, floor, mem, red, blk} {
			if r.firstErr != "" {
				errNotes = append(errNotes, fmt.Sprintf("%s, %d clients, first error: %s", r.res.Name, callers, r.firstErr))
			}
		}
		if callers == 1 {
			continue // unloaded: the added latency is the router's own service time
		}
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		summary = append(summary, fmt.Sprintf("%s, direct A/A, %d clients: the last direct run differs from the first by %+.2f ms p50 (%+.2f ms outside the engine), %+.2f ms TTFB p50, %s throughput.",
			tag, callers, ms(last.p50-first.p50), ms(last.out50-first.out50), ms(last.ttfb50-first.ttfb50), benchkit.Ratio(last.res.Throughput(), first.res.Throughput())))
		for i, r := range []benchRow{mem, red, blk} {
			target := 1.5
			if i == 2 {
				target = 1.1
			}
			summary = append(summary, fmt.Sprintf("%s, %s, %d clients: router CPU %s µs/req, %s the bare proxy's %s µs/req over %d rounds; %s.",
				tag, r.res.Name, callers, cpuMicros(r.cpu[2]), cpuRatio(r, floor), cpuMicros(floor.cpu[2]), rounds, cpuVerdict(paths[i+1], paths[0], target)))
		}
		for _, r := range []benchRow{floor, mem, red, blk} {
			summary = append(summary, fmt.Sprintf("%s, %s, %d clients: added p50 %.2f ms (target ≤ 1 ms; outside the engine %.2f ms; TTFB %.2f ms), throughput %s of direct (target ≥ 0.80×); vs the bare proxy: +%.2f ms p50, %s throughput.",
				tag, r.res.Name, callers, ms(r.p50-direct.p50), ms(r.out50-direct.out50), ms(r.ttfb50-direct.ttfb50),
				benchkit.Ratio(r.res.Throughput(), direct.res.Throughput()), ms(r.p50-floor.p50),
				benchkit.Ratio(r.res.Throughput(), floor.res.Throughput())))
		}
	}
	local, grants := metricSum(blockRouter.url(), "leasehold_router_block_local_admits_total"),
		metricSum(blockRouter.url(), "leasehold_router_grants_total")
	blocks := metricSum(blockRouter.url(), "leasehold_router_block_acquires_total")
	fmt.Fprintf(out, "\nBlock leases: %.0f of %.0f grants admitted locally against %.0f blocks (warm-ups included).\n", local, grants, blocks)
	if len(errNotes) > 0 {
		fmt.Fprintln(out)
		for _, n := range errNotes {
			fmt.Fprintln(out, "-", n)
		}
	}
	return summary
}
