package oaihttp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestRetryAfterJitter(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		s := JitterRetryAfter(4 * time.Second)
		if s < 2 || s > 6 {
			t.Fatalf("Retry-After %d for a 4s hint, want 2..6", s)
		}
		seen[s] = true
	}
	if len(seen) < 3 {
		t.Errorf("Retry-After values %v: not jittered", seen)
	}
	if s := JitterRetryAfter(100 * time.Millisecond); s != 1 {
		t.Errorf("Retry-After %d for 100ms, want at least 1", s)
	}
}

// RetryExact: a rate budget's hint is when its window frees, so it is
// rounded up, never jittered earlier.
func TestRetryAfterExact(t *testing.T) {
	for _, tc := range []struct {
		hint time.Duration
		want string
	}{{41200 * time.Millisecond, "42"}, {300 * time.Millisecond, "1"}, {2 * time.Second, "2"}} {
		for range 20 {
			w := httptest.NewRecorder()
			WriteError(w, Error{Status: http.StatusTooManyRequests, Code: "tenant_token_rate", RetryAfter: tc.hint, RetryExact: true})
			if got := w.Header().Get("Retry-After"); got != tc.want {
				t.Fatalf("exact Retry-After for %s = %q, want %q", tc.hint, got, tc.want)
			}
		}
	}
}

func TestSaneRequestID(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   string
		want bool
	}{
		{"uuid", "0b8f3c4e-1d2a-4f5b-9c6d-7e8f9a0b1c2d", true},
		{"openai style", "req_0123456789abcdef0123456789abcdef", true},
		{"trace header", "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=x", false},
		{"tracer", "svc/abc:1+2=3@host.example", true},
		{"empty", "", false},
		{"space", "a b", false},
		{"newline", "a\nb", false},
		{"quote", `a"b`, false},
		{"non-ascii", "réq", false},
		{"128 bytes", strings.Repeat("a", 128), true},
		{"129 bytes", strings.Repeat("a", 129), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SaneRequestID(tc.id); got != tc.want {
				t.Errorf("SaneRequestID(%q) = %v, want %v", tc.id, got, tc.want)
			}
		})
	}
	if a, b := NewRequestID(), NewRequestID(); a == b || !SaneRequestID(a) || !strings.HasPrefix(a, "req_") || len(a) != 36 {
		t.Errorf("NewRequestID: %q, %q; want two different sane req_<32 hex>", a, b)
	}
}

func TestWithRequestID(t *testing.T) {
	var forwarded string
	h := WithRequestID(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		forwarded = r.Header.Get(HeaderRequestID)
		w.WriteHeader(http.StatusTeapot)
	}))
	for _, tc := range []struct {
		name string
		sent []string
		keep bool
	}{
		{"none", nil, false},
		{"sane", []string{"abc-123"}, true},
		{"insane", []string{"a b\tc"}, false},
		{"two values", []string{"a", "b"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/x", nil)
			for _, v := range tc.sent {
				req.Header.Add(HeaderRequestID, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			got := rec.Header().Get(HeaderRequestID)
			switch {
			case !SaneRequestID(got):
				t.Errorf("answered x-request-id %q: not sane", got)
			case tc.keep && got != tc.sent[0]:
				t.Errorf("answered x-request-id %q, want the client's %q echoed", got, tc.sent[0])
			case !tc.keep && !strings.HasPrefix(got, "req_"):
				t.Errorf("answered x-request-id %q, want a generated req_ id", got)
			case forwarded != got:
				t.Errorf("the handler saw X-Request-Id %q, the client was answered %q", forwarded, got)
			}
		})
	}
}

func decodeError(t *testing.T, rec *httptest.ResponseRecorder) (typ, code, msg string) {
	t.Helper()
	var b struct {
		Error struct {
			Type, Code, Message string
			Param               *string
		} `json:"error"`
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
		t.Fatalf("error body %q: %v", rec.Body, err)
	}
	return b.Error.Type, b.Error.Code, b.Error.Message
}

func TestNotServed(t *testing.T) {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) {}
	mux.HandleFunc("POST /v1/chat/completions", ok)
	mux.HandleFunc("GET /v1/models", ok)
	mux.HandleFunc("GET /v1/models/{model...}", ok)
	mux.HandleFunc("/", NotServed(mux, "what is served"))
	for _, tc := range []struct {
		name, method, path string
		status             int
		code, allow        string
	}{
		{"unknown path", "GET", "/v1/embeddings", 404, "unknown_url", ""},
		{"root", "GET", "/", 404, "unknown_url", ""},
		{"wrong method", "GET", "/v1/chat/completions", 405, "method_not_allowed", "POST"},
		{"post to models", "POST", "/v1/models", 405, "method_not_allowed", "GET"},
		{"delete a model", "DELETE", "/v1/models/m", 405, "method_not_allowed", "GET"},
		{"served", "GET", "/v1/models/org/m", 200, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			if rec.Code != tc.status {
				t.Fatalf("%s %s: %d, want %d", tc.method, tc.path, rec.Code, tc.status)
			}
			if tc.status == 200 {
				return
			}
			typ, code, msg := decodeError(t, rec)
			if typ != "invalid_request_error" || code != tc.code || !strings.Contains(msg, tc.method+" "+tc.path) {
				t.Errorf("error %s/%s %q, want invalid_request_error/%s naming %s %s", typ, code, msg, tc.code, tc.method, tc.path)
			}
			if got := rec.Header().Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
		})
	}
}

func TestServeModels(t *testing.T) {
	created := time.Unix(1_700_000_000, 0)
	ids := []string{"a", "org/b"}
	rec := httptest.NewRecorder()
	ServeModels(rec, "", ids, created)
	var list struct {
		Object string
		Data   []Model
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || list.Object != "list" || len(list.Data) != 2 ||
		list.Data[1] != (Model{ID: "org/b", Object: "model", Created: created.Unix(), OwnedBy: "leasehold"}) {
		t.Errorf("list = %+v (%v), want both models", list, err)
	}
	rec = httptest.NewRecorder()
	ServeModels(rec, "org/b", ids, created)
	var m Model
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil || rec.Code != 200 || m.ID != "org/b" || m.Object != "model" {
		t.Errorf("retrieve org/b = %d %+v (%v)", rec.Code, m, err)
	}
	rec = httptest.NewRecorder()
	ServeModels(rec, "c", ids, created)
	if typ, code, msg := decodeError(t, rec); rec.Code != 404 || typ != "not_found_error" || code != "model_not_found" || !strings.Contains(msg, "`c`") {
		t.Errorf("retrieve c = %d %s/%s %q, want 404 not_found_error/model_not_found naming it", rec.Code, typ, code, msg)
	}
}
