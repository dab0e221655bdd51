package route

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/enginesim"
	"github.com/leasehold/leasehold/internal/freeport"
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
	_, url := serveSim(t, cfg, nil)
	return url
}

// Each pool's context length comes from the fleet file or its engines
// (vLLM and SGLang GET /v1/models, TGI GET /info), else --max-model-len
// (2048 here): max_tokens is bounded by the smallest reported, and a
// request without max_tokens reserves the largest, an engine that has not
// reported counting as --max-model-len.
func TestContextLengthPerPool(t *testing.T) {
	dead, dead2 := "http://"+freeport.AddrT(t), "http://"+freeport.AddrT(t) // two engines that never answer
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
		dead2)
	// Pool m's engine (kv 1024) reports 1024. The router counts prompts
	// with /tokenize: TGI engines are not asked.
	// Pool m is worst_case: a lease without max_tokens reserves the
	// whole context even where that fills the engine.
	h := newHarness(t, harnessOpts{engines: 1, kv: 1024, slots: 8, speed: 1, output: 2000, extra: pools + tenants, pool: "    reserve: worst_case\n",
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
			if got := h.r.lens.Get(tc.pool); got.Limit != tc.limit || got.Reserve != tc.reserve {
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
