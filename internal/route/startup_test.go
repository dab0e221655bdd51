package route

// Issue 15, items 4 and 5, against real router processes: a router on a
// memory:// ledger of its own is refused unless a test says so; SIGTERM
// ends a router whose ledger is down, and at steady state still shuts
// down in order (SIGHUP reloads: tenancy_test.go); and an engine that
// fails shows clients its id, never its URL.

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/fleetapply"
	"github.com/leasehold/leasehold/internal/freeport"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/remote"
	"github.com/leasehold/leasehold/internal/testutil/blackhole"
)

// routerExitBound is how soon after SIGTERM a router must have exited
// when nothing it waits for can hold it: its ledger calls end with the
// cancel (gRPC) and it has no request in flight.
const routerExitBound = 3 * time.Second

// startupTail ends the fleet files of these tests: one tenant, and no
// recovery window, so a fresh ledger grants at once.
const startupTail = "tenants:\n  - {name: acme, api_keys: [\"sk-acme\"], kv_share: 1}\nlease:\n  recovery_window: 0s\n"

// TestMemoryLedgerNeedsTestFlag: --ledger memory:// is refused, naming
// the flag that allows it, why, and the shared ledgers to use instead,
// unless --test-memory-ledger (or its variable) says it is a test; the
// baseline (local admission) opens no ledger and is not concerned.
func TestMemoryLedgerNeedsTestFlag(t *testing.T) {
	base := []string{"--config", "f.yaml", "--id", "r1"}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr []string // empty: accepted
	}{
		{name: "memory refused", args: []string{"--ledger", "memory://"},
			wantErr: []string{`--ledger = "memory://"`, "--test-memory-ledger", "LEASEHOLD_TEST_MEMORY_LEDGER", "admits the whole fleet",
				"grpc://", "redis://", "etcd://"}},
		{name: "memory from the environment refused", env: map[string]string{"LEASEHOLD_LEDGER": "memory://"},
			wantErr: []string{"--test-memory-ledger"}},
		{name: "memory with the test flag", args: []string{"--ledger", "memory://", "--test-memory-ledger"}},
		{name: "memory with the test variable", args: []string{"--ledger", "memory://"}, env: map[string]string{"LEASEHOLD_TEST_MEMORY_LEDGER": "true"}},
		{name: "a reserver", args: []string{"--ledger", "grpc://reserver:7400"}},
		{name: "redis", args: []string{"--ledger", "redis://127.0.0.1:6380/0"}},
		{name: "local admission", args: []string{"--admission", "local", "--ledger", "memory://"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			_, err := ParseFlags(append(append([]string(nil), base...), tc.args...), lookup, &strings.Builder{})
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("ParseFlags = %v, want nil", err)
				}
				return
			}
			for _, w := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("ParseFlags = %v, want an error containing %q", err, w)
				}
			}
		})
	}
}

// TestRouterProcessMemoryLedger: the router binary on memory:// without
// the test flag exits with status 2 naming it; with it, it starts, warns,
// and serves.
func TestRouterProcessMemoryLedger(t *testing.T) {
	engine := startEngine(t, "gpu-0", engineOpts{kv: 4096, slots: 8, speed: 1, output: 16})
	fleetPath := fleetYAML(t, []*proc{engine}, 4096, 8, startupTail)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "router"), "--ledger", "memory://", "--config", fleetPath,
		"--listen", "127.0.0.1:0", "--id", "r1")
	cmd.Env = withoutLeaseholdEnv()
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), "--test-memory-ledger") {
		t.Errorf("router on memory://: exit %d (%v), output %q; want exit 2 naming --test-memory-ledger", code, err, out)
	}

	addr := freeport.AddrT(t)
	r := startProcEnv(t, "router", "router", addr, withoutLeaseholdEnv(), "--ledger", "memory://", "--test-memory-ledger",
		"--config", fleetPath, "--listen", addr, "--id", "r1", "--max-model-len", "2048")
	waitHTTP(t, r.url()+"/readyz", 15*time.Second)
	waitLog(t, r, "--test-memory-ledger: THIS ROUTER'S LEDGER IS ITS OWN", time.Second)
	client := &http.Client{Timeout: 10 * time.Second}
	if status, _, body, err := post(ctx, client, r.url()+"/v1/completions", "sk-acme",
		map[string]any{"model": "m", "prompt": "hi", "max_tokens": 8}); err != nil || status != http.StatusOK {
		t.Errorf("request: %d %s (%v), want 200", status, body, err)
	}
}

// TestUpstreamFailureHidesEngineURL: a request to an engine that cannot
// be reached is answered 502 upstream_error naming the engine's id, and
// neither its URL nor its host:port (the red team read them in 502
// bodies); the router's log has both. An engine that dies in the middle
// of a stream ends it with an error event that shows neither.
func TestUpstreamFailureHidesEngineURL(t *testing.T) {
	down := "http://" + freeport.AddrT(t) // nothing listens there
	alive := startEngine(t, "gpu-1", engineOpts{kv: 4096, slots: 8, speed: 1, output: 2000})
	fleetPath := filepath.Join(t.TempDir(), "fleet.yaml")
	writeFleet(t, fleetPath, "pools:\n"+
		"  - name: down\n    engines:\n      - {id: gpu-0, url: \""+down+"\", kv_tokens: 4096, slots: 8, stale_after: 0s}\n"+
		"  - name: m\n    engines:\n      - {id: gpu-1, url: \""+alive.url()+"\", kv_tokens: 4096, slots: 8, stale_after: 0s}\n"+
		startupTail)
	addr := freeport.AddrT(t)
	r := startProcEnv(t, "router", "router", addr, withoutLeaseholdEnv(), "--ledger", "memory://", "--test-memory-ledger",
		"--config", fleetPath, "--listen", addr, "--id", "r1", "--max-model-len", "2048")
	waitHTTP(t, r.url()+"/readyz", 15*time.Second)
	client := &http.Client{Timeout: 20 * time.Second}
	hostPort := strings.TrimPrefix(down, "http://")
	hidden := func(t *testing.T, body string, urls ...string) {
		t.Helper()
		for _, u := range urls {
			if host := strings.TrimPrefix(u, "http://"); strings.Contains(body, host) {
				t.Errorf("the answer shows the engine's address %s: %s", u, body)
			}
		}
	}

	for _, stream := range []bool{false, true} {
		status, _, body, err := post(t.Context(), client, r.url()+"/v1/chat/completions", "sk-acme", map[string]any{
			"model": "down", "max_tokens": 8, "stream": stream, "messages": []map[string]string{{"role": "user", "content": "hi"}}})
		if err != nil {
			t.Fatal(err)
		}
		if code, _ := errCode(body); status != http.StatusBadGateway || code != "upstream_error" || !strings.Contains(string(body), "gpu-0") {
			t.Errorf("stream %v: %d %s, want 502 upstream_error naming gpu-0", stream, status, body)
		}
		hidden(t, string(body), down)
	}
	waitLog(t, r, hostPort, 2*time.Second)
	if !strings.Contains(r.out.String(), "upstream engine failed") || !strings.Contains(r.out.String(), "url="+down) {
		t.Errorf("the router's log does not name the failed engine's URL %s", down)
	}

	// Mid-stream: the engine dies after the first events.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	type result struct {
		status int
		body   []byte
		err    error
	}
	resC := make(chan result, 1)
	go func() {
		status, _, body, err := post(ctx, client, r.url()+"/v1/completions", "sk-acme",
			map[string]any{"model": "m", "prompt": "a long answer", "max_tokens": 1500, "ignore_eos": true, "stream": true})
		resC <- result{status, body, err}
	}()
	waitStats(t, alive.url(), func(s engineStats) bool { return s.AcceptedRequests > 0 })
	time.Sleep(200 * time.Millisecond) // some events are on their way
	if err := alive.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	res := <-resC
	if res.err != nil || res.status != http.StatusOK || !strings.Contains(string(res.body), `"code":"upstream_error"`) {
		t.Fatalf("stream cut by the engine: %d (%v) %s; want 200 ending with an upstream_error event", res.status, res.err, tail(string(res.body), 500))
	}
	hidden(t, string(res.body), alive.url())
}

func writeFleet(t *testing.T, path, yaml string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitStats polls an engine's ground truth until ok holds.
func waitStats(t *testing.T, engineURL string, ok func(engineStats) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(getStats(t, engineURL)) {
		if time.Now().After(deadline) {
			t.Fatalf("engine %s: condition not met within 10s", engineURL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRouterSIGTERMWhileLedgerDown: SIGTERM about 2s after the start ends
// a router whose ledger is down or hung (it serves unready meanwhile,
// retrying with bounded calls) within a bound, with status 0.
func TestRouterSIGTERMWhileLedgerDown(t *testing.T) {
	engine := startEngine(t, "gpu-0", engineOpts{kv: 4096, slots: 8, speed: 1, output: 16})
	fleetPath := fleetYAML(t, []*proc{engine}, 4096, 8, startupTail)
	closed, hole := freeport.AddrT(t), blackhole.Start(t)
	for _, tc := range []struct {
		name, ledger string
		bound        time.Duration
	}{
		{"reserver on a closed port", "grpc://" + closed, routerExitBound},
		{"reserver that never answers", "grpc://" + hole.Addr(), routerExitBound},
		// go-redis cannot cancel a read in flight: a call ends at its own
		// deadline, the longest being the fleet applier's.
		{"redis that never answers", "redis://" + hole.Addr() + "/0", fleetapply.CallTimeout + time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := freeport.AddrT(t)
			r := startProcEnv(t, "router", "router", addr, withoutLeaseholdEnv(), "--ledger", tc.ledger,
				"--config", fleetPath, "--listen", addr, "--id", "r1", "--max-model-len", "2048")
			waitHTTP(t, r.url()+"/healthz", 10*time.Second)
			if resp, err := http.Get(r.url() + "/readyz"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("/readyz with the ledger down: %v %v, want 503", resp, err)
			} else {
				resp.Body.Close()
			}
			time.Sleep(2 * time.Second)
			sigtermWithin(t, r, tc.bound)
		})
	}
}

// sigtermWithin sends SIGTERM and fails t unless p exits within bound
// with status 0.
func sigtermWithin(t *testing.T, p *proc, bound time.Duration) {
	t.Helper()
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("%s: exit status %d after SIGTERM, want 0", p.name, code)
		}
		t.Logf("%s exited %s after SIGTERM", p.name, time.Since(sent).Round(time.Millisecond))
	case <-time.After(bound):
		t.Fatalf("%s still running %s after SIGTERM", p.name, bound)
	}
}

// TestRouterSIGTERMInOrder: at steady state, on a reserver, SIGTERM turns
// the router unready, lets the stream in flight finish whole, releases
// its lease and exits 0.
func TestRouterSIGTERMInOrder(t *testing.T) {
	env := append(withoutLeaseholdEnv(), "LEASEHOLD_TOKEN=tok")
	engine := startEngine(t, "gpu-0", engineOpts{kv: 4096, slots: 8, speed: 1, output: 16})
	fleetPath := fleetYAML(t, []*proc{engine}, 4096, 8, startupTail)
	grpcAddr, httpAddr := freeport.AddrT(t), freeport.AddrT(t)
	reserver := startProcEnv(t, "reserver", "reserver", httpAddr, env, "--config", fleetPath,
		"--grpc-listen", grpcAddr, "--http-listen", httpAddr, "--log-level", "warn")
	waitHTTP(t, reserver.url()+"/readyz", 10*time.Second)
	addr := freeport.AddrT(t)
	r := startProcEnv(t, "router", "router", addr, env, "--ledger", "grpc://"+grpcAddr,
		"--config", fleetPath, "--listen", addr, "--id", "r1", "--max-model-len", "2048")
	waitHTTP(t, r.url()+"/readyz", 15*time.Second)
	audit, err := remote.Dial("grpc://"+grpcAddr, remote.Options{Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = audit.Close() })

	client := &http.Client{Timeout: 30 * time.Second}
	type result struct {
		status int
		body   []byte
		err    error
	}
	resC := make(chan result, 1)
	go func() {
		// About 2s of output at the engine's 50 tokens/s.
		status, _, body, err := post(t.Context(), client, r.url()+"/v1/completions", "sk-acme",
			map[string]any{"model": "m", "prompt": "count slowly", "max_tokens": 100, "ignore_eos": true, "stream": true})
		resC <- result{status, body, err}
	}()
	waitStats(t, engine.url(), func(s engineStats) bool { return s.AcceptedRequests > 0 })
	if ls, err := audit.List(t.Context(), ledger.Filter{Pool: "m"}); err != nil || len(ls) != 1 {
		t.Fatalf("leases in flight = %v (%v), want 1", ls, err)
	}
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	readyz := func() int {
		resp, err := http.Get(r.url() + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// Unready first, while the stream (about 2s) is still in flight.
	var res result
	for unready := false; !unready; {
		select {
		case res = <-resC:
			t.Fatalf("the stream ended (%d) while /readyz still answered 200 after SIGTERM", res.status)
		default:
		}
		unready = readyz() != http.StatusOK
		time.Sleep(10 * time.Millisecond)
	}
	res = <-resC
	if res.err != nil || res.status != http.StatusOK || !strings.Contains(string(res.body), "data: [DONE]") {
		t.Errorf("stream in flight at SIGTERM: %d (%v) %s; want it whole", res.status, res.err, tail(string(res.body), 300))
	}
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("router still running 10s after its last request finished")
	}
	if code := r.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
	if ls, err := audit.List(t.Context(), ledger.Filter{Pool: "m"}); err != nil || len(ls) != 0 {
		t.Errorf("leases after the router stopped = %v (%v), want none", ls, err)
	}
	out := r.out.String()
	if i, j := strings.Index(out, "shutting down"), strings.Index(out, "msg=stopped"); i < 0 || j < i {
		t.Errorf("log lacks \"shutting down\" then \"stopped\": %s", tail(out, 2000))
	}
}
