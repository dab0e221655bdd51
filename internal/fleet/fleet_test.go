package fleet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// base is a small valid fleet file the error cases edit.
const base = `pools:
  - name: p
    engines:
      - id: e0
        url: http://127.0.0.1:9001
        kv_tokens: 1000
        slots: 8
tenants:
  - name: t
    api_keys: ["k"]
    kv_share: 0.5
priorities:
  - {name: interactive, max_fill: 0.95}
lease:
  session_ttl: 10s
`

// designSample is the fleet file the original design brief showed (the
// full one is in docs/design.md, "Fleet file"); it must keep parsing.
const designSample = `pools:
  - name: llama-3-70b            # the OpenAI "model" a request names
    engines:
      - id: gpu-0
        url: http://127.0.0.1:9001
        kv_tokens: 400000        # optional where the engine's metrics reveal it
        slots: 256
tenants:
  - name: acme
    api_keys: ["sk-acme-1"]      # Authorization: Bearer <key>; also "sha256:<hex>"
    kv_share: 0.5                # of each pool's KV tokens
priorities:                      # chosen by header X-Priority or the body's "priority"
  - {name: interactive, max_fill: 0.95}
  - {name: batch, max_fill: 0.70}
lease:
  session_ttl: 10s
`

func TestParseDesignSampleDefaults(t *testing.T) {
	f, err := Parse([]byte(designSample))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := &Fleet{
		Pools: []Pool{{Name: "llama-3-70b", RetryAfter: time.Second, MediaTokens: DefaultMediaTokens,
			Reserve: ledger.ReserveElastic, GrowthHeadroom: DefaultGrowthHeadroom, Breaker: ledger.BreakerSpec{}.WithDefaults(), Engines: []Engine{{
				ID: "gpu-0", URL: "http://127.0.0.1:9001", MetricsURL: "http://127.0.0.1:9001/metrics",
				Format: telemetry.FormatVLLM, KVTokens: 400000, Slots: 256,
				StaleAfter: 10 * time.Second, StalePolicy: ledger.StaleHold,
			}}}},
		Tenants:         []Tenant{{Name: "acme", APIKeys: []KeyHash{HashAPIKey("sk-acme-1")}, KVShare: 0.5}},
		Priorities:      []ledger.PrioritySpec{{Name: "interactive", MaxFill: 0.95}, {Name: "batch", MaxFill: 0.70}},
		DefaultPriority: "interactive",
		Lease:           Lease{SessionTTL: 10 * time.Second, LeaseTTL: 30 * time.Second, RenewInterval: 10 * time.Second / 3, RecoveryWindow: 10 * time.Second},
	}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("Parse:\n got %+v\nwant %+v", f, want)
	}
}

func TestParseImplicitPriorityAndLeaseDefaults(t *testing.T) {
	in := strings.Replace(base, "priorities:\n  - {name: interactive, max_fill: 0.95}\n", "", 1)
	in = strings.Replace(in, "session_ttl: 10s", "session_ttl: 30s", 1)
	f, err := Parse([]byte(in))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if want := []ledger.PrioritySpec{{Name: "standard", MaxFill: 1}}; !reflect.DeepEqual(f.Priorities, want) || f.DefaultPriority != "standard" {
		t.Errorf("priorities = %+v default %q, want implicit standard", f.Priorities, f.DefaultPriority)
	}
	want := Lease{SessionTTL: 30 * time.Second, RenewInterval: 10 * time.Second, LeaseTTL: 30 * time.Second, RecoveryWindow: 30 * time.Second}
	if f.Lease != want {
		t.Errorf("Lease = %+v, want %+v", f.Lease, want)
	}
	if o := f.Lease.LedgerOptions(); o.RecoveryWindow != 30*time.Second {
		t.Errorf("LedgerOptions = %+v", o)
	}
	f.Lease.RecoveryWindow = 0
	if o := f.Lease.LedgerOptions(); o.RecoveryWindow >= 0 {
		t.Errorf("LedgerOptions with the window disabled = %+v, want negative (no window)", o)
	}
	// The window follows the session TTL, below the ledger's 10s default
	// too.
	short, err := Parse([]byte(strings.Replace(in, "session_ttl: 30s", "session_ttl: 3s", 1)))
	if err != nil {
		t.Fatalf("Parse with session_ttl 3s: %v", err)
	}
	if short.Lease.RecoveryWindow != 3*time.Second {
		t.Errorf("recovery window with session_ttl 3s = %s, want 3s (the TTL)", short.Lease.RecoveryWindow)
	}
	f, err = Parse([]byte(strings.Replace(in, "session_ttl: 30s", "session_ttl: 30s\n  orphan_hold: 15s", 1)))
	if err != nil {
		t.Fatalf("Parse with orphan_hold: %v", err)
	}
	if o := f.Lease.LedgerOptions(); o.OrphanHold != 15*time.Second {
		t.Errorf("LedgerOptions with orphan_hold 15s = %+v", o)
	}
}

func TestExampleFile(t *testing.T) {
	path := filepath.Join("..", "..", "deploy", "fleet.example.yaml")
	f, err := Load(path)
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	p, ok := f.Pool("llama-3-70b")
	if !ok || len(p.Engines) != 2 {
		t.Fatalf("pool llama-3-70b = %+v, %v", p, ok)
	}
	if e := p.Engines[1]; !e.KVFromMetrics || e.KVTokens != 0 || e.Headroom != 0.9 || e.StalePolicy != ledger.StaleBlock ||
		e.MetricsURL != "http://127.0.0.1:9002/metrics" {
		t.Errorf("gpu-1 = %+v, want discovered capacity, headroom 0.9, block, default metrics URL", e)
	}
	q, _ := f.Pool("qwen-2.5-7b")
	if q.Engines[0].Format != telemetry.FormatSGLang || q.Engines[1].Format != telemetry.FormatTGI {
		t.Errorf("qwen formats = %s, %s", q.Engines[0].Format, q.Engines[1].Format)
	}
	if p.Breaker != (ledger.BreakerSpec{Failures: 5, Cooldown: 10 * time.Second, Probes: 1, Successes: 2}) || q.Breaker != p.Breaker {
		t.Errorf("breakers = %+v, %+v; want the example's (the defaults) and the defaults", p.Breaker, q.Breaker)
	}
	if p.MaxModelLen != 0 || q.MaxModelLen != 32768 {
		t.Errorf("max_model_len = %d, %d; want 0 (discovered) and 32768", p.MaxModelLen, q.MaxModelLen)
	}
	if p.MediaTokens != DefaultMediaTokens || q.MediaTokens != (MediaTokens{Video: DefaultMediaTokens.Video}) {
		t.Errorf("media_tokens = %+v, %+v; want the defaults, and image and audio refused with video's default", p.MediaTokens, q.MediaTokens)
	}
	if ten, ok := f.TenantForKey("sk-acme-example-1"); !ok || ten != "acme" {
		t.Errorf("TenantForKey(acme key) = %q, %v", ten, ok)
	}
	if f.DefaultPriority != "standard" || len(f.Priorities) != 3 {
		t.Errorf("priorities = %+v default %q", f.Priorities, f.DefaultPriority)
	}
	if got := len(f.Targets()); got != 4 {
		t.Errorf("Targets() = %d engines, want 4", got)
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(strings.ToLower(b2s(b)), "password") {
		t.Errorf("example holds something that looks like a secret")
	}
}

func b2s(b []byte) string { return string(b) }

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		edit func(string) string
		want []string // substrings of the error
	}{
		{"unknown top-level field", appendLine("bogus: 1"), []string{`line 16: unknown field "bogus" in the top level (allowed: pools, tenants, priorities, default_priority, priority_policy, lease)`}},
		{"unknown engine field", repl("slots: 8", "slots: 8\n        kv_token: 5"), []string{`line 8: unknown field "kv_token" in an engine (allowed: id, url, kv_tokens, slots, format, metrics_url, stale_after, stale_policy, headroom)`}},
		{"unknown pool field", repl("  - name: p\n", "  - name: p\n    model: x\n"), []string{`unknown field "model" in a pool (allowed: name, engines, retry_after, max_model_len, media_tokens, reserve, growth_headroom, breaker, first_byte_timeout, engine_priority)`}},
		{"unknown breaker field", repl("  - name: p\n", "  - name: p\n    breaker:\n      failures: 3\n      timeout: 2s\n"), []string{`line 5: unknown field "timeout" in breaker (allowed: failures, cooldown, probes, successes)`}},
		{"breaker failures zero", repl("  - name: p\n", "  - name: p\n    breaker: {failures: 0}\n"), []string{"pools[0].breaker.failures: must be in 1..1048576 (consecutive failed dispatches that open an engine's breaker), or -1 to turn the breaker off, got 0"}},
		{"breaker failures below -1", repl("  - name: p\n", "  - name: p\n    breaker: {failures: -2}\n"), []string{"pools[0].breaker.failures: must be in 1..1048576", "got -2"}},
		{"breaker cooldown zero", repl("  - name: p\n", "  - name: p\n    breaker: {cooldown: 0s}\n"), []string{"pools[0].breaker.cooldown: must be in 1ms..24h0m0s, got 0s"}},
		{"breaker probes zero", repl("  - name: p\n", "  - name: p\n    breaker: {probes: 0}\n"), []string{"pools[0].breaker.probes: must be in 1..1048576 (probe requests a half-open engine takes at a time, fleet-wide), got 0"}},
		{"breaker successes negative", repl("  - name: p\n", "  - name: p\n    breaker: {successes: -1}\n"), []string{"pools[0].breaker.successes: must be in 1..1048576 (successful probes that close an engine's breaker), got -1"}},
		{"breaker not a mapping", repl("  - name: p\n", "  - name: p\n    breaker: 5\n"), []string{"line 3", "cannot unmarshal"}},
		{"reserve unknown", repl("  - name: p\n", "  - name: p\n    reserve: optimistic\n"), []string{`pools[0].reserve: must be elastic or worst_case, got "optimistic"`}},
		{"growth_headroom too large", repl("  - name: p\n", "  - name: p\n    growth_headroom: 0.7\n"), []string{"pools[0].growth_headroom: must be in [0, 0.5], got 0.7"}},
		{"growth_headroom negative", repl("  - name: p\n", "  - name: p\n    growth_headroom: -0.1\n"), []string{"pools[0].growth_headroom: must be in [0, 0.5], got -0.1"}},
		{"growth_headroom with worst_case", repl("  - name: p\n", "  - name: p\n    reserve: worst_case\n    growth_headroom: 0.1\n"), []string{"pools[0].growth_headroom: must be 0 or omitted with reserve: worst_case"}},
		{"media_tokens negative", repl("  - name: p\n", "  - name: p\n    media_tokens: {audio: -1}\n"), []string{"pools[0].media_tokens.audio: must be in 0..1099511627776, got -1 (KV tokens per audio; 0 refuses requests with one)"}},
		{"media_tokens unknown kind", repl("  - name: p\n", "  - name: p\n    media_tokens: {images: 10}\n"), []string{`unknown field "images" in media_tokens (allowed: image, audio, video)`}},
		{"unknown tenant field", repl("kv_share: 0.5", "kv_share: 0.5\n    quota: 3"), []string{`unknown field "quota" in a tenant`}},
		{"unknown priority field", repl("max_fill: 0.95}", "max_fill: 0.95, weight: 2}"), []string{`unknown field "weight" in a priority (allowed: name, max_fill, ttft_slo)`}},
		{"ttft_slo zero", repl("max_fill: 0.95}", "max_fill: 0.95, ttft_slo: 0s}"), []string{"priorities[0].ttft_slo: must be in 10ms..24h0m0s, got 0s"}},
		{"ttft_slo negative", repl("max_fill: 0.95}", "max_fill: 0.95, ttft_slo: -1s}"), []string{"priorities[0].ttft_slo: must be in 10ms..24h0m0s, got -1s"}},
		{"ttft_slo without unit", repl("max_fill: 0.95}", "max_fill: 0.95, ttft_slo: 500}"), []string{"cannot unmarshal !!int `500` into time.Duration"}},
		{"unknown lease field", repl("session_ttl: 10s", "session_ttl: 10s\n  ttl: 3s"), []string{`unknown field "ttl" in lease`}},
		{"repeated field", repl("slots: 8", "slots: 8\n        slots: 9"), []string{`line 8: mapping key "slots" already defined at line 7`}},
		{"not a mapping", func(string) string { return "- a\n- b\n" }, []string{"cannot unmarshal"}},
		{"empty file", func(string) string { return "" }, []string{"the file is empty"}},
		{"two documents", appendLine("---\npools: []"), []string{"more than one YAML document"}},
		{"no pools key", func(s string) string { return s[strings.Index(s, "tenants:"):] }, []string{"pools: must list at least one pool"}},
		{"empty pools", func(s string) string { return strings.Replace(s, s[:strings.Index(s, "tenants:")], "pools: []\n", 1) }, []string{"pools: must list at least one pool"}},
		{"pool name missing", repl("  - name: p\n", "  - name: \"\"\n"), []string{"pools[0].name: is required"}},
		{"pool name with a space", repl("  - name: p\n", "  - name: my pool\n"), []string{`pools[0].name: "my pool" must not contain spaces`}},
		{"duplicate pool", appendPool("p"), []string{`pools[1].name: "p" is already the name of pools[0]`}},
		{"pool without engines", func(s string) string {
			return strings.Replace(s, s[strings.Index(s, "    engines:"):strings.Index(s, "tenants:")], "    engines: []\n", 1)
		}, []string{"pools[0].engines: must list at least one engine"}},
		{"engine id missing", repl("- id: e0", "- id: \"\""), []string{"pools[0].engines[0].id: is required"}},
		{"one engine under two ids", repl("slots: 8\n", "slots: 8\n      - {id: e1, url: \"HTTP://127.0.0.1:9001/\", kv_tokens: 5, slots: 1}\n"), []string{`pools[0].engines[1].url: "HTTP://127.0.0.1:9001/" is the engine of pools[0].engines[0] already: one engine under two ids or in two pools is admitted against twice over`}},
		{"one engine in two pools", repl("tenants:", "  - name: q\n    engines: [{id: e, url: \"http://127.0.0.1:9001\", kv_tokens: 5, slots: 1}]\ntenants:"), []string{`pools[1].engines[0].url: "http://127.0.0.1:9001" is the engine of pools[0].engines[0] already`}},
		{"duplicate engine", repl("slots: 8\n", "slots: 8\n      - {id: e0, url: http://h:1, kv_tokens: 5, slots: 1}\n"), []string{`pools[0].engines[1].id: "e0" is already the id of pools[0].engines[0]`}},
		{"url missing", repl("        url: http://127.0.0.1:9001\n", ""), []string{"pools[0].engines[0].url: is required"}},
		{"url not http", repl("http://127.0.0.1:9001", "grpc://127.0.0.1:9001"), []string{`pools[0].engines[0].url: must be an http:// or https:// URL with a host, got "grpc://127.0.0.1:9001"`}},
		{"url without host", repl("http://127.0.0.1:9001", "http://"), []string{"pools[0].engines[0].url"}},
		{"metrics_url bad", repl("slots: 8", "slots: 8\n        metrics_url: /metrics"), []string{`pools[0].engines[0].metrics_url: must be an http:// or https:// URL with a host, got "/metrics"`}},
		{"kv_tokens zero", repl("kv_tokens: 1000", "kv_tokens: 0"), []string{"pools[0].engines[0].kv_tokens: must be > 0 and at most 1099511627776, got 0 (omit it to discover capacity from metrics)"}},
		{"kv_tokens negative", repl("kv_tokens: 1000", "kv_tokens: -5"), []string{"pools[0].engines[0].kv_tokens: must be > 0 and at most 1099511627776, got -5"}},
		{"kv_tokens too large", repl("kv_tokens: 1000", "kv_tokens: 2199023255553"), []string{"kv_tokens: must be > 0 and at most 1099511627776, got 2199023255553"}},
		{"kv_tokens not a number", repl("kv_tokens: 1000", "kv_tokens: lots"), []string{"line 6: cannot unmarshal !!str `lots` into int64"}},
		{"slots missing", repl("        slots: 8\n", ""), []string{"pools[0].engines[0].slots: must be > 0 and at most 1099511627776, got 0"}},
		{"slots negative", repl("slots: 8", "slots: -1"), []string{"pools[0].engines[0].slots: must be > 0 and at most 1099511627776, got -1"}},
		{"format unknown", repl("slots: 8", "slots: 8\n        format: triton"), []string{`pools[0].engines[0].format: must be vllm, sglang or tgi, got "triton"`}},
		{"stale_policy unknown", repl("slots: 8", "slots: 8\n        stale_policy: drop"), []string{`pools[0].engines[0].stale_policy: must be hold, block or ignore, got "drop"`}},
		{"stale_after negative", repl("slots: 8", "slots: 8\n        stale_after: -1s"), []string{"pools[0].engines[0].stale_after: must be in 0s..24h0m0s, got -1s"}},
		{"stale_after without unit", repl("slots: 8", "slots: 8\n        stale_after: 10"), []string{"line 8: cannot unmarshal !!int `10` into time.Duration"}},
		{"headroom with kv_tokens", repl("slots: 8", "slots: 8\n        headroom: 0.8"), []string{"pools[0].engines[0].headroom: applies only to capacity discovered from metrics"}},
		{"headroom zero", repl("kv_tokens: 1000", "headroom: 0"), []string{"pools[0].engines[0].headroom: must be in (0, 1], got 0"}},
		{"headroom above one", repl("kv_tokens: 1000", "headroom: 1.5"), []string{"pools[0].engines[0].headroom: must be in (0, 1], got 1.5"}},
		{"discovery without telemetry", repl("kv_tokens: 1000", "stale_after: 0s"), []string{"pools[0].engines[0].stale_after: is 0s (no telemetry), but kv_tokens is omitted"}},
		{"retry_after negative", repl("  - name: p\n", "  - name: p\n    retry_after: -2s\n"), []string{"pools[0].retry_after: must be in 0s..24h0m0s, got -2s"}},
		{"first_byte_timeout negative", repl("  - name: p\n", "  - name: p\n    first_byte_timeout: -1s\n"), []string{"pools[0].first_byte_timeout: must be in 0s..24h0m0s, got -1s"}},
		{"first_byte_timeout without unit", repl("  - name: p\n", "  - name: p\n    first_byte_timeout: 5\n"), []string{"line 3: cannot unmarshal !!int `5` into time.Duration"}},
		{"max_model_len zero", repl("  - name: p\n", "  - name: p\n    max_model_len: 0\n"), []string{"pools[0].max_model_len: must be in 16..1099511627776, got 0 (the engines' context length in tokens; omit it to discover it from the engines)"}},
		{"max_model_len negative", repl("  - name: p\n", "  - name: p\n    max_model_len: -4096\n"), []string{"pools[0].max_model_len: must be in 16..1099511627776, got -4096"}},
		{"max_model_len too small", repl("  - name: p\n", "  - name: p\n    max_model_len: 8\n"), []string{"pools[0].max_model_len: must be in 16..1099511627776, got 8"}},
		{"max_model_len too large", repl("  - name: p\n", "  - name: p\n    max_model_len: 2199023255553\n"), []string{"pools[0].max_model_len: must be in 16..1099511627776, got 2199023255553"}},
		{"max_model_len not a number", repl("  - name: p\n", "  - name: p\n    max_model_len: 8k\n"), []string{"line 3: cannot unmarshal !!str `8k` into int64"}},
		{"tenant name missing", repl("  - name: t\n", "  - name: \"\"\n"), []string{"tenants[0].name: is required"}},
		{"duplicate tenant", appendTenant("t", "other", "0.1"), []string{`tenants[1].name: "t" is already the name of tenants[0]`}},
		{"api_keys missing", repl(`    api_keys: ["k"]`+"\n", ""), []string{"tenants[0].api_keys: must list at least one key"}},
		{"api key empty", repl(`["k"]`, `["k", ""]`), []string{"tenants[0].api_keys[1]: must not be empty"}},
		{"api key padded", repl(`["k"]`, `[" k"]`), []string{"tenants[0].api_keys[0]: has leading or trailing whitespace"}},
		{"api key bad hash", repl(`["k"]`, `["sha256:abc"]`), []string{`tenants[0].api_keys[0]: must be "sha256:" followed by 64 hex digits`}},
		{"api key shared by tenants", appendTenant("u", "k", "0.1"), []string{"tenants[1].api_keys[0]: is the same key as tenants[0].api_keys[0]"}},
		{"api key plaintext and hash of it", repl(`["k"]`, `["k", "`+HashAPIKey("k").String()+`"]`), []string{"tenants[0].api_keys[1]: is the same key as tenants[0].api_keys[0]"}},
		{"kv_share missing", repl("    kv_share: 0.5\n", ""), []string{"tenants[0].kv_share: must be in (0, 1], got 0"}},
		{"kv_share above one", repl("kv_share: 0.5", "kv_share: 1.5"), []string{"tenants[0].kv_share: must be in (0, 1], got 1.5"}},
		{"kv_share NaN", repl("kv_share: 0.5", "kv_share: .nan"), []string{"tenants[0].kv_share: must be in (0, 1], got NaN"}},
		{"slot_share negative", repl("kv_share: 0.5", "kv_share: 0.5\n    slot_share: -0.1"), []string{"tenants[0].slot_share: must be in [0, 1], got -0.1"}},
		{"tokens_per_minute negative", repl("kv_share: 0.5", "kv_share: 0.5\n    tokens_per_minute: -1"),
			[]string{"tenants[0].tokens_per_minute: must be in 0..1099511627776, got -1 (tokens per minute in each pool, shared by every router; 0 or omitted for none)"}},
		{"requests_per_minute too large", repl("kv_share: 0.5", "kv_share: 0.5\n    requests_per_minute: 2199023255553"),
			[]string{"tenants[0].requests_per_minute: must be in 0..1099511627776, got 2199023255553 (requests per minute"}},
		{"tokens_per_minute not a number", repl("kv_share: 0.5", "kv_share: 0.5\n    tokens_per_minute: 20k"), []string{"cannot unmarshal !!str `20k` into int64"}},
		{"tenant pool unknown", repl("kv_share: 0.5", "kv_share: 0.5\n    pools: [q]"), []string{`tenants[0].pools[0]: "q" is not a pool in this file`}},
		{"tenant pool twice", repl("kv_share: 0.5", "kv_share: 0.5\n    pools: [p, p]"), []string{`tenants[0].pools[1]: "p" is listed twice`}},
		{"priority name missing", repl("{name: interactive, max_fill: 0.95}", "{max_fill: 0.95}"), []string{"priorities[0].name: is required"}},
		{"duplicate priority", repl("max_fill: 0.95}", "max_fill: 0.95}\n  - {name: interactive, max_fill: 0.5}"), []string{`priorities[1].name: "interactive" is already the name of priorities[0]`}},
		{"max_fill missing", repl(", max_fill: 0.95}", "}"), []string{"priorities[0].max_fill: must be in (0, 1], got 0"}},
		{"max_fill above one", repl("max_fill: 0.95", "max_fill: 1.2"), []string{"priorities[0].max_fill: must be in (0, 1], got 1.2"}},
		{"default_priority unknown", appendLine("default_priority: batch"), []string{`default_priority: "batch" is not a listed priority (want one of ["interactive"])`}},
		{"default_priority without priorities", func(s string) string {
			return strings.Replace(s, "priorities:\n  - {name: interactive, max_fill: 0.95}\n", "default_priority: batch\n", 1)
		}, []string{`default_priority: "batch" is not a listed priority (want one of ["standard"])`}},
		{"session_ttl below 1s", repl("session_ttl: 10s", "session_ttl: 500ms"), []string{"lease.session_ttl: must be in 1s..24h0m0s, got 500ms"}},
		{"renew_interval not below session_ttl", repl("session_ttl: 10s", "session_ttl: 10s\n  renew_interval: 10s"), []string{"lease.renew_interval: must be less than lease.session_ttl (10s), got 10s"}},
		{"renew_interval not below lease_ttl", repl("session_ttl: 10s", "session_ttl: 10s\n  renew_interval: 3s\n  lease_ttl: 2s"), []string{"lease.renew_interval: must be less than lease.lease_ttl (2s), got 3s"}},
		{"renew_interval zero", repl("session_ttl: 10s", "session_ttl: 10s\n  renew_interval: 0s"), []string{"lease.renew_interval: must be in 1ms..24h0m0s, got 0s"}},
		{"lease_ttl below 1s", repl("session_ttl: 10s", "session_ttl: 10s\n  renew_interval: 100ms\n  lease_ttl: 500ms"), []string{"lease.lease_ttl: must be in 1s..24h0m0s, got 500ms"}},
		{"orphan_hold negative", repl("session_ttl: 10s", "session_ttl: 10s\n  orphan_hold: -1s"), []string{"lease.orphan_hold: must be in 0s..24h0m0s, got -1s"}},
		{"recovery_window below session_ttl", repl("session_ttl: 10s", "session_ttl: 10s\n  recovery_window: 5s"), []string{"lease.recovery_window: must be 0s (disabled) or in lease.session_ttl (10s)..24h0m0s so every live holder can re-assert, got 5s"}},
		{"every problem at once", func(s string) string {
			s = strings.Replace(s, "kv_tokens: 1000", "kv_tokens: 0", 1)
			return strings.Replace(s, "max_fill: 0.95", "max_fill: 2", 1)
		}, []string{"pools[0].engines[0].kv_tokens", "priorities[0].max_fill"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.edit(base)
			if in == base {
				t.Fatalf("the edit did not change the file")
			}
			f, err := Parse([]byte(in))
			if err == nil {
				t.Fatalf("Parse accepted:\n%s\n=> %+v", in, f)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not match ErrInvalid", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n  %v\ndoes not contain\n  %s", err, w)
				}
			}
			if strings.Contains(tt.name, "api key") && strings.Contains(err.Error(), `"k"`) {
				t.Errorf("error echoes an API key: %v", err)
			}
		})
	}
}

func repl(old, new string) func(string) string {
	return func(s string) string { return strings.Replace(s, old, new, 1) }
}

func appendLine(l string) func(string) string {
	return func(s string) string { return s + l + "\n" }
}

func appendPool(name string) func(string) string {
	return repl("tenants:", "  - name: "+name+"\n    engines: [{id: e, url: http://h:1, kv_tokens: 5, slots: 1}]\ntenants:")
}

func appendTenant(name, key, share string) func(string) string {
	return repl("priorities:", "  - {name: "+name+", api_keys: ["+key+"], kv_share: "+share+"}\npriorities:")
}

func TestValidateBuiltInCode(t *testing.T) {
	f, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	f.Pools[0].Engines[0].KVFromMetrics = true // with KVTokens still set
	f.Pools[0].Engines[0].Headroom = 0.9
	err = f.Validate()
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Path != "pools[0].engines[0].kv_tokens" {
		t.Errorf("Validate = %v, want a FieldError on pools[0].engines[0].kv_tokens", err)
	}
	f.Priorities = nil
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "priorities: must not be empty") {
		t.Errorf("Validate with no priorities = %v", err)
	}
	f, _ = Parse([]byte(base))
	f.TTFTSLOs = map[ledger.PriorityName]time.Duration{"batch": time.Second}
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), `priorities: a ttft_slo is set for "batch", which is not a listed priority`) {
		t.Errorf("Validate with a ttft_slo for an unlisted class = %v", err)
	}
}

// priorities[].ttft_slo is optional, per class, and only routers read it.
func TestTTFTSLO(t *testing.T) {
	in := strings.Replace(base, "  - {name: interactive, max_fill: 0.95}\n",
		"  - {name: interactive, max_fill: 0.95, ttft_slo: 800ms}\n  - {name: batch, max_fill: 0.7}\n", 1)
	f, err := Parse([]byte(in))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if want := map[ledger.PriorityName]time.Duration{"interactive": 800 * time.Millisecond}; !reflect.DeepEqual(f.TTFTSLOs, want) {
		t.Errorf("TTFTSLOs = %v, want %v (batch has none)", f.TTFTSLOs, want)
	}
	specs, err := f.PoolSpecs(nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []ledger.PrioritySpec{{Name: "interactive", MaxFill: 0.95}, {Name: "batch", MaxFill: 0.7}}; !reflect.DeepEqual(specs[0].Priorities, want) {
		t.Errorf("the ledger's priorities %+v, want %+v: the SLO is the routers' alone", specs[0].Priorities, want)
	}
}

func TestTenantForKey(t *testing.T) {
	in := strings.Replace(base, `["k"]`, `["k", "`+HashAPIKey("hashed-key").String()+`"]`, 1)
	in = appendTenant("u", "other", "0.2")(in)
	f, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		key  string
		want ledger.TenantID
		ok   bool
	}{
		{"k", "t", true}, {"hashed-key", "t", true}, {"other", "u", true},
		{"", "", false}, {"K", "", false}, {"k ", "", false}, {HashAPIKey("k").String(), "", false},
	} {
		got, ok := f.TenantForKey(tt.key)
		if got != tt.want || ok != tt.ok {
			t.Errorf("TenantForKey(%q) = %q, %v; want %q, %v", tt.key, got, ok, tt.want, tt.ok)
		}
	}
	// Only hashes are kept.
	for _, ten := range f.Tenants {
		for _, k := range ten.APIKeys {
			if strings.Contains(k.String(), "hashed-key") || !strings.HasPrefix(k.String(), "sha256:") {
				t.Errorf("key kept as %s", k)
			}
		}
	}
}

func TestPoolSpecs(t *testing.T) {
	in := `pools:
  - name: a
    retry_after: 2s
    breaker: {failures: 3, cooldown: 30s}
    engines:
      - {id: fixed, url: "http://h:1", kv_tokens: 1000, slots: 8}
      - {id: disc, url: "http://h:2", slots: 8, headroom: 0.5, stale_policy: block, format: sglang}
  - name: b
    reserve: worst_case
    engines:
      - {id: fixed, url: "http://h:3", kv_tokens: 50, slots: 2, stale_after: 0s}
tenants:
  - {name: everywhere, api_keys: [k1], kv_share: 0.5, slot_share: 0.25}
  - {name: only-b, api_keys: [k2], kv_share: 1, pools: [b], tokens_per_minute: 20000, requests_per_minute: 60}
priorities:
  - {name: interactive, max_fill: 0.95}
  - {name: batch, max_fill: 0.7}
`
	f, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.PoolSpecs(nil)
	if !errors.Is(err, ErrCapacityUnknown) || !strings.Contains(err.Error(), "pool a engine disc: kv_tokens is not configured") ||
		!strings.Contains(err.Error(), "http://h:2/metrics") {
		t.Fatalf("PoolSpecs(nil) = %v, want ErrCapacityUnknown naming a/disc and its metrics URL", err)
	}
	if s, err := f.PoolSpec("b", nil); err != nil || len(s.Engines) != 1 {
		t.Errorf("PoolSpec(b, nil) = %+v, %v; want b alone to be configurable", s, err)
	}
	if _, err := f.PoolSpec("a", map[telemetry.EngineKey]int64{{Pool: "a", Engine: "disc"}: 1}); !errors.Is(err, ErrCapacityUnknown) ||
		!strings.Contains(err.Error(), "discovered capacity 1 × headroom 0.5 is less than one token") {
		t.Errorf("PoolSpec with 1 discovered token = %v, want ErrCapacityUnknown naming the headroom", err)
	}
	if _, err := f.PoolSpec("zzz", nil); err == nil {
		t.Errorf("PoolSpec of an unknown pool succeeded")
	}

	specs, err := f.PoolSpecs(map[telemetry.EngineKey]int64{{Pool: "a", Engine: "disc"}: 483913})
	if err != nil {
		t.Fatal(err)
	}
	prios := []ledger.PrioritySpec{{Name: "interactive", MaxFill: 0.95}, {Name: "batch", MaxFill: 0.7}}
	want := []ledger.PoolSpec{
		{
			Name: "a", RetryAfter: 2 * time.Second, Reserve: ledger.ReserveElastic, GrowthHeadroom: DefaultGrowthHeadroom,
			Breaker: ledger.BreakerSpec{Failures: 3, Cooldown: 30 * time.Second, Probes: 1, Successes: 2},
			Engines: []ledger.EngineSpec{
				{ID: "fixed", URL: "http://h:1", KVTokens: 1000, Slots: 8, StaleAfter: 10 * time.Second, StalePolicy: ledger.StaleHold},
				{ID: "disc", URL: "http://h:2", KVTokens: 241956, Slots: 8, StaleAfter: 10 * time.Second, StalePolicy: ledger.StaleBlock},
			},
			Tenants:    []ledger.TenantSpec{{Name: "everywhere", KVShare: 0.5, SlotShare: 0.25}},
			Priorities: prios,
		},
		{
			Name: "b", RetryAfter: time.Second, Reserve: ledger.ReserveWorstCase, Breaker: ledger.BreakerSpec{}.WithDefaults(),
			Engines:    []ledger.EngineSpec{{ID: "fixed", URL: "http://h:3", KVTokens: 50, Slots: 2, StalePolicy: ledger.StaleHold}},
			Tenants:    []ledger.TenantSpec{{Name: "everywhere", KVShare: 0.5, SlotShare: 0.25}, {Name: "only-b", KVShare: 1, TokensPerMinute: 20000, RequestsPerMinute: 60}},
			Priorities: prios,
		},
	}
	if !reflect.DeepEqual(specs, want) {
		t.Errorf("PoolSpecs:\n got %+v\nwant %+v", specs, want)
	}
	specs[0].Priorities[0].MaxFill = 0.1
	if f.Priorities[0].MaxFill != 0.95 || specs[1].Priorities[0].MaxFill != 0.95 {
		t.Errorf("PoolSpecs shares the priorities slice between pools or with the Fleet")
	}
	targets := f.Targets()
	if len(targets) != 2 || targets[1].Format != telemetry.FormatSGLang || targets[1].MetricsURL != "http://h:2/metrics" {
		t.Errorf("Targets() = %+v, want a/fixed and a/disc (b/fixed has stale_after 0s)", targets)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want not-exist", err)
	}
	p := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(p, []byte(strings.Replace(base, "slots: 8", "slots: 0", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "pools[0].engines[0].slots") {
		t.Errorf("Load(bad) = %v, want the path and the field", err)
	}
}

// FuzzParse: Parse never panics, and whatever it accepts validates and,
// with every discovered capacity known, yields pool specs the ledger accepts.
func FuzzParse(f *testing.F) {
	f.Add([]byte(base))
	f.Add([]byte(designSample))
	if b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "fleet.example.yaml")); err == nil {
		f.Add(b)
	}
	f.Add([]byte("pools: [{name: p, engines: [{id: e, url: 'http://h', slots: 1}]}]\ntenants: []\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fl, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not match ErrInvalid: %v", err)
			}
			return
		}
		if err := fl.Validate(); err != nil {
			t.Fatalf("Parse accepted what Validate rejects: %v", err)
		}
		disc := map[telemetry.EngineKey]int64{}
		tiny := false // a headroom so small no capacity survives it
		for _, p := range fl.Pools {
			for _, e := range p.Engines {
				disc[telemetry.EngineKey{Pool: p.Name, Engine: e.ID}] = ledger.MaxAmount
				tiny = tiny || (e.KVFromMetrics && float64(ledger.MaxAmount)*e.Headroom < 1)
			}
		}
		if _, err := fl.PoolSpecs(disc); err != nil && !(tiny && errors.Is(err, ErrCapacityUnknown)) {
			t.Fatalf("PoolSpecs of a valid fleet: %v", err)
		}
	})
}

func TestPartialPoolSpec(t *testing.T) {
	f, err := Parse([]byte(`pools:
  - name: mixed
    engines:
      - {id: fixed, url: "http://h:1", kv_tokens: 1000, slots: 8}
      - {id: disc-1, url: "http://h:2", slots: 8, headroom: 0.5}
      - {id: disc-2, url: "http://h:3", slots: 8, headroom: 0.5}
  - name: discovered-only
    engines:
      - {id: d, url: "http://h:4", slots: 8}
tenants:
  - {name: acme, api_keys: [k1], kv_share: 0.5}
priorities:
  - {name: standard, max_fill: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	key := func(pool, engine string) telemetry.EngineKey {
		return telemetry.EngineKey{Pool: ledger.PoolID(pool), Engine: ledger.EngineID(engine)}
	}
	for _, tc := range []struct {
		name        string
		pool        ledger.PoolID
		disc        map[telemetry.EngineKey]int64
		wantEngines string // "id=kv,..."
		wantWaiting string // "id,..."
		wantErr     string // "" for no error
	}{
		{"nothing discovered: configured engines only", "mixed", nil, "fixed=1000", "disc-1,disc-2", ""},
		{"one discovered", "mixed", map[telemetry.EngineKey]int64{key("mixed", "disc-2"): 4000}, "fixed=1000,disc-2=2000", "disc-1", ""},
		{"all known", "mixed", map[telemetry.EngineKey]int64{key("mixed", "disc-1"): 2000, key("mixed", "disc-2"): 4000}, "fixed=1000,disc-1=1000,disc-2=2000", "", ""},
		{"capacity under one token waits", "mixed", map[telemetry.EngineKey]int64{key("mixed", "disc-1"): 1, key("mixed", "disc-2"): 4000}, "fixed=1000,disc-2=2000", "disc-1", ""},
		{"no engine known: not configured", "discovered-only", nil, "", "d", "pool discovered-only engine d: kv_tokens is not configured"},
		{"unknown pool", "zzz", nil, "", "", `pool "zzz" is not in the fleet file`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, waiting, err := f.PartialPoolSpec(tc.pool, tc.disc)
			var engines, ids []string
			for _, e := range spec.Engines {
				engines = append(engines, fmt.Sprintf("%s=%d", e.ID, e.KVTokens))
			}
			for _, w := range waiting {
				ids = append(ids, string(w.ID))
				if !errors.Is(w.Err, ErrCapacityUnknown) || !strings.Contains(w.Err.Error(), "engine "+string(w.ID)+":") {
					t.Errorf("waiting %s: Err = %v, want ErrCapacityUnknown naming the engine", w.ID, w.Err)
				}
			}
			if got := strings.Join(engines, ","); got != tc.wantEngines {
				t.Errorf("engines = %q, want %q", got, tc.wantEngines)
			}
			if got := strings.Join(ids, ","); got != tc.wantWaiting {
				t.Errorf("waiting = %q, want %q", got, tc.wantWaiting)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("err = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			case tc.wantErr == "":
				if len(spec.Tenants) != 1 || len(spec.Priorities) != 1 {
					t.Errorf("spec tenants %v, priorities %v; want acme and standard", spec.Tenants, spec.Priorities)
				}
				if err := ledger.ValidatePoolSpec(spec); err != nil {
					t.Errorf("partial spec is invalid: %v", err)
				}
			}
			// PoolSpec stays all or nothing.
			full, ferr := f.PoolSpec(tc.pool, tc.disc)
			if tc.wantErr == "" && tc.wantWaiting == "" {
				if ferr != nil || !reflect.DeepEqual(full, spec) {
					t.Errorf("PoolSpec = %+v, %v; want the same spec as PartialPoolSpec", full, ferr)
				}
			} else if ferr == nil || len(full.Engines) != 0 {
				t.Errorf("PoolSpec with engines waiting = %+v, %v; want no spec and an error", full, ferr)
			} else if tc.wantWaiting != "" && !errors.Is(ferr, ErrCapacityUnknown) {
				t.Errorf("PoolSpec error %v does not match ErrCapacityUnknown", ferr)
			}
		})
	}
}

func TestEngineKey(t *testing.T) {
	same := [][2]string{
		{"http://h", "HTTP://H:80/"},
		{"https://gpu-1.internal/v1/", "https://GPU-1.internal:443/v1"},
	}
	for _, p := range same {
		if a, b := engineKey(p[0]), engineKey(p[1]); a != b || a == "" {
			t.Errorf("engineKey(%q) = %q, engineKey(%q) = %q: want one engine", p[0], a, p[1], b)
		}
	}
	for _, p := range [][2]string{{"http://h:1", "http://h:2"}, {"http://h", "https://h"}, {"http://h/a", "http://h/b"}} {
		if engineKey(p[0]) == engineKey(p[1]) {
			t.Errorf("engineKey(%q) = engineKey(%q): want two engines", p[0], p[1])
		}
	}
}

// first_byte_timeout: omitted is 0 (no bound), else the duration given.
func TestFirstByteTimeout(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       time.Duration
	}{
		{"omitted", "", 0},
		{"zero", "    first_byte_timeout: 0s\n", 0},
		{"set", "    first_byte_timeout: 2500ms\n", 2500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse([]byte(strings.Replace(base, "  - name: p\n", "  - name: p\n"+tc.line, 1)))
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Pools[0].FirstByteTimeout; got != tc.want {
				t.Errorf("FirstByteTimeout = %s, want %s", got, tc.want)
			}
		})
	}
}
