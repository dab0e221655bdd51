package route

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/enginesim"
	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// startSim runs an in-process simulated engine for the test and returns its
// URL.
func startSim(t *testing.T, cfg enginesim.Config) string {
	t.Helper()
	if cfg.Model == "" {
		cfg.Model = "m"
	}
	cfg.Speed, cfg.OutputTokens = 1, 2000
	eng, err := enginesim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(eng.Handler())
	t.Cleanup(func() { eng.Close(); srv.Close() })
	return srv.URL
}

// Each pool's context length comes from the fleet file or its engines
// (vLLM and SGLang GET /v1/models, TGI GET /info), else --max-model-len
// (2048 here): max_tokens is bounded by the smallest reported, and a
// request without max_tokens reserves the largest, an engine that has not
// reported counting as --max-model-len.
func TestContextLengthPerPool(t *testing.T) {
	dead := "http://" + freeAddr(t)
	pools := fmt.Sprintf(`  - name: big
    engines:
      - {id: big-0, url: %q, kv_tokens: 8192, slots: 8, stale_after: 0s}
  - name: mixed
    engines:
      - {id: short, url: %q, kv_tokens: 4096, slots: 8, stale_after: 0s}
      - {id: long, url: %q, format: sglang, kv_tokens: 4096, slots: 8, stale_after: 0s}
  - name: tgi
    engines:
      - {id: tgi-0, url: %q, format: tgi, kv_tokens: 4096, slots: 8, stale_after: 0s}
  - name: fixed
    max_model_len: 3000
    engines:
      - {id: fixed-0, url: %q, kv_tokens: 4096, slots: 8, stale_after: 0s}
  - name: half
    engines:
      - {id: gone, url: %q, kv_tokens: 16, slots: 8, stale_after: 0s}
      - {id: live, url: %q, kv_tokens: 4096, slots: 8, stale_after: 0s}
  - name: dead
    engines:
      - {id: dead-0, url: %q, kv_tokens: 4096, slots: 8, stale_after: 0s}
`,
		startSim(t, enginesim.Config{Model: "big", KVTokens: 8192, MaxModelLen: 4096}),
		startSim(t, enginesim.Config{Model: "mixed", KVTokens: 4096, MaxModelLen: 1024}),
		startSim(t, enginesim.Config{Model: "mixed", KVTokens: 4096, MaxModelLen: 3072, Format: telemetry.FormatSGLang}),
		startSim(t, enginesim.Config{Model: "tgi", KVTokens: 4096, MaxModelLen: 1536, Format: telemetry.FormatTGI}),
		startSim(t, enginesim.Config{Model: "fixed", KVTokens: 4096, MaxModelLen: 2048}),
		dead,
		startSim(t, enginesim.Config{Model: "half", KVTokens: 4096, MaxModelLen: 1024}),
		dead)
	// Pool m's engine (kv 1024) reports 1024. The router counts prompts
	// with /tokenize: TGI engines are not asked.
	h := newHarness(t, harnessOpts{engines: 1, kv: 1024, slots: 8, speed: 1, output: 2000, extra: pools + tenants,
		cfg: func(c *Config) { c.PromptTokens = PromptTokenize }})

	for _, tc := range []struct {
		pool           ledger.PoolID
		limit, reserve int64
		live           bool // an engine serves requests
	}{
		{"m", 1024, 1024, true},
		{"big", 4096, 4096, true},   // above --max-model-len
		{"mixed", 1024, 3072, true}, // fits both; reserves for the longer
		{"tgi", 1536, 1536, true},   // from GET /info
		{"fixed", 3000, 3000, true}, // the fleet file's, not the engine's 2048
		{"half", 1024, 2048, true},  // gone has not reported: --max-model-len
		{"dead", 2048, 2048, false}, // nothing reported: --max-model-len
	} {
		t.Run(string(tc.pool), func(t *testing.T) {
			if got := h.r.lens.get(tc.pool); got.limit != tc.limit || got.reserve != tc.reserve {
				t.Errorf("context length %+v, want limit %d reserve %d", got, tc.limit, tc.reserve)
			}
			for _, field := range []string{"max_tokens", "max_completion_tokens"} {
				body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],%q:%d}`, tc.pool, field, tc.limit+1)
				status, _, data, err := post(context.Background(), h.client, h.url+"/v1/chat/completions", "sk-acme", body)
				if err != nil {
					t.Fatal(err)
				}
				if code, param := errCode(data); status != 400 || code != "invalid_request" || param != field ||
					!strings.Contains(string(data), fmt.Sprintf("want 1..%d", tc.limit)) {
					t.Errorf("%s = limit+1: %d %s, want 400 invalid_request naming %s and 1..%d", field, status, data, field, tc.limit)
				}
			}
			if !tc.live {
				return
			}
			// Without max_tokens the lease is the pool's reservation.
			kv := h.heldReservation(t, tc.pool, map[string]any{"model": string(tc.pool), "prompt": "hold this", "ignore_eos": true})
			if kv != tc.reserve {
				t.Errorf("no max_tokens: leased %d KV tokens, want %d", kv, tc.reserve)
			}
			// max_tokens up to the limit is admitted.
			kv = h.heldReservation(t, tc.pool, map[string]any{"model": string(tc.pool), "prompt": "hold this", "max_tokens": tc.limit / 2, "ignore_eos": true})
			if kv < tc.limit/2 || kv > tc.reserve {
				t.Errorf("max_tokens %d: leased %d KV tokens, want %d..%d", tc.limit/2, kv, tc.limit/2, tc.reserve)
			}
		})
	}
	// In the mixed pool a counted prompt that fits only the long engine
	// (3072) is never offered to the short one (1024),
	// whatever engine its prefix prefers; a short request may go to either.
	engines := map[string]int{}
	for i := range 12 {
		prompt := fmt.Sprintf("request %d: %s", i, strings.Repeat("lease the capacity first. ", 170))
		body := fmt.Sprintf(`{"model":"mixed","prompt":%q,"max_tokens":8}`, prompt)
		status, hdr, data, err := post(context.Background(), h.client, h.url+"/v1/completions", "sk-acme", body)
		if err != nil {
			t.Fatal(err)
		}
		if status != 200 || hdr.Get("X-Leasehold-Engine") != "long" {
			t.Fatalf("prompt of over 1024 tokens in the mixed pool: %d on %q %s, want 200 on long", status, hdr.Get("X-Leasehold-Engine"), data)
		}
		status, hdr, data, err = post(context.Background(), h.client, h.url+"/v1/completions", "sk-acme",
			fmt.Sprintf(`{"model":"mixed","prompt":"short %d","max_tokens":8}`, i))
		if err != nil || status != 200 {
			t.Fatalf("short request in the mixed pool: %d %s %v", status, data, err)
		}
		engines[hdr.Get("X-Leasehold-Engine")]++
	}
	if engines["short"] == 0 {
		t.Errorf("short requests went to %v: the short engine was never chosen, so the test above proves nothing", engines)
	}
	if m := h.metrics(t); !strings.Contains(m, `leasehold_router_tokenize_errors_total{pool="tgi",reason="unsupported"}`) {
		t.Errorf("/metrics lacks tokenize errors for the TGI pool:\n%s", grepLines(m, "tokenize_errors"))
	}
}

// fit drops engines too small for an exact prompt and moves them last for
// an estimated one; equal engines, or no engine that fits, leave the order.
func TestContextFit(t *testing.T) {
	l := ctxLen{limit: 1024, reserve: 4096, engines: map[ledger.EngineID]int64{"a": 1024, "b": 4096, "c": 2048, "d": 4096}}
	cands := []ledger.EngineID{"a", "b", "c", "d"}
	for _, tc := range []struct {
		need  int64
		exact bool
		want  []ledger.EngineID
	}{
		{1024, true, cands},
		{1025, true, []ledger.EngineID{"b", "c", "d"}},
		{1025, false, []ledger.EngineID{"b", "c", "d", "a"}},
		{3000, true, []ledger.EngineID{"b", "d"}},
		{3000, false, []ledger.EngineID{"b", "d", "a", "c"}},
		{5000, true, cands}, // nothing fits: checkContext's to refuse
		{0, true, cands},
	} {
		if got := l.fit(slices.Clone(cands), tc.need, tc.exact); !slices.Equal(got, tc.want) {
			t.Errorf("fit(need %d, exact %v) = %v, want %v", tc.need, tc.exact, got, tc.want)
		}
	}
	equal := ctxLen{limit: 2048, reserve: 2048}
	if got := equal.fit(cands, 4000, true); !slices.Equal(got, cands) {
		t.Errorf("equal engines: %v, want %v unchanged", got, cands)
	}
}

// An engine that answered is asked again every recheck: a longer context
// after a redeploy reaches the pool's bounds (so a request without
// max_tokens is not under-leased), and a failed re-ask keeps the answer.
func TestContextLengthRecheck(t *testing.T) {
	var maxLen atomic.Int64
	maxLen.Store(4096)
	var down atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "restarting", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"m","max_model_len":%d}]}`, maxLen.Load())
	}))
	t.Cleanup(srv.Close)
	f, err := fleet.Parse([]byte(fmt.Sprintf(`pools:
  - name: m
    engines:
      - {id: e0, url: %q, kv_tokens: 100000, slots: 8}
`, srv.URL) + tenants))
	if err != nil {
		t.Fatal(err)
	}
	c := newContextLens(f, 2048, srv.Client(), time.Second, slog.New(slog.DiscardHandler))
	c.recheck = 50 * time.Millisecond
	want := func(limit int64) {
		t.Helper()
		if got := c.get("m"); got.limit != limit || got.reserve != limit {
			t.Fatalf("context length %+v, want %d", got, limit)
		}
	}
	c.discover(t.Context(), "m")
	want(4096)
	maxLen.Store(8192) // redeployed with a longer context
	c.discover(t.Context(), "m")
	want(4096) // not due yet
	time.Sleep(60 * time.Millisecond)
	c.discover(t.Context(), "m")
	want(8192)
	down.Store(true)
	time.Sleep(60 * time.Millisecond)
	c.discover(t.Context(), "m")
	want(8192) // a failed re-ask keeps the answer
}
