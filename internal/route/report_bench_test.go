package route

// BenchmarkReport measures what the router adds to a streaming request:
// the same closed-loop load (internal/benchkit) sent straight to one
// simulated engine (the baseline), through one router with an in-memory
// ledger, and through one router with a Redis ledger, at 1 (unloaded), 64
// and 256 concurrent streaming clients. Each process's CPU time per
// request is printed too: client, engine and router share the machine, so
// at saturation throughput follows the CPU each request costs. The engine runs fast (high --speed, short
// outputs) so that the router's own cost is visible, and the fleet's
// capacity is so large that nothing is refused (and recovery_window is 0,
// so a fresh ledger grants at once): rejections and errors are
// counted and printed, and a run with any is not a clean figure.
//
//	LEASEHOLD_BENCH_PHASE=2s go test -run '^$' -bench '^BenchmarkReport$' -benchtime 1x ./internal/route/
//
// With LEASEHOLD_BENCH_PROFILE=DIR each router's CPU profile over each
// loaded phase is written to DIR (router-<ledger>-<clients>.pprof) from its
// --debug-listen profiler.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/benchkit"
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
)

var benchBody = []byte(`{"model":"m","stream":true,"max_tokens":32,"messages":[` +
	`{"role":"system","content":"You are terse."},` +
	`{"role":"user","content":"Summarize capacity leasing in one short sentence, please."}]}`)

// benchTarget is one way to the engine: a base URL and the clients' state.
type benchTarget struct {
	name   string
	url    string
	client *http.Client
	// ttfb holds each caller's time-to-first-byte samples (one writer per
	// slice: the caller's goroutine).
	ttfb       [][]time.Duration
	rejections atomic.Int64 // 429/503 answers; other failures are benchkit errors
}

func newBenchTarget(name, url string, callers int) *benchTarget {
	tr := &http.Transport{MaxIdleConns: 2 * callers, MaxIdleConnsPerHost: 2 * callers, DisableCompression: true}
	return &benchTarget{name: name, url: url + "/v1/chat/completions", client: &http.Client{Transport: tr, Timeout: 30 * time.Second},
		ttfb: make([][]time.Duration, callers)}
}

// op sends one streaming chat completion and reads it to its end,
// recording the time to the first body byte.
func (bt *benchTarget) op(ctx context.Context, c, _ int) error {
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
			if len(tailBuf) > 64 {
				tailBuf = tailBuf[len(tailBuf)-64:]
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if !bytes.Contains(tailBuf, []byte("[DONE]")) {
		return errors.New("stream ended without [DONE]")
	}
	bt.ttfb[c] = append(bt.ttfb[c], first)
	return nil
}

func (bt *benchTarget) close() { bt.client.CloseIdleConnections() }

// benchRow is one measured target.
type benchRow struct {
	res        benchkit.Result
	ttfb50     time.Duration
	ttfb99     time.Duration
	rejections int64
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
	// A short warm-up opens the connections (the router's to the engine
	// too) so the phase measures steady state.
	benchkit.Run(ctx, bt.name, callers, min(d/4, 500*time.Millisecond), bt.op)
	bt.ttfb = make([][]time.Duration, callers)
	bt.rejections.Store(0)
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
	var cpu [3]time.Duration
	for i, pid := range pids {
		after := time.Duration(-1)
		if pid >= 0 {
			after = cpuTime(pid)
		}
		switch {
		case pid < 0:
			cpu[i] = 0
		case after < 0 || before[i] < 0 || res.Ops == 0:
			cpu[i] = -1
		default:
			cpu[i] = (after - before[i]) / time.Duration(res.Ops)
		}
	}
	var all []time.Duration
	for _, s := range bt.ttfb {
		all = append(all, s...)
	}
	slices.Sort(all)
	return benchRow{res: res, ttfb50: benchkit.Quantile(all, 0.5), ttfb99: benchkit.Quantile(all, 0.99),
		rejections: bt.rejections.Load(), cpu: cpu}
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

func startBenchRouter(b *testing.B, name, ledgerURL, fleetPath string) benchRouter {
	b.Helper()
	addr, debug := freeAddr(b), freeAddr(b)
	r := startProc(b, name, "router", addr, "--ledger", ledgerURL, "--config", fleetPath, "--listen", addr, "--id", name,
		"--max-model-len", "2048", "--log-level", "warn", "--debug-listen", debug)
	waitHTTP(b, r.url()+"/readyz", 15*time.Second)
	return benchRouter{proc: r, debug: debug}
}

// profileEnv names the directory router CPU profiles are written to.
const profileEnv = "LEASEHOLD_BENCH_PROFILE"

// profile fetches a CPU profile of d from the router's profiler into
// $LEASEHOLD_BENCH_PROFILE/name.pprof, in the background; wait for the
// returned channel. Without the variable it does nothing.
func (br benchRouter) profile(b *testing.B, name string, d time.Duration) <-chan struct{} {
	done := make(chan struct{})
	dir := os.Getenv(profileEnv)
	if dir == "" {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", br.debug, max(1, int(d/time.Second)))
		resp, err := http.Get(url)
		if err != nil {
			b.Logf("profile %s: %v", name, err)
			return
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name+".pprof"), data, 0o644)
		}
		if err != nil {
			b.Logf("profile %s: %v", name, err)
		}
	}()
	return done
}

func BenchmarkReport(b *testing.B) {
	if testing.Short() {
		b.Skip("report benchmark: skipped in -short")
	}
	ctx := context.Background()
	d := benchkit.Phase()

	engAddr := freeAddr(b)
	eng := startProc(b, "enginesim", "enginesim", engAddr, "--listen", engAddr, "--model", "m",
		"--kv-tokens", fmt.Sprint(benchKV), "--slots", fmt.Sprint(benchSlots), "--max-model-len", "2048",
		"--speed", fmt.Sprint(benchSpeed), "--output-tokens", fmt.Sprint(benchOutput))
	waitHTTP(b, eng.url()+"/health", 10*time.Second)
	fleetPath := benchFleet(b, eng.url())
	rs := redisserver.Start(b)
	memRouter := startBenchRouter(b, "router-memory", "memory://", fleetPath)
	redisRouter := startBenchRouter(b, "router-redis", rs.URL(), fleetPath)

	out := &strings.Builder{}
	fmt.Fprintf(out, "\n### Router overhead (one enginesim at --speed %d, --output-tokens %d, max_tokens %d, streaming chat; %s per phase)\n\n",
		benchSpeed, benchOutput, benchMaxTokens, d)
	fmt.Fprintln(out, "| path | clients | req/s | p50 µs | p99 µs | TTFB p50 µs | TTFB p99 µs | added p50 µs | added p99 µs | vs direct | CPU µs/req client / engine / router | rejected / errors |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var summary []string
	enginePID := eng.cmd.Process.Pid
	for _, callers := range []int{1, 64, 256} {
		direct := measure(ctx, newBenchTarget("direct to enginesim (baseline)", eng.url(), callers), callers, d, [3]int{0, enginePID, -1}, nil)
		profile := func(br benchRouter, name string) func(time.Duration) <-chan struct{} {
			return func(d time.Duration) <-chan struct{} { return br.profile(b, fmt.Sprintf("%s-%d", name, callers), d) }
		}
		mem := measure(ctx, newBenchTarget("router, memory:// ledger", memRouter.url(), callers), callers, d,
			[3]int{0, enginePID, memRouter.cmd.Process.Pid}, profile(memRouter, "router-memory"))
		red := measure(ctx, newBenchTarget("router, Redis ledger", redisRouter.url(), callers), callers, d,
			[3]int{0, enginePID, redisRouter.cmd.Process.Pid}, profile(redisRouter, "router-redis"))
		for i, r := range []benchRow{direct, mem, red} {
			added50, added99, routerCPU := "—", "—", "—"
			if i > 0 {
				added50, added99 = benchkit.Micros(r.res.P50-direct.res.P50), benchkit.Micros(r.res.P99-direct.res.P99)
				routerCPU = cpuMicros(r.cpu[2])
			}
			fmt.Fprintf(out, "| %s | %d | %.0f | %s | %s | %s | %s | %s | %s | %s | %s / %s / %s | %d / %d |\n",
				r.res.Name, callers, r.res.Throughput(), benchkit.Micros(r.res.P50), benchkit.Micros(r.res.P99),
				benchkit.Micros(r.ttfb50), benchkit.Micros(r.ttfb99), added50, added99,
				benchkit.Ratio(r.res.Throughput(), direct.res.Throughput()),
				cpuMicros(r.cpu[0]), cpuMicros(r.cpu[1]), routerCPU, r.rejections, int64(r.res.Errors)-r.rejections)
		}
		if callers == 1 {
			continue // unloaded: the added latency is the router's own service time
		}
		for _, r := range []benchRow{mem, red} {
			summary = append(summary, fmt.Sprintf("%s, %d clients: added p50 %.2f ms (target ≤ 1 ms), throughput %s of direct (target ≥ 0.80×).",
				r.res.Name, callers, float64(r.res.P50-direct.res.P50)/float64(time.Millisecond),
				benchkit.Ratio(r.res.Throughput(), direct.res.Throughput())))
		}
	}
	fmt.Fprintln(out, "\nCPU µs/req is each process's user+system CPU time (/proc, 10 ms ticks) over the phase divided by the requests served;")
	fmt.Fprintln(out, "the Redis server's own CPU is not included.")
	fmt.Fprintln(out)
	for _, s := range summary {
		fmt.Fprintln(out, s)
	}
	fmt.Print(out.String())
}
