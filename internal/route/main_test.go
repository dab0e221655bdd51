package route

import (
	"bytes"
	"context"
	"encoding/json"
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
	"github.com/leasehold/leasehold/internal/testutil/syncbuf"
)

// binDir holds the router, enginesim and reserver binaries built once by
// TestMain.
var binDir string

func TestMain(m *testing.M) {
	const cmd = "github.com/leasehold/leasehold/cmd/"
	gobuild.Main(m, &binDir, cmd+"router", cmd+"enginesim", cmd+"reserver")
}

// proc is a binary run by a test; its output goes to a buffer shown when
// the test fails.
type proc struct {
	name string
	addr string
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan struct{}
}

// startRouter builds and starts an in-process Router, shut down at
// cleanup. It does not wait for the router to be ready.
func startRouter(t testing.TB, cfg Config, opts Options) *Router {
	t.Helper()
	r, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.Shutdown(ctx)
	})
	return r
}

// startProc runs binary bin with args; addr is what it listens on.
func startProc(t testing.TB, name, bin, addr string, args ...string) *proc {
	t.Helper()
	return startProcEnv(t, name, bin, addr, nil, args...)
}

// startProcEnv is startProc with the environment env (nil: this process's).
func startProcEnv(t testing.TB, name, bin, addr string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, addr: addr, out: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(binDir, bin), args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(5 * time.Second)
		if t.Failed() {
			t.Logf("--- %s output (last 3000 bytes):\n%s", name, tail(p.out.String(), 3000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// stop sends SIGTERM and kills after grace.
func (p *proc) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) url() string { return "http://" + p.addr }

// withoutLeaseholdEnv returns this process's environment without any
// LEASEHOLD_ variable, so no token or flag of the caller's shell reaches a
// binary under test.
func withoutLeaseholdEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") {
			env = append(env, kv)
		}
	}
	return env
}

// waitHTTP polls url until it answers 200.
func waitHTTP(t testing.TB, url string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("%s did not answer 200 within %s", url, within)
}

// engineOpts configures a simulated engine process.
type engineOpts struct {
	kv, slots int
	speed     float64
	output    int // mean natural output length
	media     int // --media-tokens: prompt tokens per image (0: none taken)
}

func startEngine(t testing.TB, name string, o engineOpts) *proc {
	t.Helper()
	addr := freeport.AddrT(t)
	p := startProc(t, name, "enginesim", addr, "--listen", addr, "--kv-tokens", strconv.Itoa(o.kv), "--slots", strconv.Itoa(o.slots),
		"--speed", strconv.FormatFloat(o.speed, 'f', -1, 64), "--output-tokens", strconv.Itoa(o.output), "--model", "m", "--max-model-len", "2048",
		"--media-tokens", strconv.Itoa(o.media))
	waitHTTP(t, p.url()+"/health", 10*time.Second)
	return p
}

// engineStats is the subset of enginesim's ground truth the tests check.
type engineStats struct {
	KVCapacityTokens      int64   `json:"kv_capacity_tokens"`
	Slots                 int     `json:"slots"`
	PeakAdmittedDemand    int64   `json:"peak_admitted_demand_tokens"`
	PeakAcceptedRequests  int     `json:"peak_accepted_requests"`
	PeakAcceptedSequences int     `json:"peak_accepted_sequences"`
	AcceptedRequests      int     `json:"accepted_requests"`
	RequestsCompleted     int64   `json:"requests_completed"`
	RequestsAborted       int64   `json:"requests_aborted"`
	OverCapacitySeconds   float64 `json:"over_capacity_seconds"`
	PeakActualDemand      int64   `json:"peak_actual_demand_tokens"`
	Preemptions           int64   `json:"preemptions"`
}

func getStats(t testing.TB, engineURL string) engineStats {
	t.Helper()
	resp, err := http.Get(engineURL + "/admin/stats")
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	defer resp.Body.Close()
	var s engineStats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatalf("stats: %v", err)
	}
	return s
}

// fleetYAML writes a fleet file for one pool "m" over engines, each
// kvTokens and slots as configured, with extra appended verbatim.
func fleetYAML(t testing.TB, engines []*proc, kv, slots int, extra string) string {
	t.Helper()
	return fleetYAMLPool(t, engines, kv, slots, "", extra)
}

// fleetYAMLPool is fleetYAML with pool added to the pool's fields
// (indented as they are).
func fleetYAMLPool(t testing.TB, engines []*proc, kv, slots int, pool, extra string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("pools:\n  - name: m\n    retry_after: 200ms\n" + pool + "    engines:\n")
	for i, e := range engines {
		fmt.Fprintf(&b, "      - {id: gpu-%d, url: %q, kv_tokens: %d, slots: %d, stale_after: 0s}\n", i, e.url(), kv, slots)
	}
	b.WriteString(extra)
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// post sends an inference request and returns the status, headers and body.
func post(ctx context.Context, client *http.Client, url, key string, body any, hdr ...string) (int, http.Header, []byte, error) {
	var rd io.Reader
	switch b := body.(type) {
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, _ := json.Marshal(b)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data, err
}

// errCode returns the error code of an OpenAI-style error body.
func errCode(body []byte) (code, param string) {
	var e struct {
		Error struct {
			Code  string  `json:"code"`
			Param *string `json:"param"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	if e.Error.Param != nil {
		param = *e.Error.Param
	}
	return e.Error.Code, param
}
