package route

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/estimate"
	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/openai"
)

func TestErrorTable(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{&ledger.Rejection{Reason: ledger.ReasonTenantKV, RetryAfter: time.Second}, 429, "tenant_kv_quota"},
		{&ledger.Rejection{Reason: ledger.ReasonTenantSlots, RetryAfter: time.Second}, 429, "tenant_slot_quota"},
		{&ledger.Rejection{Reason: ledger.ReasonTenantTokenRate, RetryAfter: time.Second}, 429, "tenant_token_rate"},
		{&ledger.Rejection{Reason: ledger.ReasonTenantRequestRate, RetryAfter: time.Second}, 429, "tenant_request_rate"},
		{&ledger.Rejection{Reason: ledger.ReasonEngineKV, RetryAfter: time.Second}, 503, "engine_kv"},
		{&ledger.Rejection{Reason: ledger.ReasonRecovering, RetryAfter: time.Second}, 503, "recovering"},
		{&ledger.Rejection{Reason: ledger.ReasonBreakerOpen, Engine: "gpu-0", RetryAfter: time.Second}, 503, "breaker_open"},
		{&ledger.Rejection{Reason: ledger.ReasonTooLarge}, 400, "too_large"},
		{ErrUnauthorized, 401, "invalid_api_key"},
		{ledger.ErrClosed, 503, "ledger_unavailable"},
		{ErrPoolNotConfigured, 503, "pool_not_configured"},
		{ErrUpstreamTimeout, 504, "upstream_timeout"},
	} {
		if ae := toAPIError(tc.err); ae.status != tc.status || ae.code != tc.code {
			t.Errorf("%v: %d %s, want %d %s", tc.err, ae.status, ae.code, tc.status, tc.code)
		} else if rej := ledger.AsRejection(tc.err); rej != nil && rej.RetryAfter > 0 && ae.retryAfter != rej.RetryAfter {
			t.Errorf("%v: Retry-After hint %s, want the rejection's %s", tc.err, ae.retryAfter, rej.RetryAfter)
		}
	}
}

// A rate budget's 429 says when the tenant's window frees enough: its
// Retry-After is the hint rounded up to whole seconds, never jittered
// earlier; other hints are jittered over 0.5-1.5×.
func TestRateRetryAfterExact(t *testing.T) {
	for _, tc := range []struct {
		reason ledger.Reason
		hint   time.Duration
		lo, hi int
	}{
		{ledger.ReasonTenantTokenRate, 41200 * time.Millisecond, 42, 42},
		{ledger.ReasonTenantRequestRate, 300 * time.Millisecond, 1, 1},
		{ledger.ReasonTenantKV, 40 * time.Second, 20, 60},
	} {
		for range 20 {
			w := httptest.NewRecorder()
			writeError(w, toAPIError(&ledger.Rejection{Reason: tc.reason, RetryAfter: tc.hint}))
			got, err := strconv.Atoi(w.Header().Get("Retry-After"))
			if w.Code != http.StatusTooManyRequests || err != nil || got < tc.lo || got > tc.hi {
				t.Fatalf("%s with hint %s: %d, Retry-After %q; want 429 and %d..%d", tc.reason, tc.hint, w.Code, w.Header().Get("Retry-After"), tc.lo, tc.hi)
			}
		}
	}
}

func TestConfigValidateNamesFlags(t *testing.T) {
	c := Defaults()
	c.Admission, c.QueueDepth, c.MaxN, c.PromptTokens, c.TokenizeTimeout = "yolo", -1, 0, "exact", 0
	err := c.Validate()
	for _, want := range []string{"--config", "--admission", "--id", "--queue-depth", "--max-n",
		`--prompt-tokens = "exact": want estimate or tokenize`, "--tokenize-timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to name %s", err, want)
		}
	}
	env := map[string]string{"LEASEHOLD_LEDGER": "grpc://reserver:7400", "LEASEHOLD_QUEUE_DEPTH": "7", "LEASEHOLD_PROMPT_TOKENS": "tokenize", "LEASEHOLD_TOKENIZE_TIMEOUT": "750ms"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c, err = ParseFlags([]string{"--config", "f.yaml", "--id", "r1"}, lookup, &strings.Builder{})
	if err != nil || c.Ledger != "grpc://reserver:7400" || c.QueueDepth != 7 || c.PromptTokens != PromptTokenize || c.TokenizeTimeout != 750*time.Millisecond {
		t.Errorf("env config: %+v, %v", c, err)
	}
	if c, _ := ParseFlags([]string{"--config", "f.yaml", "--id", "r1", "--ledger", "grpc://reserver:7400"}, func(string) (string, bool) { return "", false }, &strings.Builder{}); c.PromptTokens != PromptEstimate {
		t.Errorf("--prompt-tokens defaults to %q, want %q", c.PromptTokens, PromptEstimate)
	}
	env["LEASEHOLD_PROMPT_TOKENS"] = "bytes"
	if _, err := ParseFlags([]string{"--config", "f.yaml", "--id", "r1"}, lookup, &strings.Builder{}); err == nil || !strings.Contains(err.Error(), "--prompt-tokens") {
		t.Errorf("LEASEHOLD_PROMPT_TOKENS=bytes: %v, want an error naming --prompt-tokens", err)
	}
	var help strings.Builder
	_, _ = ParseFlags([]string{"--help"}, lookup, &help)
	for _, f := range []string{"-prompt-tokens", "-tokenize-timeout", "-max-model-len"} {
		if !strings.Contains(help.String(), f) {
			t.Errorf("--help does not list %s", f)
		}
	}
}

// FuzzParseRequest: no input panics, and an accepted request is within
// its limits and forwards a body without the router's fields.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`,
		`{"model":"m","prompt":"x","n":3,"stream":true,"stream_options":{"include_usage":false},"priority":"batch"}`,
		`{"model":"m","prompt":[1,2,3],"best_of":4,"n":2}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"max_completion_tokens":1e3}`,
		`{"model":"m","prompt":[[1]],"max_tokens":-1}`, `[]`, `null`, `{"model":{}}`, `{"model":"m","prompt":"a"}{}`,
		`{"model":"m","prompt":"x","max_tokens":5000,"max_tokens":1}`, `{"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":true},"model":"m"}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:,"}},{"type":"input_audio"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"file"}]},{"role":"assistant","content":[{"type":"refusal","refusal":"no"}]}]}`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	lim := limits{maxModelLen: func(ledger.PoolID) int64 { return 2048 }, maxN: 16}
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		r, err := parseRequest(body, chat, lim, 64)
		if err != nil {
			if _, ok := err.(*badRequest); !ok {
				t.Fatalf("error %T %v, want *badRequest", err, err)
			}
			return
		}
		if r.model == "" || r.n < 1 || r.n > 16 || r.maxTokens < 0 || r.maxTokens > 2048 || len(r.prefix) > 64 {
			t.Fatalf("accepted out of limits: %+v", r)
		}
		if r.promptBytes < 0 || (r.promptTokens == 0 && r.promptBytes == 0 && !chat) {
			t.Fatalf("completions request with no prompt accepted: %q", body)
		}
		for k, c := range r.media {
			if c < 0 || (c > 0 && !chat) {
				t.Fatalf("%d %s items in a %v request: %q", c, estimate.KindNames[k], map[bool]string{true: "chat", false: "completions"}[chat], body)
			}
		}
		kv, slots, _ := estimate.NewEstimator(2, fleet.DefaultMediaTokens).Demand(r.prompt(), 2048, 0)
		if kv < 1 || kv > 2048*16 || slots != r.n {
			t.Fatalf("demand kv %d slots %d for %+v", kv, slots, r)
		}
		out, err := r.upstreamBody()
		if err != nil {
			t.Fatalf("upstream body: %v", err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("upstream body is not a JSON object: %v", err)
		}
		if _, ok := m["priority"]; ok {
			t.Fatalf("priority forwarded: %s", out)
		}
		if r.stream && !strings.Contains(string(m["stream_options"]), `"include_usage":true`) {
			t.Fatalf("streaming without include_usage: %s", out)
		}
		// The engine reads what the router validated: each field once,
		// with the value the router read.
		if n := openai.Members(out); n != len(m) {
			t.Fatalf("upstream body names %d fields for %d distinct: %s", n, len(m), out)
		}
		for k, v := range r.fields {
			if k == "priority" || (k == "stream_options" && r.stream) {
				continue
			}
			var a, b bytes.Buffer
			if json.Compact(&a, v) != nil || json.Compact(&b, m[k]) != nil || a.String() != b.String() {
				t.Fatalf("field %q: the router read %s, the engine gets %s", k, v, m[k])
			}
		}
	})
}

// BenchmarkParseRequest is what reading and forwarding a chat request's
// body costs a router, the report benchmark's request.
func BenchmarkParseRequest(b *testing.B) {
	body := []byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":32,"messages":[` +
		`{"role":"system","content":"You are terse."},` +
		`{"role":"user","content":"Summarize capacity leasing in one short sentence, please."}]}`)
	lim := limits{maxModelLen: func(ledger.PoolID) int64 { return 2048 }, maxN: 16}
	b.ReportAllocs()
	for b.Loop() {
		r, err := parseRequest(body, true, lim, 64)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.upstreamBody(); err != nil {
			b.Fatal(err)
		}
	}
}
