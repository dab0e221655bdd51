package route

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/remote"
	"github.com/leasehold/leasehold/internal/testutil/testpki"
)

// TestRouterReserverMTLS runs a real reserver serving gRPC over mTLS with
// no token at all, a real engine, and real routers that reach the reserver
// with --ledger-ca-file/--ledger-cert-file/--ledger-key-file: a client
// certificate whose DNS SAN is the router's --id is its identity, so the
// router adopts the reserver's pool configuration, becomes ready and
// leases under holders "<id>/..."; a certificate naming another router, a
// router that does not trust the reserver's CA and one speaking plaintext
// never become ready and hold nothing; bad TLS flags stop the router at
// startup with exit status 2 naming the flag.
func TestRouterReserverMTLS(t *testing.T) {
	env := withoutLeaseholdEnv() // no LEASEHOLD_TOKEN: certificates are the only credentials
	ca := testpki.New(t, "leasehold-test")
	srvCert, srvKey, _ := ca.Server(t, "reserver")

	engine := startEngine(t, "gpu-0", engineOpts{kv: 4096, slots: 16, speed: 1, output: 64})
	fleetPath := fleetYAML(t, []*proc{engine}, 4096, 16, `tenants:
  - {name: acme, api_keys: ["sk-acme"], kv_share: 1}
lease:
  session_ttl: 3s
  recovery_window: 0s
`)
	grpcAddr, httpAddr := freeport.AddrT(t), freeport.AddrT(t)
	reserver := startProcEnv(t, "reserver", "reserver", httpAddr, env,
		"--ledger", "memory://", "--config", fleetPath, "--grpc-listen", grpcAddr, "--http-listen", httpAddr,
		"--tls-cert-file", srvCert, "--tls-key-file", srvKey, "--tls-client-ca-file", ca.File,
		"--audit-identities", "auditor", "--log-level", "warn")
	waitHTTP(t, reserver.url()+"/readyz", 10*time.Second)
	ledgerURL := "grpc://" + grpcAddr

	// The test reads the reserver's ledger as a read-only audit identity.
	auditCert, auditKey, _ := ca.Client(t, "auditor")
	audit, err := remote.Dial(ledgerURL, remote.Options{CAFile: ca.File, CertFile: auditCert, KeyFile: auditKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = audit.Close() })
	leases := func(t *testing.T) []ledger.Lease {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		ls, err := audit.List(ctx, ledger.Filter{Pool: "m"})
		if err != nil {
			t.Fatalf("List as the audit identity: %v", err)
		}
		return ls
	}

	router := func(t *testing.T, id string, tlsArgs ...string) *proc {
		t.Helper()
		addr := freeport.AddrT(t)
		return startProcEnv(t, id, "router", addr, env, append([]string{"--ledger", ledgerURL, "--config", fleetPath,
			"--listen", addr, "--id", id, "--max-model-len", "2048", "--queue-timeout", "200ms"}, tlsArgs...)...)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	chat := map[string]any{"model": "m", "max_tokens": 16, "ignore_eos": true, "stream": true,
		"messages": []map[string]string{{"role": "user", "content": "lease me over mTLS"}}}

	t.Run("certificate is the identity", func(t *testing.T) {
		cert, key, _ := ca.Client(t, "r-mtls")
		r := router(t, "r-mtls", "--ledger-ca-file", ca.File, "--ledger-cert-file", cert, "--ledger-key-file", key)
		waitHTTP(t, r.url()+"/readyz", 10*time.Second)

		// Stream, and look at the ledger while the answer is still coming.
		body, err := json.Marshal(chat)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, r.url()+"/v1/chat/completions", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk-acme")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("chat: %v", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			data, _ := io.ReadAll(resp.Body)
			t.Fatalf("chat: status %d body %s, want 200", resp.StatusCode, data)
		}
		br := bufio.NewReader(resp.Body)
		if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
			t.Fatalf("first line of the stream %q, %v; want a data: line", line, err)
		}
		held := leases(t)
		if len(held) != 1 || !strings.HasPrefix(string(held[0].Holder), "r-mtls/") || held[0].Engine != "gpu-0" {
			t.Errorf("leases in the reserver's ledger while streaming: %+v, want one on gpu-0 held by r-mtls/...", held)
		}
		rest, err := io.ReadAll(br)
		if err != nil || !strings.Contains(string(rest), "[DONE]") {
			t.Fatalf("rest of the stream: %v, %q; want it to end with [DONE]", err, tail(string(rest), 300))
		}
		deadline := time.Now().Add(5 * time.Second)
		for held = leases(t); len(held) > 0 && time.Now().Before(deadline); held = leases(t) {
			time.Sleep(20 * time.Millisecond)
		}
		if len(held) > 0 {
			t.Errorf("leases after the answer ended: %+v, want none", held)
		}
	})

	// Routers the reserver does not accept: each never becomes ready,
	// answers 503 and holds no lease. The evidence that the refusal has
	// happened: a certificate naming another router is refused KeepAlive
	// with PermissionDenied by the reserver (the router's own log says
	// nothing of it; its holder session just stays unconfirmed); the other
	// two never get through the handshake and log the failed Configure.
	wrongCert, wrongKey, _ := ca.Client(t, "r-other")
	goodCert, goodKey, _ := ca.Client(t, "r-bad")
	for _, tc := range []struct {
		name     string
		args     []string
		refused  func(t *testing.T, r *proc)
		wantCode string
	}{
		{"certificate names another router", []string{"--ledger-ca-file", ca.File, "--ledger-cert-file", wrongCert, "--ledger-key-file", wrongKey},
			func(t *testing.T, _ *proc) {
				waitMetric(t, reserver.url(), `leasehold_reserver_grpc_request_duration_seconds_count{code="PermissionDenied",method="KeepAlive"}`,
					10*time.Second)
			}, "ledger_unavailable"},
		{"reserver's CA not trusted", []string{"--ledger-cert-file", goodCert, "--ledger-key-file", goodKey},
			func(t *testing.T, r *proc) { waitLog(t, r, "certificate signed by unknown authority", 10*time.Second) }, "pool_not_configured"},
		{"plaintext", nil,
			func(t *testing.T, r *proc) { waitLog(t, r, "configuring pool in the ledger failed", 10*time.Second) }, "pool_not_configured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := router(t, "r-bad", tc.args...)
			tc.refused(t, r)
			if resp, err := client.Get(r.url() + "/readyz"); err != nil {
				t.Errorf("readyz: %v", err)
			} else {
				resp.Body.Close()
				if resp.StatusCode != http.StatusServiceUnavailable {
					t.Errorf("readyz: status %d, want 503 (not ready)", resp.StatusCode)
				}
			}
			status, _, data, err := post(t.Context(), client, r.url()+"/v1/chat/completions", "sk-acme", map[string]any{
				"model": "m", "max_tokens": 8, "messages": []map[string]string{{"role": "user", "content": "hi"}}})
			if code, _ := errCode(data); err != nil || status != http.StatusServiceUnavailable || code != tc.wantCode {
				t.Errorf("chat: status %d, %v, body %s; want 503 %s", status, err, data, tc.wantCode)
			}
			if held := leases(t); len(held) > 0 {
				t.Errorf("leases in the reserver's ledger: %+v, want none", held)
			}
		})
	}

	// Bad TLS flags: exit status 2 at startup, naming the flag.
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"cert without key", []string{"--ledger", ledgerURL, "--ledger-cert-file", goodCert}, "--ledger-key-file"},
		{"TLS with a memory ledger", []string{"--ledger", "memory://", "--ledger-tls"}, "--ledger-tls"},
		{"missing CA file", []string{"--ledger", ledgerURL, "--ledger-ca-file", filepath.Join(t.TempDir(), "missing.pem")}, "--ledger-ca-file"},
		{"CA file that is a key", []string{"--ledger", ledgerURL, "--ledger-ca-file", goodKey}, "--ledger-ca-file"},
		{"key of another certificate", []string{"--ledger", ledgerURL, "--ledger-cert-file", goodCert, "--ledger-key-file", wrongKey}, "--ledger-key-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(binDir, "router"), append([]string{"--config", fleetPath, "--id", "r-flags",
				"--listen", "127.0.0.1:0"}, tc.args...)...)
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), tc.want) {
				t.Errorf("router %v: exit %d (%v), output %q; want exit 2 naming %s", tc.args, code, err, out, tc.want)
			}
		})
	}
}

// waitLog waits until p's output contains substr.
func waitLog(t testing.TB, p *proc, substr string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(p.out.String(), substr) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %q within %s", p.name, substr, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitMetric waits until series (a metric name, or a name and its label
// set as /metrics writes them, labels sorted) on base's /metrics adds up
// to at least 1.
func waitMetric(t testing.TB, base, series string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for metricSum(base, series) < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s/metrics did not reach 1 within %s", series, base, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
