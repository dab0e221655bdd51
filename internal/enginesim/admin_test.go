package enginesim

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/telemetry"
	"github.com/leasehold/leasehold/internal/testutil/poll"
)

func getStats(t *testing.T, ts interface {
	Client() *http.Client
}, url string) Stats {
	t.Helper()
	resp, err := ts.Client().Get(url + "/admin/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s Stats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAdminStatsAndReset(t *testing.T) {
	_, ts := newServer(t, fastConfig())
	for range 3 {
		if status, b := do(t, ts, "POST", "/v1/completions", `{"prompt":"a b","max_tokens":10,"n":2,"ignore_eos":true}`); status != 200 {
			t.Fatalf("%d %s", status, b)
		}
	}
	s := getStats(t, ts, ts.URL)
	if s.RequestsCompleted != 3 || s.GenerationTokens != 60 || s.PromptTokens != 12 || s.PeakAdmittedDemand < 24 ||
		s.PeakAcceptedSequences < 2 || s.KVCapacityTokens != 4096 || s.Slots != 16 || s.SequencesFinished["length"] != 6 {
		t.Fatalf("stats: %+v", s)
	}
	status, b := do(t, ts, "POST", "/admin/reset", "")
	var r Stats
	if err := json.Unmarshal(b, &r); err != nil || status != 200 {
		t.Fatalf("reset: %d %s", status, b)
	}
	if r.RequestsCompleted != 0 || r.GenerationTokens != 0 || r.PeakAdmittedDemand != 0 || r.PeakKVBlocksUsed != 0 || !r.Since.After(s.Since) {
		t.Fatalf("after reset: %+v", r)
	}
	// /metrics counters do not reset.
	sample := string(func() []byte { _, b := do(t, ts, "GET", "/metrics", ""); return b }())
	if !strings.Contains(sample, "vllm:generation_tokens_total{engine=\"0\",model_name=\"enginesim\"} 60.0") {
		t.Fatalf("metrics counter reset or wrong:\n%s", sample)
	}
}

func TestFailErrorsAndMetrics(t *testing.T) {
	_, ts := newServer(t, fastConfig())
	if status, b := do(t, ts, "POST", "/admin/fail", `{"errors":true}`); status != 200 || !strings.Contains(string(b), `"errors":true`) {
		t.Fatalf("%d %s", status, b)
	}
	for _, p := range []struct{ method, path, body string }{
		{"POST", "/v1/completions", `{"prompt":"a"}`},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}]}`},
		{"GET", "/health", ""},
		{"GET", "/v1/models", ""},
	} {
		if status, b := do(t, ts, p.method, p.path, p.body); status != 500 || !strings.Contains(string(b), "injected_failure") && p.path != "/health" {
			t.Fatalf("%s: %d %s, want 500", p.path, status, b)
		}
	}
	if status, _ := do(t, ts, "GET", "/metrics", ""); status != 200 {
		t.Fatalf("metrics with errors on: %d", status)
	}
	do(t, ts, "POST", "/admin/fail?mode=metrics", "")
	sc := telemetry.Scraper{Client: ts.Client()}
	if _, _, err := sc.Scrape(t.Context(), ts.URL+"/metrics", telemetry.FormatVLLM); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("scrape with metrics off: %v, want HTTP 503", err)
	}
	if status, b := do(t, ts, "GET", "/admin/fail", ""); status != 200 || string(b) != `{"errors":true,"hang":false,"metrics_off":true,"tokenize":false,"unavailable":false,"reset":false}`+"\n" {
		t.Fatalf("fail state: %s", b)
	}
	do(t, ts, "POST", "/admin/fail?mode=none", "")
	if status, _ := do(t, ts, "POST", "/v1/completions", `{"prompt":"a","max_tokens":2}`); status != 200 {
		t.Fatalf("after clearing: %d", status)
	}
	if _, _, err := sc.Scrape(t.Context(), ts.URL+"/metrics", telemetry.FormatVLLM); err != nil {
		t.Fatal(err)
	}
	if status, _ := do(t, ts, "POST", "/admin/fail?mode=sideways", ""); status != 400 {
		t.Fatalf("bad mode: %d, want 400", status)
	}
}

// The tokenize fault fails /tokenize alone: inference keeps working.
func TestFailTokenize(t *testing.T) {
	_, ts := newServer(t, fastConfig())
	if status, b := do(t, ts, "POST", "/admin/fail?mode=tokenize", ""); status != 200 || !strings.Contains(string(b), `"tokenize":true`) {
		t.Fatalf("%d %s", status, b)
	}
	if status, b := do(t, ts, "POST", "/tokenize", `{"prompt":"a"}`); status != 500 || !strings.Contains(string(b), "injected_failure") {
		t.Fatalf("/tokenize with the fault: %d %s, want 500", status, b)
	}
	for _, p := range []struct{ method, path, body string }{
		{"POST", "/v1/completions", `{"prompt":"a","max_tokens":2}`},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"max_tokens":2}`},
		{"GET", "/v1/models", ""},
		{"GET", "/health", ""},
	} {
		if status, b := do(t, ts, p.method, p.path, p.body); status != 200 {
			t.Fatalf("%s with the tokenize fault: %d %s, want 200", p.path, status, b)
		}
	}
	do(t, ts, "POST", "/admin/fail?mode=none", "")
	if status, b := do(t, ts, "POST", "/tokenize", `{"prompt":"a"}`); status != 200 {
		t.Fatalf("/tokenize after clearing: %d %s", status, b)
	}
}

func TestFailHang(t *testing.T) {
	e, ts := newServer(t, fastConfig())
	do(t, ts, "POST", "/admin/fail?mode=hang", "")
	type result struct {
		status int
		err    error
	}
	resC := make(chan result, 1)
	go func() {
		resp, err := ts.Client().Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"a","max_tokens":3}`))
		if err != nil {
			resC <- result{err: err}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		resC <- result{status: resp.StatusCode}
	}()
	select {
	case r := <-resC:
		t.Fatalf("answered while hanging: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	if s := e.Stats(); s.RequestsAccepted != 0 || s.Fail.Hang != true {
		t.Fatalf("a hanging request holds nothing: %+v", s)
	}
	do(t, ts, "POST", "/admin/fail", `{"hang":false}`)
	if r := <-resC; r.err != nil || r.status != 200 {
		t.Fatalf("after hang cleared: %+v", r)
	}
}

// Abort cuts every request in flight, as an engine crash does.
func TestFailAbort(t *testing.T) {
	e, ts := newServer(t, Config{KVTokens: 1024, Slots: 4, manual: true, PrefillTokensPerSec: 1e9})
	errC := make(chan error, 2)
	for _, stream := range []string{"true", "false"} {
		go func() {
			resp, err := ts.Client().Post(ts.URL+"/v1/completions", "application/json",
				strings.NewReader(`{"prompt":"a","max_tokens":50,"stream":`+stream+`}`))
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			errC <- err
		}()
	}
	poll.Eventually(t, 5*time.Second, "both running", func() bool { return e.Stats().Running == 2 })
	e.advance(2)
	status, b := do(t, ts, "POST", "/admin/fail?mode=abort", "")
	if status != 200 || !strings.Contains(string(b), `"aborted":2`) {
		t.Fatalf("abort: %d %s", status, b)
	}
	for range 2 {
		if err := <-errC; err == nil {
			t.Fatalf("client saw %v, want a cut connection", err)
		}
	}
	s := e.Stats()
	if s.RequestsFailed != 2 || s.RequestsAborted != 0 || s.KVBlocksUsed != 0 || s.AcceptedRequests != 0 {
		t.Fatalf("after abort: %+v", s)
	}
}

// unavailable answers 503 where errors answers 500; reset cuts the
// connection of every OpenAI request without an answer while the admin
// endpoints and /metrics still answer; crash is reset plus abort: the
// request in flight is cut too. none clears them.
func TestFailUnavailableResetCrash(t *testing.T) {
	_, ts := newServer(t, fastConfig())
	e, manual := newServer(t, Config{KVTokens: 1024, Slots: 4, manual: true, PrefillTokensPerSec: 1e9})
	post := func(ts *httptest.Server, path, body string) (int, error) {
		resp, err := ts.Client().Post(ts.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return resp.StatusCode, err
	}
	inference := []struct{ path, body string }{
		{"/v1/completions", `{"prompt":"a","max_tokens":2}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"max_tokens":2}`},
		{"/tokenize", `{"prompt":"a"}`},
	}
	for _, tc := range []struct {
		mode       string
		wantStatus int // 0: the connection is cut
	}{
		{"unavailable", http.StatusServiceUnavailable},
		{"503", http.StatusServiceUnavailable},
		{"reset", 0},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			if status, b := do(t, ts, "POST", "/admin/fail?mode="+tc.mode, ""); status != 200 {
				t.Fatalf("mode %s: %d %s", tc.mode, status, b)
			}
			defer do(t, ts, "POST", "/admin/fail?mode=none", "")
			for _, p := range inference {
				status, err := post(ts, p.path, p.body)
				if tc.wantStatus == 0 && err == nil {
					t.Errorf("%s: answered %d, want a cut connection", p.path, status)
				}
				if tc.wantStatus != 0 && (err != nil || status != tc.wantStatus) {
					t.Errorf("%s: %d %v, want %d", p.path, status, err, tc.wantStatus)
				}
			}
			if status, _ := do(t, ts, "GET", "/metrics", ""); status != 200 {
				t.Errorf("/metrics under %s: %d, want 200", tc.mode, status)
			}
		})
	}
	if status, err := post(ts, "/v1/completions", `{"prompt":"a","max_tokens":2}`); err != nil || status != 200 {
		t.Fatalf("after none: %d %v, want 200", status, err)
	}

	errC := make(chan error, 1)
	go func() {
		_, err := post(manual, "/v1/completions", `{"prompt":"a","max_tokens":50,"stream":true}`)
		errC <- err
	}()
	poll.Eventually(t, 5*time.Second, "running", func() bool { return e.Stats().Running == 1 })
	e.advance(2)
	status, b := do(t, manual, "POST", "/admin/fail?mode=crash", "")
	if status != 200 || !strings.Contains(string(b), `"aborted":1`) || !strings.Contains(string(b), `"reset":true`) {
		t.Fatalf("crash: %d %s, want 1 aborted and reset on", status, b)
	}
	if err := <-errC; err == nil {
		t.Errorf("the stream in flight ended cleanly, want a cut connection")
	}
	if _, err := post(manual, "/v1/completions", `{"prompt":"a","max_tokens":2}`); err == nil {
		t.Errorf("a new request after crash was answered, want a cut connection")
	}
}
