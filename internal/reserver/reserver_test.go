package reserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/audit"
	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/remote"
	"github.com/leasehold/leasehold/internal/reserver"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	sharedToken = "shared-secret-1"
	auditToken  = "audit-secret-1"
)

// fleetPolicy is the priorities and lease settings of the test fleets.
const fleetPolicy = `priorities:
  - {name: standard, max_fill: 1}
lease:
  session_ttl: 2s
  recovery_window: 0s
`

const fleetYAML = `
pools:
  - name: llama
    engines:
      - {id: gpu-0, url: "http://127.0.0.1:1", kv_tokens: 10000, slots: 8, stale_after: 0s}
      - {id: gpu-1, url: "http://127.0.0.1:2", kv_tokens: 20000, slots: 8, stale_after: 0s}
tenants:
  - {name: acme, api_keys: [sk-acme], kv_share: 1}
` + fleetPolicy

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// start runs a reserver on free loopback ports until the test ends.
func start(t *testing.T, fleetFile string, mod func(*reserver.Config)) *reserver.Reserver {
	t.Helper()
	cfg := reserver.Defaults()
	cfg.FleetFile = fleetFile
	cfg.GRPCListen, cfg.HTTPListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.ReapplyInterval = 50 * time.Millisecond
	cfg.ReconcileInterval = 50 * time.Millisecond
	cfg.ShutdownTimeout = 5 * time.Second
	if mod != nil {
		mod(&cfg)
	}
	r, err := reserver.New(cfg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return r
}

func dial(t *testing.T, r *reserver.Reserver, token string) *remote.Ledger {
	t.Helper()
	c, err := remote.Dial("grpc://"+r.GRPCAddr(), remote.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// get fetches an HTTP path with an optional Authorization header.
func get(t *testing.T, r *reserver.Reserver, path, auth string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+r.HTTPAddr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func acquire(t *testing.T, l ledger.Ledger, holder ledger.HolderID, req string, engine ledger.EngineID, kv int64) ledger.Lease {
	t.Helper()
	g, err := l.Acquire(context.Background(), ledger.AcquireRequest{
		Pool: "llama", Candidates: []ledger.EngineID{engine}, Tenant: "acme", Priority: "standard",
		KVTokens: kv, Slots: 1, Holder: holder, RequestID: ledger.RequestID(req), TTL: time.Minute,
	})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return g.Lease
}

func keepAlive(t *testing.T, l ledger.Ledger, holder ledger.HolderID, ttl time.Duration) {
	t.Helper()
	if _, err := l.KeepAlive(context.Background(), "llama", holder, ttl); err != nil {
		t.Fatalf("KeepAlive: %v", err)
	}
}

func decode(t *testing.T, b []byte) audit.Report {
	t.Helper()
	var rep audit.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return rep
}

// metricsEngine serves a vLLM engine's /metrics (the telemetry package's
// vllm-v1 fixture) until the test ends; while up is not nil and false it
// answers 503 instead.
func metricsEngine(t *testing.T, up *atomic.Bool) *httptest.Server {
	t.Helper()
	fixture, err := os.ReadFile("../telemetry/testdata/vllm-v1.metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if up != nil && !up.Load() {
			http.Error(w, "engine down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write(fixture)
	}))
	t.Cleanup(eng.Close)
	return eng
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestEndToEnd(t *testing.T) {
	dir := t.TempDir()
	r := start(t, writeFile(t, dir, "fleet.yaml", fleetYAML), func(c *reserver.Config) {
		c.Token, c.AuditTokens = sharedToken, []string{auditToken}
	})
	c := dial(t, r, sharedToken)
	keepAlive(t, c, "router-a", 10*time.Second)
	keepAlive(t, c, "router-b", 10*time.Second)
	l1 := acquire(t, c, "router-a", "r1", "gpu-0", 1000)
	acquire(t, c, "router-b", "r2", "gpu-1", 3000)

	code, body := get(t, r, "/v1/audit", "Bearer "+sharedToken)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/audit = %d %s", code, body)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || raw["leases"] == nil {
		t.Fatalf("want a top-level leases array, got %s (%v)", body, err)
	}
	rep := decode(t, body)
	if len(rep.Leases) != 2 || rep.Leases[0].ID != l1.ID || rep.Leases[0].Holder != "router-a" || rep.Leases[0].KVTokens != 1000 {
		t.Errorf("leases = %+v, want router-a's 1000 KV lease first of 2", rep.Leases)
	}
	if len(rep.Engines) != 2 || rep.Engines[0].Reserved.KVTokens != 1000 || rep.Engines[1].Capacity.KVTokens != 20000 {
		t.Errorf("engines = %+v", rep.Engines)
	}
	if len(rep.Anomalies) != 0 {
		t.Errorf("anomalies = %+v, want none", rep.Anomalies)
	}
	wantTenant := audit.TenantRow{Pool: "llama", Tenant: "acme", Quota: audit.Amount{KVTokens: 30000}, Reserved: audit.Amount{KVTokens: 4000, Slots: 2}, Leases: 2,
		ByPriority: []audit.ClassAmount{{Priority: "standard", Reserved: audit.Amount{KVTokens: 4000, Slots: 2}, Leases: 2}}}
	if len(rep.Tenants) != 1 || !reflect.DeepEqual(rep.Tenants[0], wantTenant) {
		t.Errorf("tenants = %+v, want [%+v]", rep.Tenants, wantTenant)
	}

	t.Run("filters", func(t *testing.T) {
		for _, c := range []struct {
			q    string
			want int
		}{{"holder=router-b", 1}, {"engine=gpu-0", 1}, {"tenant=acme", 2}, {"pool=llama&holder=nobody", 0}} {
			code, body := get(t, r, "/v1/audit?"+c.q, "Bearer "+auditToken)
			if rep := decode(t, body); code != 200 || len(rep.Leases) != c.want {
				t.Errorf("?%s: %d, %d leases, want 200, %d", c.q, code, len(rep.Leases), c.want)
			}
		}
		if code, _ := get(t, r, "/v1/audit?pool=nope", "Bearer "+auditToken); code != http.StatusNotFound {
			t.Errorf("unknown pool: %d, want 404", code)
		}
		if code, _ := get(t, r, "/v1/audit?bogus=1", "Bearer "+auditToken); code != http.StatusBadRequest {
			t.Errorf("unknown parameter: %d, want 400", code)
		}
	})

	t.Run("auth", func(t *testing.T) {
		for _, c := range []struct {
			name, auth string
			want       int
		}{
			{"none", "", http.StatusUnauthorized},
			{"unknown token", "Bearer wrong", http.StatusUnauthorized},
			{"empty bearer", "Bearer ", http.StatusUnauthorized},
			{"other scheme", "Token " + sharedToken, http.StatusUnauthorized},
			{"audit token", "Bearer " + auditToken, http.StatusOK},
			{"basic with token as password", "Basic " + basic("ops", auditToken), http.StatusOK},
			{"basic with a wrong password", "Basic " + basic("ops", "nope"), http.StatusUnauthorized},
		} {
			code, body := get(t, r, "/v1/audit", c.auth)
			if code != c.want {
				t.Errorf("%s: %d, want %d", c.name, code, c.want)
			}
			if bytes.Contains(body, []byte(sharedToken)) || bytes.Contains(body, []byte(auditToken)) {
				t.Errorf("%s: response echoes a token: %s", c.name, body)
			}
		}
		if code, _ := get(t, r, "/", ""); code != http.StatusUnauthorized {
			t.Errorf("page without token: %d, want 401", code)
		}
		// An audit token may read the ledger over gRPC but not acquire.
		a := dial(t, r, auditToken)
		if _, err := a.KeepAlive(context.Background(), "llama", "x", time.Second); !errors.Is(err, ledger.ErrPermissionDenied) {
			t.Errorf("KeepAlive with an audit token = %v, want ErrPermissionDenied", err)
		}
	})

	t.Run("page", func(t *testing.T) {
		code, body := get(t, r, "/", "Bearer "+sharedToken)
		s := string(body)
		for _, want := range []string{`http-equiv="refresh"`, "router-a", "gpu-1", `style="width: 10%"`, `style="width: 15%"`,
			"<h2>Tenants</h2>", `<td class="n">4000 / 30000</td>`, "standard 4000 / 2 / 2"} {
			if !strings.Contains(s, want) {
				t.Errorf("page lacks %q", want)
			}
		}
		if code != 200 || strings.Contains(s, "<script") {
			t.Errorf("page: %d, script tag present = %v", code, strings.Contains(s, "<script"))
		}
	})

	t.Run("cli", func(t *testing.T) {
		var out, errb bytes.Buffer
		if code := reserver.RunAudit(context.Background(), []string{"--server", r.HTTPAddr(), "--holder", "router-a"},
			env(map[string]string{"LEASEHOLD_TOKEN": sharedToken}), &out, &errb); code != 0 {
			t.Fatalf("audit exit %d: %s", code, errb.String())
		}
		s := out.String()
		if !strings.Contains(s, "LEASES (1)") || !strings.Contains(s, string(l1.ID)) || strings.Contains(s, "router-b") || !strings.Contains(s, "TENANTS (1)") {
			t.Errorf("table:\n%s", s)
		}
		out.Reset()
		if code := reserver.RunAudit(context.Background(), []string{"--server", "http://" + r.HTTPAddr(), "--json"},
			env(map[string]string{"LEASEHOLD_TOKEN": sharedToken}), &out, &errb); code != 0 {
			t.Fatalf("audit --json exit %d: %s", code, errb.String())
		}
		if rep := decode(t, out.Bytes()); len(rep.Leases) != 2 {
			t.Errorf("--json: %d leases, want 2", len(rep.Leases))
		}
		errb.Reset()
		if code := reserver.RunAudit(context.Background(), []string{"--server", r.HTTPAddr()}, env(nil), &out, &errb); code != 1 ||
			!strings.Contains(errb.String(), "401") || !strings.Contains(errb.String(), "LEASEHOLD_TOKEN") {
			t.Errorf("audit without token: exit %d, stderr %q", code, errb.String())
		}
	})

	t.Run("metrics", func(t *testing.T) {
		code, body := get(t, r, "/metrics", "")
		s := string(body)
		for _, want := range []string{
			`leasehold_ledger_grants_total{pool="llama"} 2`,
			`leasehold_ledger_rejections_total{pool="llama",reason="engine_kv"} 0`,
			`leasehold_ledger_active_leases{engine="gpu-0",pool="llama"} 1`,
			`leasehold_ledger_reserved_kv_tokens{engine="gpu-1",pool="llama"} 3000`,
			`leasehold_audit_tenant_reserved_kv_tokens{pool="llama",priority="standard",tenant="acme"} 4000`,
			`leasehold_audit_tenant_reserved_slots{pool="llama",priority="standard",tenant="acme"} 2`,
			`leasehold_audit_tenant_quota_kv_tokens{pool="llama",tenant="acme"} 30000`,
			`leasehold_ledger_reserved_slots{engine="gpu-1",pool="llama"} 1`,
			`leasehold_ledger_capacity_kv_tokens{engine="gpu-0",pool="llama"} 10000`,
			`leasehold_ledger_capacity_slots{engine="gpu-0",pool="llama"} 8`,
			`leasehold_ledger_live_holders{pool="llama"} 2`,
			`leasehold_ledger_expired_total{pool="llama"} 0`,
			`leasehold_ledger_revoked_total{pool="llama"} 0`,
			`leasehold_reconcile_stale_engines{pool="llama"} 0`,
			`leasehold_ledger_up 1`,
			`leasehold_reserver_grpc_request_duration_seconds_count{code="OK",method="Acquire"} 2`,
			`leasehold_reserver_grpc_request_duration_seconds_count{code="PermissionDenied",method="KeepAlive"} 1`,
			`leasehold_reserver_fleet_applies_total{pool="llama",result="ok"}`,
			`leasehold_reserver_fleet_reloads_total{result="error"} 0`,
		} {
			if !strings.Contains(s, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
		if code != 200 || strings.Contains(s, string(l1.ID)) {
			t.Errorf("/metrics: %d; lease id in labels = %v", code, strings.Contains(s, string(l1.ID)))
		}
	})

	t.Run("health", func(t *testing.T) {
		if code, _ := get(t, r, "/healthz", ""); code != 200 {
			t.Errorf("/healthz = %d", code)
		}
		if code, body := get(t, r, "/readyz", ""); code != 200 {
			t.Errorf("/readyz = %d %s", code, body)
		}
	})
}

func basic(user, pw string) string {
	req, _ := http.NewRequest(http.MethodGet, "/", nil)
	req.SetBasicAuth(user, pw)
	return strings.TrimPrefix(req.Header.Get("Authorization"), "Basic ")
}

func TestNoTokenServesLoopback(t *testing.T) {
	r := start(t, writeFile(t, t.TempDir(), "fleet.yaml", fleetYAML), nil)
	if code, body := get(t, r, "/v1/audit", ""); code != 200 {
		t.Errorf("loopback without any token configured: %d %s", code, body)
	}
}

func TestExpiredHolderAndPassedDeadline(t *testing.T) {
	r := start(t, writeFile(t, t.TempDir(), "fleet.yaml", fleetYAML), func(c *reserver.Config) {
		c.SweepInterval = 0 // keep ended leases for the audit to see
	})
	c := dial(t, r, "")
	keepAlive(t, c, "router-dead", time.Second)
	l := acquire(t, c, "router-dead", "r1", "gpu-0", 100)
	time.Sleep(1200 * time.Millisecond)

	_, body := get(t, r, "/v1/audit", "")
	rep := decode(t, body)
	var kinds []audit.Kind
	for _, a := range rep.Anomalies {
		if a.Lease == l.ID {
			kinds = append(kinds, a.Kind)
		}
	}
	if len(kinds) != 1 || kinds[0] != audit.KindExpiredHolder {
		t.Errorf("anomalies of the dead holder's lease = %v, want [%s]; report %+v", kinds, audit.KindExpiredHolder, rep.Anomalies)
	}
	// The gauge counts what the audit shows, per pool and kind, and exports
	// every kind (0 when none).
	count := map[audit.Kind]int{}
	for _, a := range rep.Anomalies {
		if a.Pool == l.Pool {
			count[a.Kind]++
		}
	}
	_, mb := get(t, r, "/metrics", "")
	metrics := string(mb)
	if !strings.Contains(metrics, "leasehold_audit_up 1") {
		t.Errorf("/metrics lacks leasehold_audit_up 1")
	}
	for _, k := range audit.Kinds {
		want := fmt.Sprintf("leasehold_audit_anomalies{kind=%q,pool=%q} %d", k, l.Pool, count[k])
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestReloadKeepsLeases(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "fleet.yaml", fleetYAML)
	r := start(t, path, nil)
	c := dial(t, r, "")
	keepAlive(t, c, "router-a", 10*time.Second)
	l := acquire(t, c, "router-a", "r1", "gpu-0", 1000)
	ctx := context.Background()
	capacity := func() int64 {
		st, err := r.Ledger().Stats(ctx, "llama")
		if err != nil {
			t.Fatal(err)
		}
		return st.Engines[0].Spec.KVTokens
	}

	writeFile(t, dir, "fleet.yaml", strings.Replace(fleetYAML, "kv_tokens: 10000", "kv_tokens: 12000", 1))
	if err := r.Reload(ctx); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if got := capacity(); got != 12000 {
		t.Errorf("gpu-0 capacity after reload = %d, want 12000", got)
	}

	writeFile(t, dir, "fleet.yaml", strings.Replace(fleetYAML, "kv_tokens: 10000", "kv_tokens: -5", 1))
	err := r.Reload(ctx)
	if !errors.Is(err, fleet.ErrInvalid) || !strings.Contains(err.Error(), "pools[0].engines[0].kv_tokens") {
		t.Errorf("Reload(bad file) = %v, want an error naming pools[0].engines[0].kv_tokens", err)
	}
	if got := capacity(); got != 12000 {
		t.Errorf("capacity after a bad reload = %d, want the previous 12000", got)
	}
	ls, err := r.Ledger().List(ctx, ledger.Filter{Pool: "llama"})
	if err != nil || len(ls) != 1 || ls[0].ID != l.ID {
		t.Errorf("leases after reloads = %v (%v), want [%s]", ls, err, l.ID)
	}
	_, body := get(t, r, "/metrics", "")
	for _, want := range []string{`leasehold_reserver_fleet_reloads_total{result="error"} 1`, `leasehold_reserver_fleet_reloads_total{result="ok"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestNewRejectsBadFleet(t *testing.T) {
	cfg := reserver.Defaults()
	cfg.FleetFile = writeFile(t, t.TempDir(), "fleet.yaml", strings.Replace(fleetYAML, "slots: 8,", "slots: 8, colour: red,", 1))
	_, err := reserver.New(cfg, nil)
	if !errors.Is(err, fleet.ErrInvalid) || !strings.Contains(err.Error(), `"colour"`) {
		t.Errorf("New = %v, want an error naming the unknown field colour", err)
	}
	cfg.FleetFile = ""
	if _, err := reserver.New(cfg, nil); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("New without --config = %v, want an error naming --config", err)
	}
}

func TestParseIdentities(t *testing.T) {
	cfg, err := reserver.ParseServeFlags([]string{"--config", "f", "--tls-cert-file", "c", "--tls-key-file", "k", "--tls-client-ca-file", "ca",
		"--audit-identities", "auditor-1, auditor-2"}, env(map[string]string{
		"LEASEHOLD_ADMIN_IDENTITIES": "ops-1,ops-2,",
		"LEASEHOLD_AUDIT_IDENTITIES": "ignored", // the flag wins
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rc := cfg.RPCConfig()
	if got, want := strings.Join(rc.AdminIdentities, "|"), "ops-1|ops-2"; got != want {
		t.Errorf("admin identities = %q, want %q", got, want)
	}
	if got, want := strings.Join(rc.AuditIdentities, "|"), "auditor-1|auditor-2"; got != want {
		t.Errorf("audit identities = %q, want %q", got, want)
	}
	if !rc.ClientCerts {
		t.Errorf("RPCConfig().ClientCerts = false with --tls-client-ca-file")
	}
	_, err = reserver.ParseServeFlags([]string{"--config", "f", "--tls-cert-file", "c", "--tls-key-file", "k", "--tls-client-ca-file", "ca",
		"--admin-identities", "x", "--audit-identities", "x"}, env(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "already listed") {
		t.Errorf("an identity in both lists: %v, want an error", err)
	}
}

func TestParseServeFlagsEnv(t *testing.T) {
	dir := t.TempDir()
	tokFile := writeFile(t, dir, "token", sharedToken+"\n")
	auditFile := writeFile(t, dir, "audit", "# readers\n"+auditToken+"\n")
	cfg, err := reserver.ParseServeFlags([]string{"--grpc-listen", "127.0.0.1:9999"}, env(map[string]string{
		"LEASEHOLD_CONFIG":             "fleet.yaml",
		"LEASEHOLD_GRPC_LISTEN":        "127.0.0.1:1111", // the flag wins
		"LEASEHOLD_HTTP_LISTEN":        "127.0.0.1:2222",
		"LEASEHOLD_RECONCILE_INTERVAL": "3s",
		"LEASEHOLD_STARTUP_TIMEOUT":    "40s",
		"LEASEHOLD_TOKEN_FILE":         tokFile,
		"LEASEHOLD_AUDIT_TOKENS_FILE":  auditFile,
		"LEASEHOLD_ADMIN_TOKENS":       "admin-1, admin-2",
		"LEASEHOLD_ROUTER_ROLE_TOKENS": "router-1",
		// --router-role-tokens-file adds to LEASEHOLD_ROUTER_ROLE_TOKENS.
		"LEASEHOLD_ROUTER_ROLE_TOKENS_FILE": writeFile(t, dir, "routers", "router-2\n# next\nrouter-3\n"),
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.FleetFile != "fleet.yaml" || cfg.GRPCListen != "127.0.0.1:9999" || cfg.HTTPListen != "127.0.0.1:2222" ||
		cfg.ReconcileInterval != 3*time.Second || cfg.StartupTimeout != 40*time.Second || cfg.Token != sharedToken || len(cfg.AuditTokens) != 1 || len(cfg.AdminTokens) != 2 {
		t.Errorf("config = %+v", cfg)
	}
	if got, want := strings.Join(cfg.RPCConfig().RouterRoleTokens, "|"), "router-1|router-2|router-3"; got != want {
		t.Errorf("router-role tokens = %q, want %q", got, want)
	}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"bad env duration", nil, map[string]string{"LEASEHOLD_CONFIG": "f", "LEASEHOLD_SWEEP_INTERVAL": "soon"}, "LEASEHOLD_SWEEP_INTERVAL"},
		{"half TLS", []string{"--config", "f", "--tls-cert-file", "c"}, nil, "--tls-key-file"},
		{"token twice", []string{"--config", "f"}, map[string]string{"LEASEHOLD_TOKEN": "a", "LEASEHOLD_AUDIT_TOKENS": "a"}, "same token"},
		{"admin token as router-role token", []string{"--config", "f"}, map[string]string{"LEASEHOLD_TOKEN": "a", "LEASEHOLD_ROUTER_ROLE_TOKENS": "a"}, "router_role_tokens[0] is the same token"},
		{"missing router-role tokens file", []string{"--config", "f", "--router-role-tokens-file", "/nonexistent/routers"}, nil, "--router-role-tokens-file"},
		{"missing config", nil, nil, "--config"},
		{"no startup bound", []string{"--config", "f", "--startup-timeout", "0s"}, nil, "--startup-timeout = 0s: must be at least"},
		{"identities without client CA", []string{"--config", "f", "--admin-identities", "ops"}, nil, "need --tls-client-ca-file"},
	} {
		_, err := reserver.ParseServeFlags(c.args, env(c.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "\"a\"") {
			t.Errorf("%s: error echoes a token: %v", c.name, err)
		}
	}
}

// TestDiscoveredCapacity: an engine without kv_tokens is configured once
// its metrics report a capacity; its telemetry is observed.
func TestDiscoveredCapacity(t *testing.T) {
	eng := metricsEngine(t, nil)
	yaml := strings.Replace(fleetYAML, `{id: gpu-1, url: "http://127.0.0.1:2", kv_tokens: 20000, slots: 8, stale_after: 0s}`,
		`{id: gpu-1, url: "`+eng.URL+`", slots: 8, stale_after: 10s}`, 1)
	r := start(t, writeFile(t, t.TempDir(), "fleet.yaml", yaml), nil)
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := r.Ledger().Stats(ctx, "llama")
		if err == nil && len(st.Engines) == 2 && !st.Engines[1].ObservedAt.IsZero() {
			// 28833 blocks × 16 tokens × headroom 0.9
			if got, want := st.Engines[1].Spec.KVTokens, int64(415195); got != want {
				t.Errorf("discovered gpu-1 capacity = %d, want %d", got, want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool not configured with discovered capacity and observed: %+v, %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRedisWipeReapplied runs on a real Redis: leases are granted through
// the reserver, the store is flushed, and the reserver configures the pool
// again under a new epoch.
func TestRedisWipeReapplied(t *testing.T) {
	rs := redisserver.Start(t)
	r := start(t, writeFile(t, t.TempDir(), "fleet.yaml", fleetYAML), func(c *reserver.Config) { c.Ledger = rs.URL() })
	c := dial(t, r, "")
	ctx := context.Background()
	keepAlive(t, c, "router-a", 10*time.Second)
	acquire(t, c, "router-a", "r1", "gpu-0", 1000)
	st, err := c.Stats(ctx, "llama")
	if err != nil {
		t.Fatal(err)
	}
	_, body := get(t, r, "/v1/audit", "")
	if rep := decode(t, body); len(rep.Leases) != 1 {
		t.Errorf("audit on redis: %d leases, want 1", len(rep.Leases))
	}

	rs.FlushAll()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st2, err := c.Stats(ctx, "llama")
		if err == nil && st2.Epoch != st.Epoch {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool not re-applied after the wipe: %+v %v", st2, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPartialPool: an engine whose metrics are down at startup does not
// keep its pool unconfigured: the pool serves with the known engines, the
// waiting one is listed on /readyz and joins when its metrics report, and
// tenant quotas grow with it. A pool with no known engine stays pending.
func TestPartialPool(t *testing.T) {
	var up atomic.Bool // the engine is starting
	// One engine per pool: the same engine in two pools is a fleet error.
	eng, solo := metricsEngine(t, &up), metricsEngine(t, &up)
	yaml := `
pools:
  - name: llama
    engines:
      - {id: gpu-0, url: "http://127.0.0.1:1", kv_tokens: 10000, slots: 8, stale_after: 0s}
      - {id: gpu-1, url: "` + eng.URL + `", slots: 8, stale_after: 10s}
  - name: solo
    engines:
      - {id: only, url: "` + solo.URL + `", slots: 8, stale_after: 10s}
tenants:
  - {name: acme, api_keys: [sk-acme], kv_share: 0.5}
` + fleetPolicy
	r := start(t, writeFile(t, t.TempDir(), "fleet.yaml", yaml), nil)
	ctx := context.Background()
	l := r.Ledger()

	st, err := l.Stats(ctx, "llama")
	if err != nil {
		t.Fatalf("Stats(llama) with gpu-1 down: %v; want the pool configured with gpu-0", err)
	}
	if len(st.Engines) != 1 || st.Engines[0].Spec.ID != "gpu-0" {
		t.Fatalf("llama engines = %+v, want gpu-0 alone", st.Engines)
	}
	if got, want := st.Tenants[0].QuotaKV, int64(5000); got != want {
		t.Errorf("acme quota with gpu-0 alone = %d, want %d (half of gpu-0)", got, want)
	}
	if _, err := l.Stats(ctx, "solo"); !errors.Is(err, ledger.ErrUnknownPool) {
		t.Errorf("Stats(solo) with its only engine down = %v, want ErrUnknownPool (not configured)", err)
	}
	keepAlive(t, l, "router-a", time.Minute)
	lease := acquire(t, l, "router-a", "r1", "gpu-0", 1000)
	code, body := get(t, r, "/readyz", "")
	for _, want := range []string{"ready", "pool llama engine gpu-1 waiting", eng.URL + "/metrics", "pool solo not configured"} {
		if code != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("/readyz = %d %q, want 200 containing %q", code, body, want)
		}
	}

	up.Store(true)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err = l.Stats(ctx, "llama")
		_, soloErr := l.Stats(ctx, "solo")
		if err == nil && len(st.Engines) == 2 && soloErr == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gpu-1 did not join llama, or solo was not configured: %+v, %v, %v", st, err, soloErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// 28833 blocks × 16 tokens × headroom 0.9
	if got, want := st.Engines[1].Spec.KVTokens, int64(415195); got != want {
		t.Errorf("gpu-1 capacity = %d, want %d", got, want)
	}
	if got, want := st.Tenants[0].QuotaKV, int64((10000+415195)/2); got != want {
		t.Errorf("acme quota with both engines = %d, want %d", got, want)
	}
	if st.Engines[0].ReservedKV != 1000 || st.Engines[0].Leases != 1 {
		t.Errorf("gpu-0 after gpu-1 joined: reserved %d in %d leases, want the lease of %d tokens kept", st.Engines[0].ReservedKV, st.Engines[0].Leases, lease.KVTokens)
	}
	if _, body := get(t, r, "/readyz", ""); strings.Contains(string(body), "waiting") || strings.Contains(string(body), "not configured") {
		t.Errorf("/readyz after every engine reported = %q, want nothing pending", body)
	}
}

// TestPartialPoolKeepsOthersEngines runs two reservers on one Redis: the
// second cannot scrape gpu-1 yet, but the first has configured it, so the
// second's partial configuration must keep it rather than remove it.
func TestPartialPoolKeepsOthersEngines(t *testing.T) {
	var up atomic.Bool
	up.Store(true)
	eng := metricsEngine(t, &up)
	yaml := strings.Replace(fleetYAML, `{id: gpu-1, url: "http://127.0.0.1:2", kv_tokens: 20000, slots: 8, stale_after: 0s}`,
		`{id: gpu-1, url: "`+eng.URL+`", slots: 8, stale_after: 10s}`, 1)
	fleetFile := writeFile(t, t.TempDir(), "fleet.yaml", yaml)
	rs := redisserver.Start(t)
	redisLedger := func(c *reserver.Config) { c.Ledger = rs.URL() }
	a := start(t, fleetFile, redisLedger)
	st, err := a.Ledger().Stats(context.Background(), "llama")
	if err != nil || len(st.Engines) != 2 {
		t.Fatalf("first reserver: %+v, %v; want gpu-0 and gpu-1 configured", st, err)
	}

	up.Store(false) // the second reserver cannot scrape gpu-1
	b := start(t, fleetFile, redisLedger)
	time.Sleep(200 * time.Millisecond) // a few reapply and reconcile rounds of b
	st, err = b.Ledger().Stats(context.Background(), "llama")
	if err != nil || len(st.Engines) != 2 || st.Engines[1].Removed || st.Engines[1].Spec.KVTokens != 415195 {
		t.Fatalf("after the second reserver started: %+v, %v; want gpu-1 kept with 415195 tokens", st.Engines, err)
	}
	if _, body := get(t, b, "/readyz", ""); strings.Contains(string(body), "waiting") {
		t.Errorf("second reserver /readyz = %q; gpu-1 is configured in the ledger, want it not listed as waiting", body)
	}
}
