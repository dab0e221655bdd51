package main_test

import (
	"fmt"
	"io"
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
	"github.com/leasehold/leasehold/internal/testutil/blackhole"
	"github.com/leasehold/leasehold/internal/testutil/syncbuf"
)

// exitBound is how soon after SIGTERM a reserver whose ledger does not
// answer must have exited: every ledger call of its start honours the
// cancel (etcd, a closed port).
const exitBound = 3 * time.Second

// hungRedisBound is that bound for a Redis that accepts connections and
// never answers: go-redis cannot cancel a read in flight, so a call ends
// at its own deadline (fleetapply.CallTimeout), never later.
const hungRedisBound = fleetapply.CallTimeout + time.Second

// proc is a binary a test runs; its output is kept for the checks and
// shown when the test fails.
type proc struct {
	cmd   *exec.Cmd
	out   syncbuf.Buffer
	doneC chan struct{} // closed when it exited
}

func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{doneC: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(binDir, bin), args...)
	p.cmd.Env = withoutLeaseholdEnv()
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.doneC) }()
	t.Cleanup(func() {
		select {
		case <-p.doneC:
		default:
			_ = p.cmd.Process.Kill()
			<-p.doneC
		}
		if t.Failed() {
			t.Logf("--- %s output:\n%s", bin, p.out.String())
		}
	})
	return p
}

// sigterm sends SIGTERM and fails t unless p exits within bound, with
// status 0.
func (p *proc) sigterm(t *testing.T, bound time.Duration) {
	t.Helper()
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.doneC:
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("exit status %d after SIGTERM, want 0", code)
		}
		t.Logf("exited %s after SIGTERM", time.Since(sent).Round(time.Millisecond))
	case <-time.After(bound):
		t.Fatalf("still running %s after SIGTERM", bound)
	}
}

func withoutLeaseholdEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") {
			env = append(env, kv)
		}
	}
	return env
}

// liveEngineFleet starts a simulated engine and writes a fleet file of one
// pool on it, scraped by the reserver (its first reconcile observes).
func liveEngineFleet(t *testing.T) string {
	t.Helper()
	addr := freeport.AddrT(t)
	start(t, "enginesim", "--listen", addr, "--kv-tokens", "10000", "--slots", "8")
	client := &http.Client{Timeout: time.Second}
	waitFor(t, func() bool {
		resp, err := client.Get("http://" + addr + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "enginesim /health")
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	yaml := strings.Replace(fleetYAML, `url: "http://127.0.0.1:1", kv_tokens: 10000, slots: 8, stale_after: 0s`,
		fmt.Sprintf(`url: "http://%s", kv_tokens: 10000, slots: 8, stale_after: 10s`, addr), 1)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSIGTERMWhileLedgerDown is issue 15's reproduction: a reserver whose
// etcd was down at start blocked in Start (the first reconcile's Observe
// had no deadline) and ignored SIGTERM for good. Now SIGTERM about 2s
// after the start, whatever the store does, ends it within a bound.
func TestSIGTERMWhileLedgerDown(t *testing.T) {
	fleetPath := liveEngineFleet(t)
	closed, hole := freeport.AddrT(t), blackhole.Start(t)
	for _, tc := range []struct {
		name, ledger string
		bound        time.Duration
	}{
		{"etcd on a closed port", "etcd://" + closed, exitBound},
		{"etcd that never answers", "etcd://" + hole.Addr(), exitBound},
		{"redis on a closed port", "redis://" + closed + "/0", exitBound},
		{"redis that never answers", "redis://" + hole.Addr() + "/0", hungRedisBound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := start(t, "reserver", "--ledger", tc.ledger, "--config", fleetPath,
				"--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0")
			time.Sleep(2 * time.Second)
			select {
			case <-p.doneC:
				t.Fatalf("exited before SIGTERM")
			default:
			}
			p.sigterm(t, tc.bound)
			if !strings.Contains(p.out.String(), "shutting down") {
				t.Errorf("no \"shutting down\" line in its log")
			}
		})
	}
}

// TestServesUnreadyWhileLedgerDown: past --startup-timeout a reserver
// whose ledger never answers serves anyway, unready (/readyz 503 naming
// the ledger, /healthz 200); it survives SIGHUP, whose reload then waits
// on the ledger, and SIGTERM during that reload still ends it within the
// bound.
func TestServesUnreadyWhileLedgerDown(t *testing.T) {
	fleetPath := liveEngineFleet(t)
	hole := blackhole.Start(t)
	httpAddr := freeport.AddrT(t)
	p := start(t, "reserver", "--ledger", "etcd://"+hole.Addr(), "--config", fleetPath,
		"--grpc-listen", "127.0.0.1:0", "--http-listen", httpAddr, "--startup-timeout", "1s")
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) (int, string) {
		resp, err := client.Get("http://" + httpAddr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	waitFor(t, func() bool { code, _ := get("/healthz"); return code == http.StatusOK }, "/healthz 200 past --startup-timeout")
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "ledger unavailable") {
		t.Errorf("/readyz = %d %q with the ledger down, want 503 naming the ledger", code, body)
	}
	if !strings.Contains(p.out.String(), "--startup-timeout") {
		t.Errorf("no log line naming --startup-timeout")
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the reload is under way, waiting on the ledger
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d after SIGHUP, want 200", code)
	}
	p.sigterm(t, exitBound)
}
