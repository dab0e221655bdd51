package route

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"
	"github.com/leasehold/leasehold/internal/ledger"
	lhredis "github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// The failover tests run the real binaries: one router on a real Redis
// ledger in front of three enginesim processes, gpu-0..gpu-2, where some
// are broken by a real crash (SIGKILL: the listener and its connections
// gone) or by enginesim's POST /admin/fail modes. They check what the
// issue asks (docs/design.md, "A request's way through the router"):
// requests succeed on the healthy engines with one attempt more at most,
// a hung engine costs a request one first-byte timeout at most, no engine
// goes over capacity (its own /admin/stats), every dispatch's outcome is
// the one its lease's Release reported
// (leasehold_router_dispatch_outcomes_total, counted where Release is
// given it), no request fails over once a byte reached the client, and
// the failed attempts' leases are released.

const (
	foKV, foSlots = 4096, 4
	// foFirstByte is the pool's first_byte_timeout.
	foFirstByte = 1500 * time.Millisecond
	foClients   = 6
	foPerClient = 8
)

// foRig is one router process over three engine processes.
type foRig struct {
	engines []*proc
	router  *proc
	l       ledger.Ledger
	client  *http.Client
}

// startFailoverRig starts the rig with --failover-attempts attempts and
// the pool's breaker (fleet YAML, e.g. "{failures: -1}": off).
func startFailoverRig(t *testing.T, attempts int, breaker string) *foRig {
	t.Helper()
	rig := &foRig{client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}}
	t.Cleanup(rig.client.CloseIdleConnections)
	for i := range 3 {
		rig.engines = append(rig.engines, startEngine(t, fmt.Sprintf("gpu-%d", i), engineOpts{kv: foKV, slots: foSlots, speed: 10, output: 8}))
	}
	path := fleetYAMLPool(t, rig.engines, foKV, foSlots, "    reserve: worst_case\n    first_byte_timeout: "+foFirstByte.String()+"\n    breaker: "+breaker+"\n", `tenants:
  - {name: acme, api_keys: ["sk-acme"], kv_share: 1}
lease:
  session_ttl: 3s
  recovery_window: 0s
`)
	rs := redisserver.Start(t)
	l, err := lhredis.Open(rs.URL(), lhredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	rig.l = l
	addr := freeport.AddrT(t)
	rig.router = startProcEnv(t, "router", "router", addr, withoutLeaseholdEnv(), "--ledger", rs.URL(), "--config", path, "--listen", addr,
		"--id", "r0", "--max-model-len", "2048", "--log-level", "warn", "--failover-attempts", strconv.Itoa(attempts))
	waitHTTP(t, rig.router.url()+"/readyz", 15*time.Second)
	return rig
}

// breakEngine breaks engine i: "crash" kills its process, any other mode
// is an enginesim POST /admin/fail mode.
func (rig *foRig) breakEngine(t *testing.T, i int, mode string) {
	t.Helper()
	e := rig.engines[i]
	if mode == "crash" {
		_ = e.cmd.Process.Kill()
		<-e.done
		return
	}
	resp, err := http.Post(e.url()+"/admin/fail?mode="+mode, "application/json", nil)
	if err != nil {
		t.Fatalf("break gpu-%d: %v", i, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("break gpu-%d with %s: %d", i, mode, resp.StatusCode)
	}
}

// foResult is one client request's answer.
type foResult struct {
	status  int
	engine  string // X-Leasehold-Engine
	body    string
	stream  bool
	elapsed time.Duration
	err     error
}

// load sends clients × foPerClient requests, each a different prompt (so
// affinity spreads them over every engine), half streamed.
func (rig *foRig) load(t *testing.T, clients int) []foResult {
	t.Helper()
	var (
		mu  sync.Mutex
		out []foResult
		wg  sync.WaitGroup
	)
	for c := range clients {
		wg.Go(func() {
			for i := range foPerClient {
				stream := (c+i)%2 == 0
				body := map[string]any{"model": "m", "max_tokens": 16, "stream": stream,
					"prompt": fmt.Sprintf("client %d request %d asks about failover", c, i)}
				start := time.Now()
				status, hdr, data, err := post(context.Background(), rig.client, rig.router.url()+"/v1/completions", "sk-acme", body)
				r := foResult{status: status, body: string(data), stream: stream, elapsed: time.Since(start), err: err}
				if hdr != nil {
					r.engine = hdr.Get("X-Leasehold-Engine")
				}
				mu.Lock()
				out = append(out, r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// series reads the router's counter name by its labels: each series'
// labels as `k="v",...` (Prometheus's order), to its value.
func (rig *foRig) series(t *testing.T, name string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(rig.router.url() + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[labels] = v
	}
	return out
}

// outcomes is the router's dispatch count by engine and outcome.
func (rig *foRig) outcomes(t *testing.T) map[[2]string]float64 {
	t.Helper()
	out := map[[2]string]float64{}
	for labels, v := range rig.series(t, "leasehold_router_dispatch_outcomes_total") {
		var engine, outcome string
		for _, kv := range strings.Split(labels, ",") {
			k, val, _ := strings.Cut(kv, "=")
			val = strings.Trim(val, `"`)
			switch k {
			case "engine":
				engine = val
			case "outcome":
				outcome = val
			}
		}
		out[[2]string{engine, outcome}] += v
	}
	return out
}

// failovers is the router's failover count by reason.
func (rig *foRig) failovers(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for labels, v := range rig.series(t, "leasehold_router_failovers_total") {
		_, reason, _ := strings.Cut(labels, `reason="`)
		out[strings.TrimSuffix(reason, `"`)] += v
	}
	return out
}

// checkCapacity fails unless every engine still running stayed within
// its capacity by its own ground truth.
func (rig *foRig) checkCapacity(t *testing.T, skip int) {
	t.Helper()
	for i, e := range rig.engines {
		if i == skip {
			continue
		}
		s := getStats(t, e.url())
		if s.PeakAdmittedDemand > s.KVCapacityTokens || s.PeakAcceptedSequences > s.Slots {
			t.Errorf("gpu-%d over capacity: peak admitted demand %d of %d KV tokens, peak sequences %d of %d slots",
				i, s.PeakAdmittedDemand, s.KVCapacityTokens, s.PeakAcceptedSequences, s.Slots)
		}
	}
}

// breakers returns each engine's breaker state in the ledger.
func (rig *foRig) breakers(t *testing.T) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := rig.l.Stats(ctx, "m")
	if err != nil {
		t.Fatalf("ledger stats: %v", err)
	}
	out := map[string]string{}
	for _, e := range st.Engines {
		out[string(e.Spec.ID)] = e.Breaker.State.String()
	}
	return out
}

// waitNoLeases waits until the ledger holds no lease: the failed
// attempts' leases were released too (after --abort-grace).
func (rig *foRig) waitNoLeases(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		st, err := rig.l.Stats(ctx, "m")
		if err != nil {
			t.Fatalf("ledger stats: %v", err)
		}
		if st.Leases == 0 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the ledger still holds %d leases after every request ended", st.Leases)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// One engine of three is broken: every request succeeds on the other two.
// A request is dispatched to the broken engine at most once (it is
// excluded after failing), so one attempt more at most: every failure the
// router counts is on the broken engine, with the outcome its fault
// gives, and each is one failover. The breaker opens on one failure here,
// so the ledger shows what the releases reported: the broken engine's
// breaker open, the healthy ones' closed (an ok, or none, never opens it).
func TestFailoverOffOneBrokenEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	const broken = 1
	for _, tc := range []struct {
		mode string
		want ledger.Outcome
	}{
		{"crash", ledger.OutcomeConnect},
		{"hang", ledger.OutcomeFirstByteTimeout},
		{"errors", ledger.OutcomeStatus5xx},
		{"unavailable", ledger.OutcomeStatus5xx},
		{"reset", ledger.OutcomeReset},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			rig := startFailoverRig(t, 3, "{failures: 1, cooldown: 10m}")
			rig.breakEngine(t, broken, tc.mode)
			results := rig.load(t, foClients)
			for _, r := range results {
				switch {
				case r.err != nil || r.status != http.StatusOK:
					t.Errorf("request: %d %v %s, want 200", r.status, r.err, tail(r.body, 300))
				case r.engine == fmt.Sprintf("gpu-%d", broken):
					t.Errorf("answered by the broken gpu-%d", broken)
				case r.stream && !strings.HasSuffix(strings.TrimSpace(r.body), "data: [DONE]"):
					t.Errorf("stream did not end with [DONE]: %s", tail(r.body, 300))
				}
				// The bound: a hung engine costs a request one
				// first-byte timeout at most, never two.
				if r.elapsed >= 2*foFirstByte {
					t.Errorf("a request took %s, two first-byte timeouts (%s) or more", r.elapsed, foFirstByte)
				}
			}
			got, fo := rig.outcomes(t), rig.failovers(t)
			var oks, failures float64
			for k, v := range got {
				engine, outcome := k[0], ledger.Outcome(k[1])
				switch {
				case outcome == ledger.OutcomeOK && engine != fmt.Sprintf("gpu-%d", broken):
					oks += v
				case outcome == tc.want && engine == fmt.Sprintf("gpu-%d", broken):
					failures += v
				default:
					t.Errorf("%v dispatches to %s came to %q; want ok on the healthy engines and %q on gpu-%d", v, engine, outcome, tc.want, broken)
				}
			}
			n := float64(len(results))
			if oks != n {
				t.Errorf("%v dispatches answered ok, want one per request (%v)", oks, n)
			}
			if failures < 1 {
				t.Errorf("no dispatch went to the broken gpu-%d: the test did not exercise failover (outcomes %v)", broken, got)
			}
			if fo[string(tc.want)] != failures || len(fo) != 1 {
				t.Errorf("failovers %v, want %v with reason %s (one per failed dispatch)", fo, failures, tc.want)
			}
			t.Logf("%s: %v requests, %v failed over from gpu-%d (%s)", tc.mode, n, failures, broken, tc.want)
			skip := -1
			if tc.mode == "crash" {
				skip = broken
			}
			rig.checkCapacity(t, skip)
			rig.waitNoLeases(t) // a failed attempt's lease goes back --abort-grace after it failed
			want := map[string]string{"gpu-0": "closed", "gpu-1": "open", "gpu-2": "closed"}
			if got := rig.breakers(t); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("breakers in the ledger %v, want %v", got, want)
			}
		})
	}
}

// Every engine is broken, each its own way: each request is tried on all
// three (--failover-attempts 3), once each, and answered with its last
// attempt's failure: 502 or 504 naming the engine by id, never its URL, or
// the engine's own 500 passed through. The hung engine costs one
// first-byte timeout. The breaker is off: it would take the engines out.
func TestFailoverEveryAttemptFails(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	rig := startFailoverRig(t, 3, "{failures: -1}")
	rig.breakEngine(t, 0, "crash")
	rig.breakEngine(t, 1, "hang")
	rig.breakEngine(t, 2, "errors")
	// Fewer clients than the hung engine has slots: its leases, held a
	// first-byte timeout each, never make a request wait for capacity.
	results := rig.load(t, foSlots-1)
	for _, r := range results {
		if r.err != nil {
			t.Fatalf("request: %v", r.err)
		}
		code, _ := errCode([]byte(r.body))
		switch {
		case r.status == http.StatusBadGateway && code == "upstream_error":
		case r.status == http.StatusGatewayTimeout && code == "upstream_timeout":
		case r.status == http.StatusInternalServerError && code == "injected_failure":
		default:
			t.Errorf("answer %d %q, want 502 upstream_error, 504 upstream_timeout or the engine's 500", r.status, code)
		}
		for _, e := range rig.engines {
			if strings.Contains(r.body, e.addr) {
				t.Errorf("answer names an engine's address %s: %s", e.addr, r.body)
			}
		}
		if r.elapsed >= 2*foFirstByte {
			t.Errorf("a request took %s, two first-byte timeouts (%s) or more", r.elapsed, foFirstByte)
		}
	}
	n := float64(len(results))
	got := rig.outcomes(t)
	want := map[[2]string]float64{
		{"gpu-0", "connect_error"}:      n,
		{"gpu-1", "first_byte_timeout"}: n,
		{"gpu-2", "status_5xx"}:         n,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("dispatch outcomes %v, want %v (each request on every engine once)", got, want)
	}
	var fo float64
	for _, v := range rig.failovers(t) {
		fo += v
	}
	if fo != 2*n {
		t.Errorf("%v failovers, want 2 per request (%v)", fo, 2*n)
	}
	rig.checkCapacity(t, 0)
	rig.waitNoLeases(t)
}

// --failover-attempts 1 turns failover off: a request given to the engine
// answering 500 gets that 500, and is counted with its outcome.
func TestFailoverOff(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	rig := startFailoverRig(t, 1, "{failures: -1}")
	rig.breakEngine(t, 1, "errors")
	results := rig.load(t, foClients)
	var failed float64
	for _, r := range results {
		switch {
		case r.err == nil && r.status == http.StatusOK:
		case r.err == nil && r.status == http.StatusInternalServerError:
			failed++
		default:
			t.Errorf("request: %d %v %s, want 200 or the engine's 500", r.status, r.err, tail(r.body, 300))
		}
	}
	if failed == 0 {
		t.Fatalf("no request went to the failing gpu-1: the test did not exercise it")
	}
	if got := rig.outcomes(t)[[2]string{"gpu-1", "status_5xx"}]; got != failed {
		t.Errorf("gpu-1 status_5xx dispatches %v, want %v (one per 500 answered)", got, failed)
	}
	if fo := rig.failovers(t); len(fo) != 0 {
		t.Errorf("failovers %v with --failover-attempts 1, want none", fo)
	}
	rig.waitNoLeases(t)
}

// A stream the engine cuts after its first chunk reached the client is
// not failed over: it ends with an error event naming the engine, no
// second answer follows, and the dispatch is counted as a reset, which
// opened the engine's breaker (one failure opens it here).
func TestFailoverNeverAfterBytesReachedClient(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	rig := startFailoverRig(t, 3, "{failures: 1, cooldown: 10m}")
	body := `{"model":"m","prompt":"a long story","max_tokens":1500,"ignore_eos":true,"stream":true}`
	req, _ := http.NewRequest(http.MethodPost, rig.router.url()+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-acme")
	resp, err := rig.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	engine := resp.Header.Get("X-Leasehold-Engine")
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); resp.StatusCode != http.StatusOK || err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("stream: %d %q %v, want a first chunk", resp.StatusCode, line, err)
	}
	i := -1
	for j := range rig.engines {
		if engine == fmt.Sprintf("gpu-%d", j) {
			i = j
		}
	}
	if i < 0 {
		t.Fatalf("X-Leasehold-Engine %q names no engine", engine)
	}
	rig.breakEngine(t, i, "abort")
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("reading the rest: %v", err)
	}
	events := strings.Split(strings.TrimSpace(string(rest)), "\n\n")
	last := events[len(events)-1]
	if code, _ := errCode([]byte(strings.TrimPrefix(last, "data: "))); code != "upstream_error" || !strings.Contains(last, engine) {
		t.Errorf("last event %q, want an upstream_error event naming %s", last, engine)
	}
	if strings.Contains(string(rest), "[DONE]") || strings.Count(string(rest), `"error"`) != 1 {
		t.Errorf("after the cut: %s; want one error event and nothing more", tail(string(rest), 500))
	}
	if got := rig.outcomes(t); got[[2]string{engine, "reset"}] != 1 || len(got) != 1 {
		t.Errorf("dispatch outcomes %v, want one reset on %s", got, engine)
	}
	if fo := rig.failovers(t); len(fo) != 0 {
		t.Errorf("failovers %v, want none once a chunk reached the client", fo)
	}
	rig.waitNoLeases(t)
	if got := rig.breakers(t)[engine]; got != "open" {
		t.Errorf("%s's breaker %s after the reset, want open", engine, got)
	}
}
