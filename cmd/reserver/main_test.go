package main_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/remote"
	"github.com/leasehold/leasehold/internal/testutil/gobuild"
)

// binDir holds the reserver and enginesim binaries TestMain built.
var binDir string

func TestMain(m *testing.M) { gobuild.Main(m, &binDir, ".", "../enginesim") }

func binary() string { return filepath.Join(binDir, "reserver") }

const fleetYAML = `
pools:
  - name: llama
    engines:
      - {id: gpu-0, url: "http://127.0.0.1:1", kv_tokens: 10000, slots: 8, stale_after: 0s}
tenants:
  - {name: acme, api_keys: [sk-acme], kv_share: 1}
priorities:
  - {name: standard, max_fill: 1}
lease:
  recovery_window: 0s
`

func TestBadFleetExitsNamingTheField(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(fleetYAML, "slots: 8", "slots: 0", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary(), "--config", path, "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if code := cmd.ProcessState.ExitCode(); err == nil || code == 0 {
		t.Fatalf("exit code %d (%v), want non-zero", code, err)
	}
	if !strings.Contains(stderr.String(), "pools[0].engines[0].slots") {
		t.Errorf("stderr %q does not name pools[0].engines[0].slots", stderr.String())
	}
	// The red team's misconfigurations: one engine under two ids, and in
	// two pools, each admitted against twice over. Refused at start, naming
	// both places.
	twice := map[string]string{
		"two ids":   strings.Replace(fleetYAML, "stale_after: 0s}", "stale_after: 0s}\n      - {id: gpu-1, url: \"http://127.0.0.1:1/\", kv_tokens: 10000, slots: 8}", 1),
		"two pools": strings.Replace(fleetYAML, "tenants:", "  - name: other\n    engines:\n      - {id: gpu-9, url: \"http://127.0.0.1:1\", kv_tokens: 10000, slots: 8}\ntenants:", 1),
	}
	for name, yaml := range twice {
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(binary(), "--config", path, "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0")
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); err == nil || code == 0 {
			t.Errorf("one engine under %s: exit code %d (%v), want non-zero", name, code, err)
		}
		if !strings.Contains(string(out), "is the engine of pools[0].engines[0] already") {
			t.Errorf("one engine under %s: output %q does not name both places", name, out)
		}
	}

	cmd = exec.Command(binary(), "--grpc-listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "LEASEHOLD_CONFIG=")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--config") {
		t.Errorf("without --config: %v %s", err, out)
	}
}

// TestSignals: SIGHUP reloads the file and keeps leases; SIGTERM exits 0.
func TestSignals(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(path, []byte(fleetYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr := freeport.AddrT(t), freeport.AddrT(t)
	cmd := exec.Command(binary(), "--config", path, "--http-listen", httpAddr)
	cmd.Env = append(os.Environ(), "LEASEHOLD_GRPC_LISTEN="+grpcAddr, "LEASEHOLD_TOKEN=tok-1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	waitFor(t, func() bool {
		resp, err := client.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, "ready; stderr: %s", &stderr)

	c, err := remote.Dial("grpc://"+grpcAddr, remote.Options{Token: "tok-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.KeepAlive(ctx, "llama", "router-a", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	g, err := c.Acquire(ctx, ledger.AcquireRequest{Pool: "llama", Candidates: []ledger.EngineID{"gpu-0"}, Tenant: "acme",
		Priority: "standard", KVTokens: 100, Slots: 1, Holder: "router-a", RequestID: "r1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(path, []byte(strings.Replace(fleetYAML, "kv_tokens: 10000", "kv_tokens: 15000", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		st, err := c.Stats(ctx, "llama")
		return err == nil && st.Engines[0].Spec.KVTokens == 15000
	}, "capacity 15000 after SIGHUP; stderr: %s", &stderr)
	ls, err := c.List(ctx, ledger.Filter{Pool: "llama"})
	if err != nil || len(ls) != 1 || ls[0].ID != g.Lease.ID {
		t.Errorf("leases after SIGHUP = %v (%v), want [%s]", ls, err, g.Lease.ID)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("exit after SIGTERM: %v; stderr: %s", waitErr, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no exit 10s after SIGTERM; stderr: %s", stderr.String())
	}
	if strings.Contains(stderr.String(), "tok-1") {
		t.Errorf("the token was logged: %s", stderr.String())
	}
	if strings.Contains(stderr.String(), "--startup-timeout") {
		t.Errorf("a start with the ledger up logged that it ran out of --startup-timeout: %s", stderr.String())
	}
}

func waitFor(t *testing.T, ok func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: "+format, args...)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
