package deploy

// The real components, started as processes on loopback, to learn what
// they export and which flags they take.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/leasehold/leasehold/internal/freeport"
	"github.com/leasehold/leasehold/internal/testutil/gobuild"
	"github.com/leasehold/leasehold/internal/testutil/syncbuf"
)

// bins are built once per test process.
var bins gobuild.Once

// buildBinaries builds reserver, router and enginesim (without the race
// detector: they are the programs the images ship) into a temporary
// directory shared by the tests of this process.
func buildBinaries(t *testing.T) string {
	t.Helper()
	return bins.Dir(t, func(dir string) error {
		const mod = "github.com/leasehold/leasehold/"
		return gobuild.Go(dir, []string{"CGO_ENABLED=0"}, mod+"cmd/reserver", mod+"cmd/router", mod+"cmd/enginesim", mod+"deploy/probe")
	})
}

// proc is a started component; its stderr is kept for failure messages.
type proc struct {
	name           string
	cmd            *exec.Cmd
	syncbuf.Buffer // the process's output
	done           chan struct{}
}

func (p *proc) output() string { return p.String() }

// start runs bin with args and env (added to a minimal environment) and
// stops it with SIGTERM (then SIGKILL) at cleanup.
func start(t *testing.T, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- %s output ---\n%s", name, p.output())
		}
	})
	return p
}

// waitHTTP polls url until it answers 200, the process exits or the
// deadline passes.
func waitHTTP(t *testing.T, p *proc, url string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited before %s answered:\n%s", p.name, url, p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s not ready within %s (last error %v)\n%s", p.name, url, within, err, p.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// family is what a scrape says about one metric name.
type family struct {
	typ    dto.MetricType
	labels map[string]bool // every label name seen on a sample
	values map[string]bool // every name=value pair seen on a sample
}

// scrape reads a Prometheus text exposition into families by name.
func scrape(t *testing.T, url string) map[string]family {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	out := make(map[string]family, len(mfs))
	for name, mf := range mfs {
		f := family{typ: mf.GetType(), labels: map[string]bool{}, values: map[string]bool{}}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				f.labels[l.GetName()] = true
				f.values[l.GetName()+"="+l.GetValue()] = true
			}
		}
		out[name] = f
	}
	return out
}

// flagsOf lists the flags a binary's --help prints ("  -name ...").
func flagsOf(t *testing.T, bin string) map[string]bool {
	t.Helper()
	out, _ := exec.Command(bin, "--help").CombinedOutput() // exit status varies with the flag package's handling
	flags := map[string]bool{}
	re := regexp.MustCompile(`^\s+-{1,2}([a-z0-9][a-z0-9-]*)`)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			flags[m[1]] = true
		}
	}
	if len(flags) == 0 {
		t.Fatalf("%s --help listed no flags:\n%s", bin, out)
	}
	return flags
}

// stack is one reserver, one router and two engines started for real.
type stack struct {
	reserver, router, engineVLLM, engineSGLang string // HTTP base URLs
	exported                                   map[string]family
	// idle is what they served once ready, before any request.
	idle map[string]family
}

const testFleet = `
pools:
  - name: p
    engines:
      - id: e-vllm
        url: http://%s
        format: vllm
        slots: 8
        stale_after: 5s
      - id: e-sglang
        url: http://%s
        format: sglang
        kv_tokens: 8192
        slots: 8
  - name: q
    engines:
      - id: e-dead
        url: http://%s
        format: tgi
        kv_tokens: 1024
        slots: 1
        stale_after: 1s
        stale_policy: block
tenants:
  - name: t
    api_keys: ["sk-deploy-test"]
    kv_share: 1
  - name: tiny
    api_keys: ["sk-deploy-tiny"]
    kv_share: 0.25
priorities:
  - {name: interactive, max_fill: 0.95}
  - {name: batch, max_fill: 0.5}
lease:
  session_ttl: 2s
  recovery_window: 0s
`

// scrapeAll merges every /metrics the stack serves.
func (s *stack) scrapeAll(t *testing.T) map[string]family {
	t.Helper()
	out := map[string]family{}
	for _, u := range []string{s.reserver, s.router, s.engineVLLM, s.engineSGLang} {
		for name, f := range scrape(t, u+"/metrics") {
			if old, ok := out[name]; ok {
				maps.Copy(f.labels, old.labels)
				maps.Copy(f.values, old.values)
			}
			out[name] = f
		}
	}
	return out
}

// startStack starts the components, sends a few requests through the
// router (a grant, a stream, a long stream, a queued quota rejection) and
// lets the reserver fail to scrape an engine that is not there, so that
// labelled series exist, and merges every /metrics they serve.
func startStack(t *testing.T) *stack {
	t.Helper()
	bin := buildBinaries(t)
	eV, eS := freeport.AddrT(t), freeport.AddrT(t)
	engV := start(t, "enginesim-vllm", filepath.Join(bin, "enginesim"), nil,
		"--listen", eV, "--kv-tokens", "16384", "--slots", "8", "--format", "vllm", "--model", "p", "--output-tokens", "2000")
	engS := start(t, "enginesim-sglang", filepath.Join(bin, "enginesim"), nil,
		"--listen", eS, "--kv-tokens", "8192", "--slots", "8", "--format", "sglang", "--model", "p", "--output-tokens", "2000")
	waitHTTP(t, engV, "http://"+eV+"/health", 20*time.Second)
	waitHTTP(t, engS, "http://"+eS+"/health", 20*time.Second)

	fleetFile := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(fleetFile, fmt.Appendf(nil, testFleet, eV, eS, freeport.AddrT(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	rg, rh := freeport.AddrT(t), freeport.AddrT(t)
	res := start(t, "reserver", filepath.Join(bin, "reserver"), nil,
		"--ledger", "memory://", "--config", fleetFile, "--grpc-listen", rg, "--http-listen", rh,
		"--reconcile-interval", "200ms")
	waitHTTP(t, res, "http://"+rh+"/readyz", 30*time.Second)

	ra := freeport.AddrT(t)
	rt := start(t, "router", filepath.Join(bin, "router"), nil,
		"--ledger", "grpc://"+rg, "--config", fleetFile, "--listen", ra, "--id", "deploy-test", "--queue-depth", "4", "--queue-timeout", "300ms", "--queue-quota")
	waitHTTP(t, rt, "http://"+ra+"/readyz", 30*time.Second)

	s := &stack{reserver: "http://" + rh, router: "http://" + ra, engineVLLM: "http://" + eV, engineSGLang: "http://" + eS}
	s.idle = s.scrapeAll(t)
	post := func(key, body string) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.router+"/v1/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST /v1/completions: %v", err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if code := post("sk-deploy-test", `{"model":"p","prompt":"hello","max_tokens":8}`); code != http.StatusOK {
		t.Fatalf("completion: status %d, want 200", code)
	}
	if code := post("sk-deploy-test", `{"model":"p","prompt":"hello","max_tokens":8,"stream":true}`); code != http.StatusOK {
		t.Fatalf("streamed completion: status %d, want 200", code)
	}
	// A long stream holds most of tenant tiny's quota while a second
	// request of tiny waits in the queue and is refused: queue and quota
	// series exist.
	holdCtx, release := context.WithCancel(context.Background())
	t.Cleanup(release)
	hold, _ := http.NewRequestWithContext(holdCtx, http.MethodPost, s.router+"/v1/completions",
		strings.NewReader(`{"model":"p","prompt":"hold","max_tokens":4000,"stream":true}`))
	hold.Header.Set("Authorization", "Bearer sk-deploy-tiny")
	resp, err := http.DefaultClient.Do(hold)
	if err != nil {
		t.Fatalf("holding request: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("holding request: status %d, want 200", resp.StatusCode)
	}
	if code := post("sk-deploy-tiny", `{"model":"p","prompt":"hello","max_tokens":2000}`); code != http.StatusTooManyRequests {
		t.Errorf("request over tenant quota: status %d, want 429", code)
	}

	// The reconciler needs a round or two before drift and observation
	// gauges exist.
	deadline := time.Now().Add(20 * time.Second)
	for {
		s.exported = s.scrapeAll(t)
		_, drift := s.exported["leasehold_reconcile_drift_kv_tokens"]
		_, scrapeErrs := s.exported["leasehold_reconcile_scrape_errors_total"]
		if drift && scrapeErrs || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return s
}

// TestMain removes the binaries buildBinaries made.
func TestMain(m *testing.M) {
	code := m.Run()
	bins.Remove()
	os.Exit(code)
}
