package main_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"
	"github.com/leasehold/leasehold/internal/testutil/gobuild"
	"github.com/leasehold/leasehold/internal/testutil/hostile"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
	"github.com/leasehold/leasehold/internal/testutil/syncbuf"
)

// binDir holds the router, enginesim and reserver binaries TestMain built.
var binDir string

func TestMain(m *testing.M) { gobuild.Main(m, &binDir, ".", "../enginesim", "../reserver") }

// The bound: with 300 slow or idle connections held, /readyz and a
// legitimate request answer within 1s.
const answerBound = time.Second

// hostileTimeout is every --http-*-timeout of the router under attack;
// closeAllowance is how much later than its timeout a hostile connection
// may be seen closed (scheduling on a loaded machine).
const (
	hostileTimeout = 2 * time.Second
	closeAllowance = time.Second
)

// TestHostileClientsCannotStall is the red team's issue 15, item 3, on a
// router process limited to 256 file descriptors (RLIMIT_NOFILE): 300
// connections that trickle a body one byte at a time (without a key, and
// with a valid one), trickle their headers, idle after a probe, or
// announce a longer body than they send (with a valid key). Before, the router read the body before the key
// mattered, set no body or idle timeout and no connection limit: /readyz
// and a legitimate request timed out. Now, in each case, both answer
// within 1s while the connections are held, and every hostile connection
// is closed within its timeout (at once when refused or shed).
func TestHostileClientsCannotStall(t *testing.T) {
	engine := startProc(t, "enginesim", nil, filepath.Join(binDir, "enginesim"), "--listen", freeport.AddrT(t),
		"--kv-tokens", "200000", "--slots", "64", "--model", "m", "--max-model-len", "2048", "--speed", "1000", "--output-tokens", "8")
	waitHTTP(t, "http://"+engine.addr+"/health")
	rs := redisserver.Start(t)
	fleetPath := filepath.Join(t.TempDir(), "fleet.yaml")
	fleetYAML := fmt.Sprintf(`pools:
  - name: m
    engines:
      - {id: gpu-0, url: "http://%s", kv_tokens: 200000, slots: 64, stale_after: 0s}
tenants:
  - {name: acme, api_keys: ["sk-acme"], kv_share: 1}
lease:
  session_ttl: 3s
  recovery_window: 0s
`, engine.addr)
	if err := os.WriteFile(fleetPath, []byte(fleetYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	to := hostileTimeout.String()
	router := startProc(t, "router", []string{"ulimit -n 256"}, filepath.Join(binDir, "router"), "--ledger", "redis://"+rs.Addr()+"/0",
		"--config", fleetPath, "--listen", freeport.AddrT(t), "--id", "r1", "--http-read-header-timeout", to,
		"--http-body-timeout", to, "--http-idle-timeout", to, "--http-write-timeout", to)
	base := "http://" + router.addr
	waitHTTP(t, base+"/readyz")
	if got := openFileLimit(t, router.cmd.Process.Pid); got != 256 {
		t.Fatalf("the router runs with RLIMIT_NOFILE %d, want 256", got)
	}
	if !strings.Contains(router.out.String(), "max_conns=96") {
		t.Errorf("the router's log does not show the connection limit derived from 256 descriptors (96):\n%s", router.out.String())
	}

	chatPath, key := "/v1/chat/completions", "Authorization: Bearer sk-acme\r\n"
	for _, tc := range []struct {
		name   string
		attack hostile.Attack
		// bound is when every hostile connection must be closed.
		bound time.Duration
		// allowed is the status a hostile connection may be answered (0:
		// none, shed unanswered, is always allowed).
		allowed int
	}{
		{"body one byte at a time, no key", hostile.Attack{Kind: hostile.TrickleBody, Path: chatPath}, hostileTimeout, http.StatusUnauthorized},
		{"body one byte at a time, valid key", hostile.Attack{Kind: hostile.TrickleBody, Path: chatPath, Header: key}, hostileTimeout, http.StatusBadRequest},
		{"headers one byte at a time", hostile.Attack{Kind: hostile.TrickleHeaders, Path: chatPath}, hostileTimeout, http.StatusBadRequest},
		{"idle keep-alive", hostile.Attack{Kind: hostile.IdleKeepAlive, Path: "/healthz"}, hostileTimeout, http.StatusOK},
		{"Content-Length longer than the body, valid key", hostile.Attack{Kind: hostile.ShortBody, Path: chatPath, Header: key}, hostileTimeout, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := hostile.Start(router.addr, 300, tc.attack)
			held := run.Open()
			var slowest time.Duration
			for i := range 3 {
				slowest = max(slowest, legitimate(t, base, i))
			}
			t.Logf("%d of 300 hostile connections open when the legitimate requests began; the slowest answered in %s", held, slowest)
			run.Wait(tc.bound + closeAllowance)
			for i, c := range run.Stop() {
				switch {
				case c.DialErr != nil:
					t.Errorf("hostile connection %d: could not connect: %v", i, c.DialErr)
				case !c.ClosedBy:
					t.Errorf("hostile connection %d: still open %s after it began, want closed within %s", i, c.ClosedAfter, tc.bound)
				case c.ClosedAfter > tc.bound+closeAllowance:
					t.Errorf("hostile connection %d: closed %s after it began, want within %s (+%s allowance)", i, c.ClosedAfter, tc.bound, closeAllowance)
				case c.Status != 0 && c.Status != tc.allowed:
					t.Errorf("hostile connection %d: answered %d, want %d or nothing", i, c.Status, tc.allowed)
				}
			}
		})
	}
	shed := metricSum(t, base+"/metrics", "leasehold_http_connections_shed_total")
	if shed == 0 {
		t.Error("leasehold_http_connections_shed_total = 0: 300 connections against a limit of 96 shed none")
	}
	t.Logf("connections shed: %v", shed)
}

// legitimate checks that /readyz and an authenticated chat request, each
// on a new connection, answer 200 within the bound, and returns
// the slower one's time.
func legitimate(t *testing.T, base string, round int) (slowest time.Duration) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	for _, req := range []func() (*http.Request, error){
		func() (*http.Request, error) { return http.NewRequest(http.MethodGet, base+"/readyz", nil) },
		func() (*http.Request, error) {
			r, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
				strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":8}`))
			if err == nil {
				r.Header.Set("Authorization", "Bearer sk-acme")
				r.Header.Set("Content-Type", "application/json")
			}
			return r, err
		},
	} {
		r, err := req()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		resp, err := client.Do(r)
		var body []byte
		if err == nil {
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		took := time.Since(start)
		slowest = max(slowest, took)
		switch {
		case err != nil:
			t.Errorf("round %d: %s %s: %v after %s", round, r.Method, r.URL.Path, err, took)
		case resp.StatusCode != http.StatusOK:
			t.Errorf("round %d: %s %s: %d %s", round, r.Method, r.URL.Path, resp.StatusCode, body)
		case took > answerBound:
			t.Errorf("round %d: %s %s answered in %s, want within %s", round, r.Method, r.URL.Path, took, answerBound)
		}
	}
	return slowest
}

// proc is a process run by a test.
type proc struct {
	addr string
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
}

// startProc runs bin with args (the value after --listen is its address)
// through sh, after the shell commands pre (e.g. "ulimit -n 256"), with no
// LEASEHOLD_ variable of this environment; it is stopped at cleanup and
// its output shown if the test failed.
func startProc(t *testing.T, name string, pre []string, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{out: &syncbuf.Buffer{}}
	for i, a := range args {
		if a == "--listen" {
			p.addr = args[i+1]
		}
	}
	script := strings.Join(append(pre, `exec "$0" "$@"`), " && ")
	p.cmd = exec.Command("sh", append([]string{"-c", script, bin}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			out := p.out.String()
			t.Logf("--- %s output (last 3000 bytes):\n%s", name, out[max(0, len(out)-3000):])
		}
	})
	return p
}

// waitHTTP polls url until it answers 200.
func waitHTTP(t *testing.T, url string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := client.Get(url); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("%s did not answer 200 within 20s", url)
}

// openFileLimit is process pid's soft RLIMIT_NOFILE, from /proc.
func openFileLimit(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				n, err := strconv.Atoi(f[0])
				if err == nil {
					return n
				}
			}
		}
	}
	t.Fatalf("no open files limit in /proc/%d/limits", pid)
	return 0
}

// metricSum is the sum of every sample of the metric name at url.
func metricSum(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
			f := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
			if len(f) > 0 {
				v, err := strconv.ParseFloat(f[0], 64)
				if err == nil {
					sum += v
				}
			}
		}
	}
	return sum
}
