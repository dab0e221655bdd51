package route

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/enginesim"
	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// The applier tests run an in-process Router on a real Redis ledger in
// front of two in-process simulated engines on loopback. gpu-1's /metrics
// can be held back (503) to play an engine whose capacity is not known yet.

// applySim is each engine of the applier tests.
var applySim = enginesim.Config{Model: "m", KVTokens: 4096, Slots: 16, Speed: 50, OutputTokens: 4, MaxModelLen: 2048}

const applyFleetTail = `tenants:
  - {name: acme, api_keys: ["sk-acme"], kv_share: 1}
lease:
  session_ttl: 2s
  recovery_window: 0s
`

type applyEnv struct {
	t       *testing.T
	rs      *redisserver.Server
	l       ledger.Ledger
	r       *Router
	url     string
	eng1    string // gpu-1's URL
	metrics atomic.Bool
	client  *http.Client
}

// newApplyEnv starts the engines and Redis; gpu1KV 0 leaves gpu-1's
// kv_tokens out of the fleet file (discovered from its metrics), and
// onlyGPU1 leaves gpu-0 out of it.
func newApplyEnv(t *testing.T, gpu1KV int, onlyGPU1 bool) *applyEnv {
	t.Helper()
	e := &applyEnv{t: t, client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}}
	t.Cleanup(e.client.CloseIdleConnections)
	_, url0 := serveSim(t, applySim, nil)
	_, e.eng1 = serveSim(t, applySim, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/metrics" && !e.metrics.Load() {
				http.Error(w, "metrics not up yet", http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	urls := []string{url0, e.eng1}
	gpu1 := fmt.Sprintf("{id: gpu-1, url: %q, slots: 16}", urls[1])
	if gpu1KV > 0 {
		gpu1 = fmt.Sprintf("{id: gpu-1, url: %q, kv_tokens: %d, slots: 16, stale_after: 0s}", urls[1], gpu1KV)
	}
	gpu0 := fmt.Sprintf("      - {id: gpu-0, url: %q, kv_tokens: 4096, slots: 16, stale_after: 0s}\n", urls[0])
	if onlyGPU1 {
		gpu0 = ""
	}
	yaml := fmt.Sprintf("pools:\n  - name: m\n    retry_after: 200ms\n    engines:\n%s      - %s\n%s", gpu0, gpu1, applyFleetTail)
	f, err := fleet.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("fleet: %v\n%s", err, yaml)
	}
	e.rs, e.l = redisLedger(t, f)
	cfg := Defaults()
	cfg.Listen, cfg.ID, cfg.FleetFile, cfg.Ledger, cfg.MaxModelLen = "127.0.0.1:0", "apply", "fleet.yaml", e.rs.URL(), 2048
	e.r, err = New(cfg, Options{Fleet: f, Ledger: e.l, LeaseConfig: callTimeouts(300 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// start starts the router; Start must not wait for the ledger.
func (e *applyEnv) start() {
	e.t.Helper()
	began := time.Now()
	if err := e.r.Start(context.Background()); err != nil {
		e.t.Fatalf("Start: %v", err)
	}
	if took := time.Since(began); took > 2*time.Second {
		e.t.Errorf("Start took %s, want it not to wait for the ledger", took)
	}
	e.url = "http://" + e.r.Addr()
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.r.Shutdown(ctx)
	})
}

// engines returns the engines the ledger has configured (not removed).
func (e *applyEnv) engines() ([]ledger.EngineID, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := e.l.Stats(ctx, "m")
	if err != nil {
		return nil, err
	}
	var ids []ledger.EngineID
	for _, en := range st.Engines {
		if !en.Removed {
			ids = append(ids, en.Spec.ID)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// waitEngines waits until the ledger has exactly want configured.
func (e *applyEnv) waitEngines(within time.Duration, want ...ledger.EngineID) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, err := e.engines()
		if err == nil && slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("ledger engines of pool m: %v (err %v), want %v within %s", got, err, want, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// chat sends one non-streaming chat; prompt varies the affinity engine.
func (e *applyEnv) chat(prompt string) (int, string, string) {
	e.t.Helper()
	body := map[string]any{"model": "m", "max_tokens": 8, "messages": []map[string]string{{"role": "user", "content": prompt}}}
	status, hdr, data, err := post(context.Background(), e.client, e.url+"/v1/chat/completions", "sk-acme", body)
	if err != nil {
		e.t.Fatalf("chat: %v", err)
	}
	code, _ := errCode(data)
	return status, hdr.Get("X-Leasehold-Engine"), code
}

func (e *applyEnv) readyz() (int, string) {
	resp, err := http.Get(e.url + "/readyz")
	if err != nil {
		e.t.Fatalf("readyz: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestPartialFleetEngineJoinsWhenDiscovered(t *testing.T) {
	e := newApplyEnv(t, 0, false)
	e.start()
	waitHTTP(t, e.url+"/readyz", 10*time.Second)
	if got, err := e.engines(); err != nil || !slices.Equal(got, []ledger.EngineID{"gpu-0"}) {
		t.Fatalf("ledger engines while gpu-1's capacity is unknown: %v (err %v), want [gpu-0]", got, err)
	}
	for i := range 24 {
		status, engine, code := e.chat(fmt.Sprintf("request %d about leases", i))
		if status != http.StatusOK || engine != "gpu-0" {
			t.Fatalf("request %d while gpu-1 waits: status %d engine %q code %q, want 200 on gpu-0", i, status, engine, code)
		}
	}
	if s := getStats(t, e.eng1); s.AcceptedRequests != 0 {
		t.Errorf("gpu-1 accepted %d requests before the ledger had it configured, want 0", s.AcceptedRequests)
	}

	e.metrics.Store(true) // gpu-1 reports its capacity now
	e.waitEngines(10*time.Second, "gpu-0", "gpu-1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := e.l.Stats(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range st.Engines {
		if want := int64(math.Floor(4096 * fleet.DefaultHeadroom)); en.Spec.ID == "gpu-1" && en.Spec.KVTokens != want {
			t.Errorf("gpu-1 configured with %d KV tokens, want %d (4096 × default headroom)", en.Spec.KVTokens, want)
		}
	}
	// Ranking by rendezvous over varied prompts reaches gpu-1 once it is
	// a candidate (the candidates are published after Configure).
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		status, engine, code := e.chat(fmt.Sprintf("another request %d", i))
		if status != http.StatusOK {
			t.Fatalf("after gpu-1 joined: status %d code %q", status, code)
		}
		if engine == "gpu-1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no request reached gpu-1 within 5s of it joining")
		}
	}
}

func TestNoEngineKnownPoolPendingNotReady(t *testing.T) {
	// Only gpu-1, capacity from metrics, held back: nothing to configure.
	e := newApplyEnv(t, 0, true)
	e.start()
	time.Sleep(500 * time.Millisecond)
	if status, body := e.readyz(); status != http.StatusServiceUnavailable || !strings.Contains(body, "pool m not configured") {
		t.Fatalf("readyz with no engine capacity known: %d %q, want 503 naming pool m", status, body)
	}
	if status, _, code := e.chat("hello"); status != http.StatusServiceUnavailable || (code != "pool_not_configured" && code != "ledger_unavailable") {
		t.Fatalf("request with the pool unconfigured: %d %q, want 503 pool_not_configured or ledger_unavailable", status, code)
	}
	e.metrics.Store(true)
	waitHTTP(t, e.url+"/readyz", 10*time.Second)
	if status, engine, code := e.chat("hello"); status != http.StatusOK || engine != "gpu-1" {
		t.Fatalf("after gpu-1 reported: %d %q %q, want 200 on gpu-1", status, engine, code)
	}
}

func TestLedgerUnreachableAtStartRetries(t *testing.T) {
	e := newApplyEnv(t, 4096, false)
	e.rs.Kill()
	e.start()
	time.Sleep(time.Second)
	if status, body := e.readyz(); status != http.StatusServiceUnavailable {
		t.Fatalf("readyz with the ledger down: %d %q, want 503", status, body)
	}
	if status, _, code := e.chat("hello"); status != http.StatusServiceUnavailable {
		t.Fatalf("request with the ledger down: %d %q, want 503", status, code)
	}
	e.rs.Restart()
	waitHTTP(t, e.url+"/readyz", 15*time.Second)
	e.waitEngines(5*time.Second, "gpu-0", "gpu-1")
	if status, _, code := e.chat("hello"); status != http.StatusOK {
		t.Fatalf("request after the ledger came back: %d %q, want 200", status, code)
	}
}

func TestWipedStoreAndNewEpochReapplyFleet(t *testing.T) {
	e := newApplyEnv(t, 4096, false)
	e.start()
	waitHTTP(t, e.url+"/readyz", 10*time.Second)
	e.waitEngines(time.Second, "gpu-0", "gpu-1")

	// Wiped store: the holder session's KeepAlive finds the pool unknown
	// and the Reconfigure hook applies the fleet again.
	e.rs.FlushAll()
	e.waitEngines(10*time.Second, "gpu-0", "gpu-1")
	waitOK := func(what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			status, _, code := e.chat("hello again")
			if status == http.StatusOK {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: requests still answered %d %q", what, status, code)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitOK("after the store was wiped")

	// A new epoch configured by someone else with a narrower view (only
	// gpu-0): the router sees the epoch change and applies its fleet.
	e.rs.FlushAll()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	narrow, _, err := e.r.fleet.PartialPoolSpec("m", nil)
	if err != nil {
		t.Fatal(err)
	}
	narrow.Engines = narrow.Engines[:1]
	if _, err := e.l.Configure(ctx, narrow); err != nil {
		t.Fatalf("configure the narrow spec: %v", err)
	}
	e.waitEngines(10*time.Second, "gpu-0", "gpu-1")
	waitOK("after a new epoch")
}
