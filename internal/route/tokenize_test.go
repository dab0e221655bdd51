package route

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/enginesim"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/openai"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// The --prompt-tokens tests run the in-process harness (a Router on a real
// Redis ledger in front of in-process simulated engines). A held stream's
// lease, read from the ledger, shows what was reserved: prompt + max_tokens.

// oddTexts are prompts whose bytes/4 estimate is far from the engines'
// count (enginesim counts punctuation, CJK and emoji above bytes/4).
var oddTexts = []struct{ name, text string }{
	{"english", "Explain how a KV cache works in one short paragraph"},
	{"cjk", "日本語のテキストを要約してください。東京は日本の首都です。"},
	{"emoji", "🎉🚀😀👍🔥 party time 🎈🎈🎈"},
	{"punctuation", strings.Repeat("!?.", 100) + " ;;;; ---- ((()))"},
	{"code", `func main() { fmt.Println("héllo, 世界"); os.Exit(0) }`},
}

// heldOutput is the max_tokens of held streams: long enough that the lease
// is still there when the ledger is read.
const heldOutput = 200

// promptBody is a chat or completions body for text.
func promptBody(chat bool, text string, maxTokens int) map[string]any {
	b := map[string]any{"model": "m", "ignore_eos": true}
	if maxTokens > 0 {
		b["max_tokens"] = maxTokens
	}
	if chat {
		b["messages"] = []map[string]string{{"role": "system", "content": "be brief"}, {"role": "user", "content": text}}
	} else {
		b["prompt"] = text
	}
	return b
}

// reservedKV is the KV tokens the ledger holds for leases in pool.
func (h *harness) reservedKV(pool ledger.PoolID) int64 {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := h.l.Stats(ctx, pool)
	if err != nil {
		h.t.Fatalf("ledger stats of %s: %v", pool, err)
	}
	var kv int64
	for _, e := range st.Engines {
		kv += e.ReservedKV
	}
	return kv
}

// heldReservation opens a stream of body, reads what the ledger reserved
// for it, and closes it again.
func (h *harness) heldReservation(t *testing.T, pool ledger.PoolID, body map[string]any) int64 {
	t.Helper()
	s := h.mustStream(t, "stream", "sk-acme", body)
	kv := h.reservedKV(pool)
	s.close()
	deadline := time.Now().Add(3 * time.Second)
	for h.reservedKV(pool) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("pool %s still holds a lease after the stream closed", pool)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return kv
}

// enginePromptTokens sends body (not streamed, max_tokens 1) through the
// router and returns the engine's usage.prompt_tokens.
func (h *harness) enginePromptTokens(t *testing.T, body map[string]any) int64 {
	t.Helper()
	body = withField(body, "max_tokens", 1)
	delete(body, "stream") // openStream set it
	path := "/v1/completions"
	if _, ok := body["messages"]; ok {
		path = "/v1/chat/completions"
	}
	status, _, data, err := post(context.Background(), h.client, h.url+path, "sk-acme", body)
	if err != nil || status != 200 {
		t.Fatalf("request: %d %v %s", status, err, data)
	}
	var r struct {
		Usage openai.Usage `json:"usage"`
	}
	if err := json.Unmarshal(data, &r); err != nil || r.Usage.PromptTokens < 1 {
		t.Fatalf("usage of %s: %v", data, err)
	}
	return r.Usage.PromptTokens
}

// promptEstimate is what pool's estimator makes of body's prompt now.
func (h *harness) promptEstimate(t *testing.T, pool ledger.PoolID, body map[string]any, chat bool) int64 {
	t.Helper()
	req, err := parseRequest([]byte(mustJSON(body)), chat, h.r.lim, h.r.cfg.AffinityBytes)
	if err != nil {
		t.Fatal(err)
	}
	return h.r.pools[pool].est.PromptTokens(req.prompt())
}

// withField returns a copy of m with k set to v.
func withField(m map[string]any, k string, v any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for key, val := range m {
		out[key] = val
	}
	out[k] = v
	return out
}

func (h *harness) metrics(t *testing.T) string {
	t.Helper()
	resp, err := h.client.Get(h.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// With --prompt-tokens=tokenize the lease is exactly the engine's
// usage.prompt_tokens + max_tokens, for chat and completions, on text the
// byte estimate gets wrong (a worst_case pool: an elastic one reserves a
// learned output once a few answers have finished).
func TestPromptTokensTokenizeIsExact(t *testing.T) {
	h := newHarness(t, harnessOpts{engines: 2, kv: 4096, slots: 8, speed: 1, output: 2000, extra: tenants, pool: "    reserve: worst_case\n",
		cfg: func(c *Config) { c.PromptTokens = PromptTokenize }})
	for _, chat := range []bool{false, true} {
		for _, tc := range oddTexts {
			t.Run(fmt.Sprintf("%s/chat=%v", tc.name, chat), func(t *testing.T) {
				body := promptBody(chat, tc.text, heldOutput)
				kv := h.heldReservation(t, "m", body)
				prompt := h.enginePromptTokens(t, body)
				if kv != prompt+heldOutput {
					t.Errorf("leased %d KV tokens, want the engine's prompt_tokens %d + max_tokens %d = %d (bytes/4 = %d)",
						kv, prompt, heldOutput, prompt+heldOutput, (len(tc.text)+3)/4)
				}
			})
		}
	}
	// Tool definitions and tool calls are part of the prompt: the engine
	// counts them, and so does the lease.
	t.Run("tools/chat=true", func(t *testing.T) {
		body := toolsBody()
		kv := h.heldReservation(t, "m", body)
		prompt := h.enginePromptTokens(t, body)
		bare := h.enginePromptTokens(t, withField(body, "tools", nil))
		if kv != prompt+heldOutput || prompt-bare < 100 {
			t.Errorf("leased %d KV tokens, want the engine's prompt_tokens %d + %d; the tools are %d of them (want 100 or more)",
				kv, prompt, heldOutput, prompt-bare)
		}
	})
	// A token-id prompt needs no call and is exact too.
	if kv := h.heldReservation(t, "m", map[string]any{"model": "m", "prompt": []int{1, 2, 3, 4, 5}, "max_tokens": heldOutput, "ignore_eos": true}); kv != 5+heldOutput {
		t.Errorf("token-id prompt: leased %d, want %d", kv, 5+heldOutput)
	}
	m := h.metrics(t)
	if strings.Contains(m, "leasehold_router_tokenize_errors_total{") {
		t.Errorf("tokenize errors counted with healthy engines:\n%s", grepLines(m, "tokenize_errors"))
	}
	if !strings.Contains(m, `leasehold_router_admit_seconds_count{pool="m",result="granted"}`) {
		t.Errorf("/metrics lacks the admission attempts' latency:\n%s", grepLines(m, "admit_seconds_count"))
	}
}

// Without tokenize, the calibrated byte estimate undershoots such text on a
// cold router: the gap --prompt-tokens=tokenize closes.
func TestPromptTokensEstimateUndershootsOddText(t *testing.T) {
	h := newHarness(t, harnessOpts{engines: 1, kv: 4096, slots: 8, speed: 1, output: 2000, extra: tenants})
	body := promptBody(false, oddTexts[3].text, heldOutput) // punctuation
	kv := h.heldReservation(t, "m", body)
	prompt := h.enginePromptTokens(t, body)
	if kv-heldOutput >= prompt {
		t.Errorf("estimate mode leased %d prompt tokens for %d actual; expected the byte estimate to undershoot this text", kv-heldOutput, prompt)
	}
	t.Logf("estimate %d, engine %d prompt tokens", kv-heldOutput, prompt)
}

// toolsBody is a chat request with tool definitions and a tool call in
// its history.
func toolsBody() map[string]any {
	var tools []any
	for _, name := range []string{"get_weather", "search_flights", "book_hotel"} {
		tools = append(tools, map[string]any{"type": "function", "function": map[string]any{
			"name": name, "description": "Look up " + name + " for the user and answer with the result in a short sentence.",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{
				"city": map[string]any{"type": "string", "description": "the city name, in English"},
				"date": map[string]any{"type": "string", "description": "the day, as YYYY-MM-DD"}},
				"required": []string{"city"}}}})
	}
	return map[string]any{"model": "m", "max_tokens": heldOutput, "ignore_eos": true, "tools": tools,
		"messages": []map[string]any{
			{"role": "user", "content": "What is the weather in Paris tomorrow?"},
			{"role": "assistant", "content": nil, "tool_calls": []map[string]any{{"id": "call_1", "type": "function",
				"function": map[string]any{"name": "get_weather", "arguments": `{"city":"Paris","date":"2026-12-01"}`}}}},
			{"role": "tool", "tool_call_id": "call_1", "content": "12 C, light rain"},
		}}
}

// In estimate mode tool definitions and calls are counted too: a cold
// router (no calibration yet) leases at least what the engine counts.
func TestPromptTokensEstimateCountsTools(t *testing.T) {
	h := newHarness(t, harnessOpts{engines: 1, kv: 4096, slots: 8, speed: 1, output: 2000, extra: tenants})
	body := toolsBody()
	kv := h.heldReservation(t, "m", body)
	prompt := h.enginePromptTokens(t, body)
	t.Logf("estimate %d, engine %d prompt tokens", kv-heldOutput, prompt)
	if kv-heldOutput < prompt {
		t.Errorf("estimate mode leased %d prompt tokens for %d actual: the tools are not counted", kv-heldOutput, prompt)
	}
}

// SGLang's /tokenize counts a prompt string, not chat messages: on a pool
// of SGLang engines completions are counted exactly, and chat requests are
// leased for their estimate without a call and counted as unsupported.
func TestPromptTokensTokenizeSGLang(t *testing.T) {
	pool := fmt.Sprintf(`  - name: sg
    engines:
      - {id: sg-0, url: %q, format: sglang, kv_tokens: 4096, slots: 8, stale_after: 0s}
`, startSim(t, enginesim.Config{Model: "sg", KVTokens: 4096, MaxModelLen: 2048, Format: telemetry.FormatSGLang}))
	h := newHarness(t, harnessOpts{engines: 1, kv: 4096, slots: 8, speed: 1, output: 2000, extra: pool + tenants,
		cfg: func(c *Config) { c.PromptTokens = PromptTokenize }})
	text := oddTexts[3].text // punctuation: far from the estimate
	completion := withField(promptBody(false, text, heldOutput), "model", "sg")
	kv := h.heldReservation(t, "sg", completion)
	if prompt := h.enginePromptTokens(t, completion); kv != prompt+heldOutput {
		t.Errorf("completions on SGLang: leased %d, want the engine's prompt_tokens %d + %d", kv, prompt, heldOutput)
	}
	chat := withField(promptBody(true, text, heldOutput), "model", "sg")
	estimate := h.promptEstimate(t, "sg", chat, true)
	if kv := h.heldReservation(t, "sg", chat); kv != estimate+heldOutput {
		t.Errorf("chat on SGLang: leased %d, want the estimate %d + %d", kv, estimate, heldOutput)
	}
	m := h.metrics(t)
	if !strings.Contains(m, `leasehold_router_tokenize_errors_total{pool="sg",reason="unsupported"} 1`) ||
		strings.Contains(m, `leasehold_router_tokenize_errors_total{pool="sg",reason="http_error"}`) {
		t.Errorf("want one unsupported and no http_error tokenize error for the SGLang pool:\n%s", grepLines(m, "tokenize_errors"))
	}
}

// When /tokenize fails the request is still admitted, with the estimate,
// and the failure is counted; once it works again counts are exact.
func TestPromptTokensTokenizeFallback(t *testing.T) {
	h := newHarness(t, harnessOpts{engines: 1, kv: 4096, slots: 8, speed: 1, output: 2000, extra: tenants,
		cfg: func(c *Config) { c.PromptTokens = PromptTokenize }})
	yes, no := true, false
	h.engines[0].Fail(enginesim.FailChange{Tokenize: &yes})
	text := oddTexts[3].text
	body := promptBody(false, text, heldOutput)
	estimate := h.promptEstimate(t, "m", body, false)
	if kv := h.heldReservation(t, "m", body); kv != estimate+heldOutput {
		t.Errorf("with /tokenize failing: leased %d, want the estimate %d + %d", kv, estimate, heldOutput)
	}
	chat := promptBody(true, text, 4)
	if status, _, data, err := post(context.Background(), h.client, h.url+"/v1/chat/completions", "sk-acme", chat); err != nil || status != 200 {
		t.Fatalf("chat with /tokenize failing: %d %v %s", status, err, data)
	}
	if m := h.metrics(t); !strings.Contains(m, `leasehold_router_tokenize_errors_total{pool="m",reason="http_error"} 2`) {
		t.Errorf("/metrics lacks 2 http_error tokenize errors:\n%s", grepLines(m, "tokenize_errors"))
	}
	h.waitNoLeases(3 * time.Second)

	h.engines[0].Fail(enginesim.FailChange{Tokenize: &no})
	prompt := h.enginePromptTokens(t, body)
	if kv := h.heldReservation(t, "m", body); kv != prompt+heldOutput {
		t.Errorf("after /tokenize recovered: leased %d, want %d", kv, prompt+heldOutput)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
