package route

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/enginesim"
	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	lhredis "github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// harness is one in-process Router on a real Redis ledger in front of
// in-process simulated engines.
type harness struct {
	t       *testing.T
	url     string
	r       *Router
	l       ledger.Ledger
	rs      *redisserver.Server
	engines []*enginesim.Engine
	client  *http.Client
	fleet   *fleet.Fleet
}

type harnessOpts struct {
	engines   int
	kv, slots int
	speed     float64
	output    int
	extra     string // fleet YAML after the pools
	cfg       func(*Config)
	// retryAfter is the pool's retry_after (default 200ms).
	retryAfter string
	// pool is more of the pool's YAML (indented as its fields).
	pool string
	// media is each engine's --media-tokens.
	media int
	// wrap, when set, stands in front of each engine's handler.
	wrap func(http.Handler) http.Handler
}

func newHarness(t *testing.T, o harnessOpts) *harness {
	t.Helper()
	h := &harness{t: t, client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}}
	var b strings.Builder
	if o.retryAfter == "" {
		o.retryAfter = "200ms"
	}
	fmt.Fprintf(&b, "pools:\n  - name: m\n    retry_after: %s\n%s    engines:\n", o.retryAfter, o.pool)
	for i := range o.engines {
		eng, url := serveSim(t, enginesim.Config{Model: "m", KVTokens: int64(o.kv), Slots: o.slots, Speed: o.speed, OutputTokens: o.output, MaxModelLen: min(2048, o.kv), MediaTokens: o.media}, o.wrap)
		h.engines = append(h.engines, eng)
		fmt.Fprintf(&b, "      - {id: gpu-%d, url: %q, kv_tokens: %d, slots: %d, stale_after: 0s}\n", i, url, o.kv, o.slots)
	}
	b.WriteString(o.extra)
	f, err := fleet.Parse([]byte(b.String()))
	if err != nil {
		t.Fatalf("fleet: %v\n%s", err, b.String())
	}
	h.fleet = f
	h.rs, h.l = redisLedger(t, f)
	cfg := Defaults()
	cfg.Listen, cfg.ID, cfg.FleetFile, cfg.Ledger = "127.0.0.1:0", "test", "fleet.yaml", h.rs.URL()
	cfg.MaxModelLen = 2048
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	t.Cleanup(h.client.CloseIdleConnections)
	r := startRouter(t, cfg, Options{Fleet: f, Ledger: h.l, LeaseConfig: callTimeouts(300 * time.Millisecond)})
	h.r, h.url = r, "http://"+r.Addr()
	waitHTTP(t, h.url+"/readyz", 10*time.Second)
	return h
}

// serveSim runs an in-process simulated engine behind a loopback HTTP
// server until the test ends; wrap, when set, stands in front of the
// engine's handler. It returns the engine and the server's URL.
func serveSim(t testing.TB, cfg enginesim.Config, wrap func(http.Handler) http.Handler) (*enginesim.Engine, string) {
	t.Helper()
	eng, err := enginesim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := eng.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { eng.Close(); srv.Close() })
	return eng, srv.URL
}

// redisLedger starts a Redis and opens a ledger on it with f's lease
// options; both end with the test.
func redisLedger(t testing.TB, f *fleet.Fleet) (*redisserver.Server, ledger.Ledger) {
	t.Helper()
	rs := redisserver.Start(t)
	l, err := lhredis.Open(rs.URL(), lhredis.Options{Options: f.Lease.LedgerOptions()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return rs, l
}

// callTimeouts is an Options.LeaseConfig that bounds each ledger call and
// each release at d.
func callTimeouts(d time.Duration) func(*lease.Config) {
	return func(c *lease.Config) { c.CallTimeout, c.ReleaseTimeout = d, d }
}

func (h *harness) stats() ledger.PoolStats {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := h.l.Stats(ctx, "m")
	if err != nil {
		h.t.Fatalf("ledger stats: %v", err)
	}
	return st
}

// waitNoLeases waits until the ledger holds no lease in pool m.
func (h *harness) waitNoLeases(within time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for {
		st := h.stats()
		if st.Leases == 0 {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("ledger still holds %d leases after %s", st.Leases, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stream is an open streaming response.
type stream struct {
	resp   *http.Response
	br     *bufio.Reader
	cancel context.CancelFunc
}

// mustStream is openStream for a stream that must open: it fails the test,
// naming the request what, with the status and body of a refusal.
func (h *harness) mustStream(t *testing.T, what, key string, body map[string]any, hdr ...string) *stream {
	t.Helper()
	s, status, b := h.openStream(t, key, body, hdr...)
	if s == nil {
		t.Fatalf("%s: %d %s", what, status, b)
	}
	return s
}

// openStream posts a streaming request (chat when body has messages) and
// returns once the first event arrived (the lease is held and the engine
// is generating).
func (h *harness) openStream(t *testing.T, key string, body map[string]any, hdr ...string) (*stream, int, []byte) {
	t.Helper()
	body["stream"] = true
	ctx, cancel := context.WithCancel(context.Background())
	data := mustJSON(body)
	path := "/v1/completions"
	if _, ok := body["messages"]; ok {
		path = "/v1/chat/completions"
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url+path, strings.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := h.client.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("stream: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, resp.StatusCode, b
	}
	s := &stream{resp: resp, br: bufio.NewReader(resp.Body), cancel: cancel}
	if _, err := s.br.ReadString('\n'); err != nil {
		t.Fatalf("first event: %v", err)
	}
	return s, http.StatusOK, nil
}

func (s *stream) close() { s.cancel(); s.resp.Body.Close() }

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

const tenants = `tenants:
  - {name: acme, api_keys: ["sk-acme"], kv_share: 1}
  - {name: tiny, api_keys: ["sk-tiny"], kv_share: 0.1}
priorities:
  - {name: interactive, max_fill: 1.0}
  - {name: batch, max_fill: 0.5}
lease:
  session_ttl: 1s
  recovery_window: 0s
`

func TestBadInputTakesNoLease(t *testing.T) {
	h := newHarness(t, harnessOpts{engines: 1, kv: 1024, slots: 8, speed: 10, output: 16, extra: tenants,
		pool: "    media_tokens: {audio: 0}\n",
		cfg:  func(c *Config) { c.MaxBodyBytes = 4096; c.MaxN = 8 }})
	chat := func(extra string) string {
		return `{"model":"m","messages":[{"role":"user","content":"hi"}]` + extra + `}`
	}
	for _, tc := range []struct {
		name, path, key, body string
		hdr                   []string
		status                int
		code, param           string
	}{
		{"no key", "chat", "", chat(""), nil, 401, "invalid_api_key", ""},
		{"unknown key", "chat", "sk-nope", chat(""), nil, 401, "invalid_api_key", ""},
		{"malformed JSON", "chat", "sk-acme", `{"model":`, nil, 400, "invalid_request", ""},
		{"not an object", "chat", "sk-acme", `[1,2]`, nil, 400, "invalid_request", ""},
		{"null body", "chat", "sk-acme", `null`, nil, 400, "invalid_request", ""},
		{"trailing data", "chat", "sk-acme", chat("") + `{}`, nil, 400, "invalid_request", ""},
		{"missing model", "chat", "sk-acme", `{"messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request", "model"},
		{"model not a string", "chat", "sk-acme", `{"model":7,"messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request", "model"},
		{"unknown model", "chat", "sk-acme", `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`, nil, 404, "model_not_found", "model"},
		{"missing messages", "chat", "sk-acme", `{"model":"m"}`, nil, 400, "invalid_request", "messages"},
		{"empty messages", "chat", "sk-acme", `{"model":"m","messages":[]}`, nil, 400, "invalid_request", "messages"},
		{"message without role", "chat", "sk-acme", `{"model":"m","messages":[{"content":"hi"}]}`, nil, 400, "invalid_request", "messages[0].role"},
		{"bad content", "chat", "sk-acme", `{"model":"m","messages":[{"role":"user","content":5}]}`, nil, 400, "invalid_request", "messages[0].content"},
		{"unknown content part", "chat", "sk-acme", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"file","file":{"file_id":"f"}}]}]}`, nil, 400, "invalid_request", "messages[0].content[1].type"},
		{"audio on a pool without audio", "chat", "sk-acme", `{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"UklGRg==","format":"wav"}}]}]}`, nil, 400, "invalid_request", "messages"},
		{"missing prompt", "completions", "sk-acme", `{"model":"m"}`, nil, 400, "invalid_request", "prompt"},
		{"prompt batch", "completions", "sk-acme", `{"model":"m","prompt":["a","b"]}`, nil, 400, "invalid_request", "prompt"},
		{"empty prompt", "completions", "sk-acme", `{"model":"m","prompt":""}`, nil, 400, "invalid_request", "prompt"},
		{"max_tokens zero", "chat", "sk-acme", chat(`,"max_tokens":0`), nil, 400, "invalid_request", "max_tokens"},
		{"max_tokens negative", "chat", "sk-acme", chat(`,"max_tokens":-5`), nil, 400, "invalid_request", "max_tokens"},
		{"max_tokens above context", "chat", "sk-acme", chat(`,"max_tokens":4096`), nil, 400, "invalid_request", "max_tokens"},
		// The engine reports a context of 1024, below --max-model-len 2048.
		{"max_tokens above the engines' reported context", "chat", "sk-acme", chat(`,"max_tokens":1025`), nil, 400, "invalid_request", "max_tokens"},
		{"max_completion_tokens above the engines' reported context", "chat", "sk-acme", chat(`,"max_completion_tokens":1500`), nil, 400, "invalid_request", "max_completion_tokens"},
		{"max_tokens absurd", "chat", "sk-acme", chat(`,"max_tokens":1e15`), nil, 400, "invalid_request", "max_tokens"},
		{"max_tokens fraction", "chat", "sk-acme", chat(`,"max_tokens":1.5`), nil, 400, "invalid_request", "max_tokens"},
		{"max_tokens string", "chat", "sk-acme", chat(`,"max_tokens":"10"`), nil, 400, "invalid_request", "max_tokens"},
		{"max_completion_tokens zero", "chat", "sk-acme", chat(`,"max_completion_tokens":0`), nil, 400, "invalid_request", "max_completion_tokens"},
		{"n zero", "chat", "sk-acme", chat(`,"n":0`), nil, 400, "invalid_request", "n"},
		{"n huge", "chat", "sk-acme", chat(`,"n":100000`), nil, 400, "invalid_request", "n"},
		{"tools not an array", "chat", "sk-acme", chat(`,"tools":{"type":"function"}`), nil, 400, "invalid_request", "tools"},
		{"functions not an array", "chat", "sk-acme", chat(`,"functions":"get_weather"`), nil, 400, "invalid_request", "functions"},
		{"stream not bool", "chat", "sk-acme", chat(`,"stream":"yes"`), nil, 400, "invalid_request", "stream"},
		{"stream_options without stream", "chat", "sk-acme", chat(`,"stream_options":{"include_usage":true}`), nil, 400, "invalid_request", "stream_options"},
		{"unknown priority header", "chat", "sk-acme", chat(""), []string{"X-Priority", "urgent"}, 400, "invalid_priority", "priority"},
		{"unknown priority body", "chat", "sk-acme", chat(`,"priority":"urgent"`), nil, 400, "invalid_priority", "priority"},
		{"numeric priority", "chat", "sk-acme", chat(`,"priority":3`), nil, 400, "invalid_request", "priority"},
		{"body too large", "completions", "sk-acme", `{"model":"m","prompt":"` + strings.Repeat("x", 8000) + `"}`, nil, 413, "body_too_large", ""},
		{"can never fit", "chat", "sk-acme", chat(`,"max_tokens":600,"n":2`), nil, 400, "too_large", "max_tokens"},
		// Token-id prompts are counted exactly, so the router refuses what
		// no engine's context (1024) holds, before any lease.
		{"token prompt + max_tokens above context", "completions", "sk-acme",
			`{"model":"m","prompt":` + tokenIDs(100) + `,"max_tokens":1000}`, nil, 400, "context_length_exceeded", "max_tokens"},
		{"token prompt fills the context", "completions", "sk-acme",
			`{"model":"m","prompt":` + tokenIDs(1024) + `}`, nil, 400, "context_length_exceeded", "prompt"},
		{"beyond tenant quota", "chat", "sk-tiny", chat(`,"max_tokens":500`), nil, 400, "too_large", "max_tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/v1/chat/completions"
			if tc.path == "completions" {
				path = "/v1/completions"
			}
			status, hdr, body, err := post(context.Background(), h.client, h.url+path, tc.key, tc.body, tc.hdr...)
			if err != nil {
				t.Fatal(err)
			}
			code, param := errCode(body)
			if status != tc.status || code != tc.code || param != tc.param {
				t.Errorf("got %d code %q param %q, want %d %q %q; body %s", status, code, param, tc.status, tc.code, tc.param, body)
			}
			if ct := hdr.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
		})
	}
	st := h.stats()
	if st.Leases != 0 || st.Counters[ledger.CounterGrants] != 0 {
		t.Errorf("after bad input: %d leases, %d grants; want none", st.Leases, st.Counters[ledger.CounterGrants])
	}
	// A good request still works and its lease is gone afterwards.
	status, _, body, err := post(context.Background(), h.client, h.url+"/v1/chat/completions", "sk-acme", chat(`,"max_tokens":8`))
	if err != nil || status != 200 {
		t.Fatalf("good request: %d %v %s", status, err, body)
	}
	// So does a token-id prompt that fits the context exactly.
	status, _, body, err = post(context.Background(), h.client, h.url+"/v1/completions", "sk-acme",
		`{"model":"m","prompt":`+tokenIDs(100)+`,"max_tokens":924}`)
	if err != nil || status != 200 {
		t.Fatalf("token prompt of 100 + max_tokens 924 = the context 1024: %d %v %s", status, err, body)
	}
	h.waitNoLeases(2 * time.Second)
}

// tokenIDs is a JSON array of n token ids.
func tokenIDs(n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(i%50 + 1)
	}
	return "[" + strings.Join(ids, ",") + "]"
}

func TestTenantQuota429(t *testing.T) {
	h := newHarness(t, harnessOpts{engines: 2, kv: 4096, slots: 8, speed: 1, output: 2000, extra: tenants})
	// tiny's quota is floor(0.1 × 8192) = 819 KV tokens.
	long := h.mustStream(t, "first request", "sk-tiny", map[string]any{"model": "m", "prompt": "hold this", "max_tokens": 600, "ignore_eos": true})
	defer long.close()
	st, hdr, body, err := post(context.Background(), h.client, h.url+"/v1/completions", "sk-tiny", `{"model":"m","prompt":"more","max_tokens":300}`)
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := errCode(body); st != 429 || code != string(ledger.ReasonTenantKV) {
		t.Fatalf("over quota: %d %s, want 429 %s", st, body, ledger.ReasonTenantKV)
	}
	if ra, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After %q, want whole seconds >= 1", hdr.Get("Retry-After"))
	}
	// Another tenant is not affected.
	if st, _, body, _ := post(context.Background(), h.client, h.url+"/v1/completions", "sk-acme", `{"model":"m","prompt":"x","max_tokens":4}`); st != 200 {
		t.Errorf("other tenant: %d %s", st, body)
	}
	// Client disconnects mid-stream: the lease is released and the engine
	// aborts the request.
	long.close()
	h.waitNoLeases(3 * time.Second)
	deadline := time.Now().Add(3 * time.Second)
	for h.engines[0].Stats().RequestsAborted+h.engines[1].Stats().RequestsAborted == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no engine saw the abort")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPriorityHeadroom(t *testing.T) {
	h := newHarness(t, harnessOpts{engines: 1, kv: 2048, slots: 64, speed: 1, output: 2000, extra: tenants,
		cfg: func(c *Config) { c.QueueTimeout = 300 * time.Millisecond }})
	const batchCap = 1024 // floor(2048 × 0.5)
	var (
		mu       sync.Mutex
		held     []*stream
		rejected []string
		wg       sync.WaitGroup
	)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, status, body := h.openStream(t, "sk-acme", map[string]any{"model": "m", "prompt": "batch job", "max_tokens": 400, "ignore_eos": true}, "X-Priority", "batch")
			mu.Lock()
			defer mu.Unlock()
			if s != nil {
				held = append(held, s)
				return
			}
			code, _ := errCode(body)
			rejected = append(rejected, fmt.Sprintf("%d %s", status, code))
		}()
	}
	wg.Wait()
	defer func() {
		for _, s := range held {
			s.close()
		}
	}()
	st := h.stats()
	if got := st.Engines[0].ReservedKV; got > batchCap || len(held) == 0 {
		t.Errorf("batch holds %d KV tokens in %d leases, want 1..%d", got, len(held), batchCap)
	}
	for _, r := range rejected {
		if r != "503 "+string(ledger.ReasonPriorityHeadroom) {
			t.Errorf("batch rejection %q, want 503 %s", r, ledger.ReasonPriorityHeadroom)
		}
	}
	if len(rejected) == 0 {
		t.Errorf("every batch request was admitted; headroom not enforced")
	}
	// Interactive work still fits in the headroom above the batch fill.
	is, status, body := h.openStream(t, "sk-acme", map[string]any{"model": "m", "prompt": "urgent", "max_tokens": 800, "priority": "interactive"})
	if is == nil {
		t.Errorf("interactive: %d %s", status, body)
	} else {
		is.close()
	}
	t.Logf("batch: %d held (%d KV), rejected %v", len(held), st.Engines[0].ReservedKV, rejected)
}

func TestFencedStreamEndsWithError(t *testing.T) {
	h := newHarness(t, harnessOpts{engines: 1, kv: 4096, slots: 8, speed: 1, output: 2000, extra: tenants})
	s := h.mustStream(t, "stream", "sk-acme", map[string]any{"model": "m", "prompt": "long", "max_tokens": 1000, "ignore_eos": true})
	defer s.close()
	h.rs.Kill() // the ledger is gone: the router must fence itself
	start := time.Now()
	rest, _ := io.ReadAll(s.br)
	took := time.Since(start)
	if !strings.Contains(string(rest), `"code":"ledger_unavailable"`) {
		t.Errorf("stream ended without a ledger_unavailable error event; tail: %s", tail(string(rest), 300))
	}
	if took > 3*time.Second {
		t.Errorf("fencing took %s, want within the 1s session TTL (plus a margin)", took)
	}
	deadline := time.Now().Add(2 * time.Second)
	for h.engines[0].Stats().RequestsAborted == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the engine did not see the upstream request aborted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Fail-closed: no new admissions, and not ready.
	st, hdr, body, _ := post(context.Background(), h.client, h.url+"/v1/completions", "sk-acme", `{"model":"m","prompt":"x","max_tokens":4}`)
	if code, _ := errCode(body); st != 503 || code != "ledger_unavailable" || hdr.Get("Retry-After") == "" {
		t.Errorf("while fenced: %d %s (Retry-After %q), want 503 ledger_unavailable", st, body, hdr.Get("Retry-After"))
	}
	resp, err := http.Get(h.url + "/readyz")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != 503 {
			t.Errorf("/readyz while fenced: %d, want 503", resp.StatusCode)
		}
	}
	t.Logf("stream cut %s after the ledger died", took.Round(time.Millisecond))
}

func TestModelsHealthMetrics(t *testing.T) {
	h := newHarness(t, harnessOpts{engines: 1, kv: 4096, slots: 8, speed: 20, output: 8, extra: tenants})
	// One streamed chat with include_usage: the usage chunk reaches the
	// client; one without: it does not.
	for _, inc := range []bool{true, false} {
		body := map[string]any{"model": "m", "messages": []map[string]string{{"role": "user", "content": "hello"}}, "max_tokens": 5, "stream": true}
		if inc {
			body["stream_options"] = map[string]bool{"include_usage": true}
		}
		st, _, data, err := post(context.Background(), h.client, h.url+"/v1/chat/completions", "sk-acme", body)
		if err != nil || st != 200 {
			t.Fatalf("stream: %d %v", st, err)
		}
		if got := strings.Contains(string(data), `"prompt_tokens"`); got != inc {
			t.Errorf("include_usage=%v: usage chunk present = %v", inc, got)
		}
	}
	h.waitNoLeases(2 * time.Second)
	req, _ := http.NewRequest(http.MethodGet, h.url+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer sk-acme")
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"id":"m"`) {
		t.Errorf("/v1/models: %s", b)
	}
	resp, err = h.client.Get(h.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{
		`leasehold_router_requests_total{code="",pool="m",status="200"} 2`,
		`leasehold_router_grants_total{pool="m"} 2`,
		`leasehold_router_fenced{pool="m"} 0`,
		`leasehold_router_lease_hold_seconds_count{pool="m"} 2`,
		`leasehold_router_queue_depth{pool="m"} 0`,
		`leasehold_router_upstream_seconds_count`,
		`leasehold_router_prompt_estimate_ratio{pool="m"}`,
		`leasehold_router_media_tokens_per_item{kind="image",pool="m"} 4096`,
	} {
		if !strings.Contains(string(b), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// TestShutdownTwice: a second Shutdown (e.g. a signal handler racing a
// deferred cleanup) returns the first result instead of panicking.
func TestShutdownTwice(t *testing.T) {
	h := newHarness(t, harnessOpts{engines: 1, kv: 4096, slots: 8, speed: 10, output: 16, extra: tenants})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	first := h.r.Shutdown(ctx)
	if second := h.r.Shutdown(ctx); second != first {
		t.Errorf("second Shutdown = %v, want the first call's result %v", second, first)
	}
}

// TestFleetViewWakesQueuedRequests: router B queues a request while router
// A holds the only slot; when A's request ends, B hears of it from its
// fleet view and admits within a poll, long before the ledger's retry hint
// (30s, jittered to at least 15s, beyond B's 10s queue timeout: without
// the view B would answer 503). B's ranking view also shows A's lease.
func TestFleetViewWakesQueuedRequests(t *testing.T) {
	h := newHarness(t, harnessOpts{engines: 1, kv: 4096, slots: 1, speed: 1, output: 16, extra: tenants, retryAfter: "30s"})
	cfg := Defaults()
	cfg.Listen, cfg.ID, cfg.FleetFile, cfg.Ledger = "127.0.0.1:0", "b", "fleet.yaml", h.rs.URL()
	cfg.MaxModelLen, cfg.ViewInterval, cfg.QueueTimeout = 2048, 50*time.Millisecond, 10*time.Second
	b := startRouter(t, cfg, Options{Fleet: h.fleet, Ledger: h.l})
	bURL := "http://" + b.Addr()
	waitHTTP(t, bURL+"/readyz", 10*time.Second)

	s := h.mustStream(t, "router A", "sk-acme", map[string]any{"model": "m", "prompt": "hold the slot", "max_tokens": 1000, "ignore_eos": true})
	defer s.close()
	deadline := time.Now().Add(3 * time.Second)
	for {
		v := b.adm.views("m")
		if len(v) == 1 && v[0].usedSlots == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("router B's view never showed router A's lease: %+v", v)
		}
		time.Sleep(20 * time.Millisecond)
	}

	type result struct {
		code int
		body string
		at   time.Time
	}
	done := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, bURL+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"next","max_tokens":4}`))
		req.Header.Set("Authorization", "Bearer sk-acme")
		resp, err := h.client.Do(req)
		if err != nil {
			done <- result{code: -1, body: err.Error(), at: time.Now()}
			return
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		done <- result{code: resp.StatusCode, body: string(data), at: time.Now()}
	}()
	// B's request is queued once its first Acquire was refused.
	deadline = time.Now().Add(3 * time.Second)
	for b.pools["m"].q.Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("router B's request never queued")
		}
		time.Sleep(10 * time.Millisecond)
	}
	released := time.Now()
	s.close() // A's lease is released after the abort grace (250ms)
	r := <-done
	if r.code != http.StatusOK {
		t.Fatalf("router B answered %d %s, want 200 once router A released", r.code, r.body)
	}
	if waited := r.at.Sub(released); waited > 5*time.Second {
		t.Errorf("router B admitted %s after router A's release, want within a few polls", waited)
	}
	resp, err := h.client.Get(bURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	metrics, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(metrics), `leasehold_router_fleet_view_polls_total{pool="m",result="freed"}`) ||
		!strings.Contains(string(metrics), `leasehold_router_fleet_view_polls_total{pool="m",result="ok"}`) {
		t.Errorf("router B's metrics lack fleet view polls (ok and freed):\n%s", metrics)
	}
}
