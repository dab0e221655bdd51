package fleet

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestMarshalRoundTrip: Marshal → Parse gives back the same Fleet, for
// files that exercise every field and every default.
func TestMarshalRoundTrip(t *testing.T) {
	example, err := os.ReadFile(filepath.Join("..", "..", "deploy", "fleet.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"base":          base,
		"design sample": designSample,
		"example file":  string(example),
		"every field": `pools:
  - name: p
    retry_after: 3s
    max_model_len: 8192
    media_tokens: {image: 0, audio: 10, video: 20}
    growth_headroom: 0
    breaker: {failures: 3, cooldown: 2500ms, probes: 2, successes: 4}
    first_byte_timeout: 2500ms
    engines:
      - {id: e0, url: http://127.0.0.1:9001, kv_tokens: 1000, slots: 8, format: sglang, stale_after: 0s, stale_policy: block}
      - {id: e1, url: http://127.0.0.1:9002/, metrics_url: http://127.0.0.1:9102/m, slots: 4, headroom: 0.5}
  - name: q
    reserve: worst_case
    breaker: {failures: -1}
    engines:
      - {id: e2, url: https://q.example:8443, kv_tokens: 50, slots: 1, stale_after: 5s}
tenants:
  - {name: a, api_keys: ["k1", "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"], kv_share: 0.5, slot_share: 0.25, pools: [q]}
  - {name: b, api_keys: ["k2"], kv_share: 1, tokens_per_minute: 20000, requests_per_minute: 30}
priorities:
  - {name: batch, max_fill: 0.7}
  - {name: interactive, max_fill: 0.95, ttft_slo: 750ms}
default_priority: interactive
lease:
  session_ttl: 4s
  renew_interval: 1s
  lease_ttl: 12s
  recovery_window: 0s
  orphan_hold: 1500ms
`,
	}
	for name, src := range cases {
		t.Run(name, func(t *testing.T) {
			want, err := Parse([]byte(src))
			if err != nil {
				t.Fatalf("Parse(source): %v", err)
			}
			got, b := marshalParse(t, want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Parse(Marshal(f)) =\n%+v\nwant\n%+v\nfile:\n%s", got, want, b)
			}
		})
	}
}

// TestMarshalZeroTakesDefaults: the fields Marshal leaves out when zero
// come back with Parse's defaults.
func TestMarshalZeroTakesDefaults(t *testing.T) {
	f := &Fleet{
		Pools: []Pool{{Name: "p", MediaTokens: DefaultMediaTokens, Engines: []Engine{{
			ID: "e0", URL: "http://127.0.0.1:9001", KVTokens: 100, Slots: 2, StaleAfter: DefaultStaleAfter,
		}}}},
		Tenants: []Tenant{{Name: "t", APIKeys: []KeyHash{HashAPIKey("k")}, KVShare: 1}},
		Lease:   Lease{RecoveryWindow: DefaultRecoveryWindow},
	}
	got, b := marshalParse(t, f)
	want, err := Parse([]byte(`pools:
  - name: p
    engines:
      - {id: e0, url: http://127.0.0.1:9001, kv_tokens: 100, slots: 2}
tenants:
  - {name: t, api_keys: ["k"], kv_share: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse(Marshal(zero fields)) =\n%+v\nwant\n%+v\nfile:\n%s", got, want, b)
	}
}

// marshalParse returns Parse(Marshal(f)) and the file between.
func marshalParse(t *testing.T, f *Fleet) (*Fleet, []byte) {
	t.Helper()
	b, err := Marshal(f)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	got, err := Parse(b)
	if err != nil {
		t.Fatalf("Parse(Marshal): %v\n%s", err, b)
	}
	return got, b
}
