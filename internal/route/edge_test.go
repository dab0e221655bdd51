package route

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/enginesim"
	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
)

// get sends a GET (with key as the bearer key, if set) and returns the
// status, headers and body.
func get(t *testing.T, client *http.Client, url, key string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body
}

// TestOpenAIEdge: GET /v1/models/{model} is served in the OpenAI shape (a
// 404 model_not_found for a model that is not), every path and method the
// router does not serve is a JSON error, and every answer carries an
// x-request-id: the client's own when sane, else a fresh one.
func TestOpenAIEdge(t *testing.T) {
	h := newHarness(t, harnessOpts{engines: 1, kv: 4096, slots: 8, speed: 20, output: 8, extra: tenants})
	t.Run("retrieve a model", func(t *testing.T) {
		st, hdr, body := get(t, h.client, h.url+"/v1/models/m", "sk-acme")
		var obj map[string]any
		if err := json.Unmarshal(body, &obj); err != nil || st != 200 || hdr.Get("Content-Type") != "application/json" {
			t.Fatalf("GET /v1/models/m = %d %s (%v), want 200 JSON", st, body, err)
		}
		if obj["id"] != "m" || obj["object"] != "model" || obj["owned_by"] != "leasehold" || obj["created"] == nil {
			t.Errorf("GET /v1/models/m = %s, want {id: m, object: model, created, owned_by}", body)
		}
	})
	for _, tc := range []struct {
		name, method, path, key string
		status                  int
		typ, code, allow        string
	}{
		{"unknown model", "GET", "/v1/models/nope", "sk-acme", 404, "not_found_error", "model_not_found", ""},
		{"unknown path", "POST", "/v1/embeddings", "sk-acme", 404, "invalid_request_error", "unknown_url", ""},
		{"unknown path without a key", "GET", "/v2/whatever", "", 401, "authentication_error", "invalid_api_key", ""},
		{"wrong method", "GET", "/v1/chat/completions", "sk-acme", 405, "invalid_request_error", "method_not_allowed", "POST"},
		{"post to models", "POST", "/v1/models", "sk-acme", 405, "invalid_request_error", "method_not_allowed", "GET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, h.url+tc.path, strings.NewReader("{}"))
			if tc.key != "" {
				req.Header.Set("Authorization", "Bearer "+tc.key)
			}
			resp, err := h.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct {
				Error struct{ Type, Code, Message string } `json:"error"`
			}
			err = json.NewDecoder(resp.Body).Decode(&e)
			if resp.StatusCode != tc.status || err != nil || e.Error.Type != tc.typ || e.Error.Code != tc.code || e.Error.Message == "" {
				t.Errorf("%s %s = %d %+v (%v), want %d JSON %s/%s with a message", tc.method, tc.path, resp.StatusCode, e, err, tc.status, tc.typ, tc.code)
			}
			if got := resp.Header.Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
			if !strings.HasPrefix(resp.Header.Get("X-Request-Id"), "req_") {
				t.Errorf("x-request-id %q, want a generated req_ id", resp.Header.Get("X-Request-Id"))
			}
		})
	}
	t.Run("request ids", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz", "/metrics", "/v1/models"} {
			if _, hdr, _ := get(t, h.client, h.url+path, "sk-acme"); !strings.HasPrefix(hdr.Get("X-Request-Id"), "req_") {
				t.Errorf("GET %s: x-request-id %q, want req_<hex>", path, hdr.Get("X-Request-Id"))
			}
		}
		body := `{"model":"m","prompt":"hi","max_tokens":4}`
		for _, tc := range []struct{ name, sent, want string }{
			{"sane id echoed", "client-7f3a.1", "client-7f3a.1"},
			{"insane id replaced", "two words", "req_"},
		} {
			st, hdr, resp, err := post(context.Background(), h.client, h.url+"/v1/completions", "sk-acme", body, "X-Request-Id", tc.sent)
			if err != nil || st != 200 || !strings.HasPrefix(hdr.Get("X-Request-Id"), tc.want) {
				t.Errorf("%s: %d %s, x-request-id %q, want 200 with %q", tc.name, st, resp, hdr.Get("X-Request-Id"), tc.want)
			}
		}
		st, hdr, _, _ := post(context.Background(), h.client, h.url+"/v1/completions", "sk-acme", `{"model":"nope","prompt":"hi"}`)
		if st != 404 || !strings.HasPrefix(hdr.Get("X-Request-Id"), "req_") {
			t.Errorf("inference error: %d, x-request-id %q, want 404 with an id", st, hdr.Get("X-Request-Id"))
		}
	})
}

// TestReadyzDuringRecoveryWindow: while the ledger refuses every new grant
// for its recovery window, /readyz is 503 and says so, naming the pool
// (each request then is refused 503 recovering); once the window ends it
// is 200 and requests are granted. Not ready means refused, ready means
// granted, whichever way the window's end falls.
func TestReadyzDuringRecoveryWindow(t *testing.T) {
	_, url := serveSim(t, enginesim.Config{Model: "m", KVTokens: 4096, Slots: 8, Speed: 20, OutputTokens: 8, MaxModelLen: 2048}, nil)
	f, err := fleet.Parse([]byte(fmt.Sprintf(`pools:
  - name: m
    engines:
      - {id: gpu-0, url: %q, kv_tokens: 4096, slots: 8, stale_after: 0s}
tenants:
  - {name: acme, api_keys: ["sk-acme"], kv_share: 1}
lease:
  session_ttl: 1s
  recovery_window: 3s
`, url)))
	if err != nil {
		t.Fatal(err)
	}
	_, l := redisLedger(t, f)
	cfg := Defaults()
	cfg.Listen, cfg.ID, cfg.FleetFile, cfg.Ledger, cfg.MaxModelLen = "127.0.0.1:0", "test", "fleet.yaml", "redis://unused", 2048
	cfg.QueueTimeout = 0 // refused at once: the window's refusal is the answer
	r := startRouter(t, cfg, Options{Fleet: f, Ledger: l, LeaseConfig: callTimeouts(300 * time.Millisecond)})
	base := "http://" + r.Addr()
	client := &http.Client{Timeout: 10 * time.Second}
	sawRecovering := false
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, _, body := get(t, client, base+"/readyz", "")
		if st == 200 {
			break
		}
		if st != 503 || !strings.HasPrefix(string(body), "not ready:") {
			t.Fatalf("/readyz = %d %q, want 503 \"not ready: ...\"", st, body)
		}
		if strings.Contains(string(body), "pool m recovering") {
			if !sawRecovering {
				t.Logf("/readyz: %s", body)
			}
			sawRecovering = true
			pst, _, pbody, err := post(context.Background(), client, base+"/v1/completions", "sk-acme", `{"model":"m","prompt":"hi","max_tokens":4}`)
			if code, _ := errCode(pbody); err == nil && pst != 200 && (pst != 503 || code != string(ledger.ReasonRecovering)) {
				t.Errorf("request while /readyz says recovering: %d %s, want 503 recovering (or 200 if the window just ended)", pst, pbody)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %q after 20s", st, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !sawRecovering {
		t.Errorf("/readyz never said the pool was recovering during the 3s recovery window")
	}
	if st, _, body, err := post(context.Background(), client, base+"/v1/completions", "sk-acme", `{"model":"m","prompt":"hi","max_tokens":4}`); err != nil || st != 200 {
		t.Errorf("request once ready: %d %s %v, want 200", st, body, err)
	}
}

// TestWholePoolTenantFullIs503: a tenant whose slot_share is 1 owns the
// whole pool, so its quota binds only when it fills the pool itself: that
// is answered 503 engine_slots, a capacity refusal with Retry-After, not
// 429 tenant_slot_quota (the client is not rate-limited, the fleet is
// full). A tenant with a smaller share is still answered 429 at its quota
// while the engine has room.
func TestWholePoolTenantFullIs503(t *testing.T) {
	h := newHarness(t, harnessOpts{engines: 1, kv: 8192, slots: 2, speed: 1, output: 2000, extra: `tenants:
  - {name: solo, api_keys: ["sk-solo"], kv_share: 1, slot_share: 1}
  - {name: half, api_keys: ["sk-half"], kv_share: 1, slot_share: 0.5}
lease:
  session_ttl: 1s
  recovery_window: 0s
`, cfg: func(c *Config) { c.QueueTimeout = 2 * time.Second }}) // covers a closed stream's release
	hold := map[string]any{"model": "m", "prompt": "hold", "max_tokens": 400, "ignore_eos": true}
	small := `{"model":"m","prompt":"x","max_tokens":4}`
	s := h.mustStream(t, "half's request", "sk-half", hold)
	st, _, body, err := post(context.Background(), h.client, h.url+"/v1/completions", "sk-half", small)
	if code, _ := errCode(body); err != nil || st != 429 || code != string(ledger.ReasonTenantSlots) {
		t.Errorf("half over its slot share with the engine half free: %d %s, want 429 %s", st, body, ledger.ReasonTenantSlots)
	}
	s.close()
	for i := range 2 { // solo alone fills the pool (each waits in the queue for half's release)
		defer h.mustStream(t, fmt.Sprintf("solo's request %d", i), "sk-solo", hold).close()
	}
	st, hdr, body, err := post(context.Background(), h.client, h.url+"/v1/completions", "sk-solo", small)
	var e struct {
		Error struct{ Type, Code string } `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	if err != nil || st != 503 || e.Error.Type != "capacity_error" || e.Error.Code != string(ledger.ReasonEngineSlots) || hdr.Get("Retry-After") == "" {
		t.Errorf("solo (the whole pool) with the pool full of its own requests: %d %s, want 503 capacity_error %s with Retry-After", st, body, ledger.ReasonEngineSlots)
	}
}
