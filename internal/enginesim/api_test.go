package enginesim

import (
	"bufio"
	"bytes"
	"context"
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

// fastConfig runs a decode step every 10 µs of wall time.
func fastConfig() Config {
	return Config{KVTokens: 4096, Slots: 16, Speed: 1000, DecodeTokensPerSec: 100, OutputTokens: 8}
}

func newServer(t *testing.T, cfg Config) (*Engine, *httptest.Server) {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(e.Handler())
	// Cleanups run last first: closing the engine ends every handler still
	// waiting, so the server's Close does not wait for them.
	t.Cleanup(ts.Close)
	t.Cleanup(e.Close)
	return e, ts
}

func do(t *testing.T, ts *httptest.Server, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// sse reads a stream: its chunks and whether it ended with [DONE].
func sse(t *testing.T, r io.Reader) (chunks []streamChunk, done bool) {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("stream line %q is not a data line", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		if done {
			t.Fatalf("data after [DONE]: %s", data)
		}
		var c streamChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		chunks = append(chunks, c)
	}
	return chunks, done
}

// answer is what a test learns from a response, stream or not.
type answer struct {
	texts   []string
	finish  []string
	usage   *usage
	objects map[string]bool
	// serviceMicros is the usage chunk's x_enginesim.service_us.
	serviceMicros int64
}

func parseAnswer(t *testing.T, body []byte, stream, chat bool) answer {
	t.Helper()
	a := answer{objects: map[string]bool{}}
	if !stream {
		var r struct {
			Object  string `json:"object"`
			Choices []struct {
				Index   int    `json:"index"`
				Text    string `json:"text"`
				Message struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		a.objects[r.Object] = true
		for i, c := range r.Choices {
			if c.Index != i {
				t.Fatalf("choice %d has index %d", i, c.Index)
			}
			text := c.Text
			if chat {
				text = c.Message.Content
				if c.Message.Role != "assistant" {
					t.Fatalf("role %q", c.Message.Role)
				}
			}
			a.texts = append(a.texts, text)
			a.finish = append(a.finish, c.FinishReason)
		}
		a.usage = r.Usage
		return a
	}
	chunks, done := sse(t, bytes.NewReader(body))
	if !done {
		t.Fatal("stream did not end with [DONE]")
	}
	for i, c := range chunks {
		a.objects[c.Object] = true
		if c.Usage != nil {
			if i != len(chunks)-1 || len(c.Choices) != 0 {
				t.Fatalf("usage in chunk %d of %d with %d choices; want only in the last, with none", i, len(chunks), len(c.Choices))
			}
			a.usage = c.Usage
			if c.Sim != nil {
				a.serviceMicros = c.Sim.ServiceMicros
			}
		}
		for _, ch := range c.Choices {
			for len(a.texts) <= ch.Index {
				a.texts = append(a.texts, "")
				a.finish = append(a.finish, "")
			}
			if a.finish[ch.Index] != "" {
				t.Fatalf("choice %d continues after its finish_reason", ch.Index)
			}
			if chat {
				s, _ := ch.Delta["content"].(string)
				a.texts[ch.Index] += s
			} else if ch.Text != nil {
				a.texts[ch.Index] += *ch.Text
			}
			if ch.FinishReason != nil {
				a.finish[ch.Index] = *ch.FinishReason
			}
		}
	}
	return a
}

func TestCompletions(t *testing.T) {
	e, ts := newServer(t, fastConfig())
	chatMsgs := `[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"what is a KV cache, please?"}]}]`
	chatPrompt := countChatTokens([]chatMessage{{Role: "system", Text: "be brief"}, {Role: "user", Text: "what is a KV cache, please?\n"}})
	for _, tc := range []struct {
		name        string
		path, body  string
		chat        bool
		stream      bool
		wantUsage   bool
		n           int
		prompt      int
		exactTokens int // each choice's length when forced, else 0
	}{
		{name: "chat", path: "/v1/chat/completions", body: `{"model":"m","messages":` + chatMsgs + `,"max_tokens":50}`,
			chat: true, wantUsage: true, n: 1, prompt: chatPrompt},
		{name: "chat ignore_eos", path: "/v1/chat/completions", body: `{"messages":` + chatMsgs + `,"max_completion_tokens":20,"ignore_eos":true}`,
			chat: true, wantUsage: true, n: 1, prompt: chatPrompt, exactTokens: 20},
		{name: "chat n=3", path: "/v1/chat/completions", body: `{"messages":` + chatMsgs + `,"max_tokens":6,"n":3}`,
			chat: true, wantUsage: true, n: 3, prompt: chatPrompt},
		{name: "completion", path: "/v1/completions", body: `{"prompt":"the quick brown fox","max_tokens":5,"ignore_eos":true}`,
			wantUsage: true, n: 1, prompt: 6, exactTokens: 5},
		{name: "completion token ids", path: "/v1/completions", body: `{"prompt":[1,2,3,4,5,6,7],"max_tokens":3,"seed":7}`,
			wantUsage: true, n: 1, prompt: 7},
		{name: "chat stream", path: "/v1/chat/completions", body: `{"messages":` + chatMsgs + `,"max_tokens":12,"stream":true}`,
			chat: true, stream: true, n: 1, prompt: chatPrompt},
		{name: "chat stream usage n=2", path: "/v1/chat/completions",
			body: `{"messages":` + chatMsgs + `,"max_tokens":12,"n":2,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`,
			chat: true, stream: true, wantUsage: true, n: 2, prompt: chatPrompt, exactTokens: 12},
		{name: "completion stream usage", path: "/v1/completions",
			body:   `{"prompt":["a b c"],"max_tokens":9,"stream":true,"stream_options":{"include_usage":true}}`,
			stream: true, wantUsage: true, n: 1, prompt: 3},
		{name: "completion stream no usage", path: "/v1/completions",
			body:   `{"prompt":"a b c","max_tokens":9,"stream":true,"stream_options":{"include_usage":false}}`,
			stream: true, n: 1, prompt: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := do(t, ts, http.MethodPost, tc.path, tc.body)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, body)
			}
			a := parseAnswer(t, body, tc.stream, tc.chat)
			if len(a.texts) != tc.n {
				t.Fatalf("%d choices, want %d", len(a.texts), tc.n)
			}
			completion := 0
			for i, text := range a.texts {
				got := countTokens(text)
				completion += got
				if tc.exactTokens > 0 && got != tc.exactTokens {
					t.Errorf("choice %d: %d tokens, want %d", i, got, tc.exactTokens)
				}
				want := "stop"
				if tc.exactTokens > 0 {
					want = "length"
				}
				if a.finish[i] != want && !(want == "stop" && a.finish[i] == "length") {
					t.Errorf("choice %d: finish %q, want %q", i, a.finish[i], want)
				}
			}
			if !tc.wantUsage {
				if a.usage != nil {
					t.Fatalf("usage %+v, want none", a.usage)
				}
				return
			}
			want := usage{PromptTokens: tc.prompt, CompletionTokens: completion, TotalTokens: tc.prompt + completion}
			if a.usage == nil || *a.usage != want {
				t.Fatalf("usage %+v, want %+v", a.usage, want)
			}
			if tc.stream && a.serviceMicros <= 0 {
				t.Errorf("the usage chunk's x_enginesim.service_us is %d, want the engine's time", a.serviceMicros)
			}
		})
	}
	s := e.Stats()
	if s.AcceptedRequests != 0 || s.KVBlocksUsed != 0 || s.RequestsCompleted != 9 {
		t.Fatalf("after all: %+v", s)
	}
}

// Same request, same answer; the seed picks another.
func TestDeterministic(t *testing.T) {
	_, ts := newServer(t, fastConfig())
	get := func(body string) string {
		_, b := do(t, ts, http.MethodPost, "/v1/completions", body)
		a := parseAnswer(t, b, false, false)
		return strings.Join(a.texts, "|")
	}
	a1 := get(`{"prompt":"hello world","max_tokens":30,"n":2}`)
	if a2 := get(`{"prompt":"hello world","max_tokens":30,"n":2}`); a1 != a2 {
		t.Fatalf("answers differ: %q vs %q", a1, a2)
	}
	if s1, s2 := get(`{"prompt":"x","max_tokens":30,"seed":1}`), get(`{"prompt":"y","max_tokens":30,"seed":1}`); s1 != s2 {
		t.Fatalf("same seed, other prompt: %q vs %q", s1, s2)
	}
}

func TestErrors(t *testing.T) {
	cfg := fastConfig()
	cfg.StrictModel = true
	cfg.Model = "llama"
	cfg.MaxModelLen = 100
	e, ts := newServer(t, cfg)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		typ, code, param         string
	}{
		{"bad json", "POST", "/v1/chat/completions", `{"messages":`, 400, "invalid_request_error", "invalid_request", ""},
		{"trailing data", "POST", "/v1/completions", `{"prompt":"a"} {}`, 400, "invalid_request_error", "invalid_request", ""},
		{"no messages", "POST", "/v1/chat/completions", `{"model":"llama"}`, 400, "invalid_request_error", "invalid_request", "messages"},
		{"no prompt", "POST", "/v1/completions", `{}`, 400, "invalid_request_error", "invalid_request", "prompt"},
		{"empty prompt", "POST", "/v1/completions", `{"prompt":"  "}`, 400, "invalid_request_error", "invalid_request", "prompt"},
		{"batch prompt", "POST", "/v1/completions", `{"prompt":["a","b"]}`, 400, "invalid_request_error", "invalid_request", "prompt"},
		{"max_tokens 0", "POST", "/v1/completions", `{"prompt":"a","max_tokens":0}`, 400, "invalid_request_error", "invalid_request", "max_tokens"},
		{"n 0", "POST", "/v1/completions", `{"prompt":"a","n":0}`, 400, "invalid_request_error", "invalid_request", "n"},
		{"too long", "POST", "/v1/completions", `{"prompt":"a","max_tokens":100}`, 400, "invalid_request_error", "context_length_exceeded", "max_tokens"},
		{"stream_options without stream", "POST", "/v1/completions", `{"prompt":"a","stream_options":{"include_usage":true}}`, 400, "invalid_request_error", "invalid_request", "stream_options"},
		{"bad content", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":5}]}`, 400, "invalid_request_error", "invalid_request", "messages[0].content"},
		{"unknown model", "POST", "/v1/completions", `{"model":"gpt","prompt":"a"}`, 404, "not_found_error", "model_not_found", "model"},
		{"unknown path", "GET", "/v2/nothing", ``, 404, "not_found_error", "not_found", ""},
		{"wrong method", "GET", "/v1/completions", ``, 404, "not_found_error", "not_found", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := do(t, ts, tc.method, tc.path, tc.body)
			var r struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Code    string  `json:"code"`
					Param   *string `json:"param"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &r); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			param := ""
			if r.Error.Param != nil {
				param = *r.Error.Param
			}
			if status != tc.status || r.Error.Type != tc.typ || r.Error.Code != tc.code || param != tc.param || r.Error.Message == "" {
				t.Fatalf("got %d %s, want %d type %s code %s param %q", status, body, tc.status, tc.typ, tc.code, tc.param)
			}
		})
	}
	if s := e.Stats(); s.RequestsAccepted != 0 {
		t.Fatalf("rejected requests were accepted: %+v", s)
	}
}

func TestModelsAndTokenize(t *testing.T) {
	cfg := fastConfig()
	cfg.Model = "meta-llama/Llama-3.1-8B-Instruct"
	_, ts := newServer(t, cfg)
	status, body := do(t, ts, "GET", "/v1/models", "")
	var models struct {
		Object string `json:"object"`
		Data   []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &models); err != nil || status != 200 || models.Object != "list" ||
		len(models.Data) != 1 || models.Data[0].ID != cfg.Model || models.Data[0].MaxModelLen != 4096 {
		t.Fatalf("models: %d %s (%v)", status, body, err)
	}

	usageOf := func(path, body string) int {
		_, b := do(t, ts, "POST", path, body)
		var r struct{ Usage usage }
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		return r.Usage.PromptTokens
	}
	tokenize := func(body string) (count int, tokens []int) {
		status, b := do(t, ts, "POST", "/tokenize", body)
		var r struct {
			Tokens []int `json:"tokens"`
			Count  int   `json:"count"`
		}
		if err := json.Unmarshal(b, &r); err != nil || status != 200 {
			t.Fatalf("tokenize: %d %s", status, b)
		}
		return r.Count, r.Tokens
	}
	for _, prompt := range []string{"hi", "a somewhat longer prompt with antidisestablishmentarianism in it", "x\ny\tz  ", "日本語のテキスト",
		"emoji 😀🎉👍", "?!?!... ;;;; ---- ((()))", "C++ & Go: café, naïve, 東京"} {
		p, _ := json.Marshal(prompt)
		count, tokens := tokenize(`{"prompt":` + string(p) + `}`)
		if count != len(tokens) || count != usageOf("/v1/completions", `{"prompt":`+string(p)+`,"max_tokens":1}`) {
			t.Fatalf("prompt %q: tokenize count %d (%d ids), usage differs", prompt, count, len(tokens))
		}
		msgs := `[{"role":"user","content":` + string(p) + `}]`
		count, _ = tokenize(`{"messages":` + msgs + `}`)
		if count != usageOf("/v1/chat/completions", `{"messages":`+msgs+`,"max_tokens":1}`) {
			t.Fatalf("chat %q: tokenize count %d differs from usage", prompt, count)
		}
	}
	if _, a := tokenize(`{"prompt":"same text"}`); true {
		if _, b := tokenize(`{"prompt":"same text"}`); !equalInts(a, b) {
			t.Fatal("tokenize is not deterministic")
		}
	}
	if status, _ := do(t, ts, "POST", "/tokenize", `{}`); status != 400 {
		t.Fatalf("tokenize without prompt: %d, want 400", status)
	}
	if status, _ := do(t, ts, "GET", "/info", ""); status != 404 {
		t.Fatalf("GET /info of a vllm-format engine: %d, want 404 (vLLM has none)", status)
	}
}

// The tokenizer is close to bytes/4 on English and well above it on the
// text a byte estimate undershoots.
func TestTokenizerOddText(t *testing.T) {
	for _, tc := range []struct {
		text string
		want int
	}{
		{"the quick brown fox", 6},
		{"antidisestablishmentarianism", 7},
		{"a1b2c3", 2},
		{"日本語", 3},        // one token a character, 9 bytes
		{"😀🎉", 4},         // two tokens an emoji, 8 bytes
		{"!!!!!!!!", 8},   // one token a punctuation mark
		{"please?", 3},    // "plea" "se" "?"
		{"naïve", 3},      // "na" "ï" "ve"
		{"\xff\xfeab", 3}, // invalid UTF-8: a token a byte
		{"  \t\n ", 0},
	} {
		ids := appendTokens(nil, tc.text)
		if got := countTokens(tc.text); got != tc.want || len(ids) != tc.want {
			t.Errorf("%q: countTokens %d, %d ids; want %d", tc.text, got, len(ids), tc.want)
		}
	}
}

// GET /info of a tgi-format engine reports the context length as TGI does.
func TestInfoTGI(t *testing.T) {
	cfg := fastConfig()
	cfg.Format, cfg.MaxModelLen, cfg.Model = telemetry.FormatTGI, 1536, "tgi-model"
	_, ts := newServer(t, cfg)
	status, body := do(t, ts, "GET", "/info", "")
	var info struct {
		ModelID        string `json:"model_id"`
		MaxTotalTokens int    `json:"max_total_tokens"`
		MaxInputTokens int    `json:"max_input_tokens"`
		MaxConcurrent  int    `json:"max_concurrent_requests"`
	}
	if err := json.Unmarshal(body, &info); err != nil || status != 200 || info.ModelID != "tgi-model" ||
		info.MaxTotalTokens != 1536 || info.MaxInputTokens != 1535 || info.MaxConcurrent != 16 {
		t.Fatalf("GET /info: %d %s (%v)", status, body, err)
	}
	do(t, ts, "POST", "/admin/fail?mode=errors", "")
	if status, _ := do(t, ts, "GET", "/info", ""); status != 500 {
		t.Fatalf("GET /info with errors injected: %d, want 500", status)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A client that goes away aborts its request: its blocks are freed at once.
func TestDisconnectAborts(t *testing.T) {
	cfg := Config{KVTokens: 1024, Slots: 4, manual: true, PrefillTokensPerSec: 1e9}
	e, ts := newServer(t, cfg)
	for _, stream := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		body := `{"prompt":"one two three","max_tokens":100,"stream":` + map[bool]string{true: "true", false: "false"}[stream] + `}`
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", strings.NewReader(body))
		errC := make(chan error, 1)
		go func() {
			resp, err := ts.Client().Do(req)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			errC <- err
		}()
		poll.Eventually(t, 5*time.Second, "admitted", func() bool { return e.Stats().Running == 1 })
		e.advance(3)
		if s := e.Stats(); s.KVBlocksUsed != 1 || s.AdmittedDemandTokens != 104 {
			t.Fatalf("before disconnect: %+v", s)
		}
		cancel()
		<-errC
		poll.Eventually(t, 5*time.Second, "aborted", func() bool { s := e.Stats(); return s.RequestsAborted == 1 })
		s := e.Stats()
		if s.KVBlocksUsed != 0 || s.Running != 0 || s.AdmittedDemandTokens != 0 || s.SequencesFinished[finishAbort] != 1 {
			t.Fatalf("stream=%v after disconnect: %+v", stream, s)
		}
		e.Reset()
	}
}

// TestMediaTokens: with --media-tokens, each image, audio clip or video of
// a chat request takes that many prompt tokens, reported per kind in
// usage.prompt_tokens_details; /tokenize counts only their placeholders,
// as vLLM's does. Without it a request with media is a 400.
func TestMediaTokens(t *testing.T) {
	const parts = `[{"type":"text","text":"compare"},{"type":"image_url","image_url":{"url":"data:,"}},` +
		`{"type":"image_url","image_url":{"url":"data:,"}},{"type":"input_audio","input_audio":{"data":"","format":"wav"}}]`
	body := `{"model":"m","max_tokens":4,"messages":[{"role":"user","content":` + parts + `}]}`
	textOnly := `{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"compare"}]}`

	_, plain := newServer(t, fastConfig())
	if status, b := do(t, plain, "POST", "/v1/chat/completions", body); status != 400 || !strings.Contains(string(b), "image input is not supported") {
		t.Fatalf("media on a text model: %d %s, want a 400", status, b)
	}

	cfg := fastConfig()
	cfg.MediaTokens = 300
	_, ts := newServer(t, cfg)
	answer := func(body string) usage {
		status, b := do(t, ts, "POST", "/v1/chat/completions", body)
		var r struct{ Usage usage }
		if err := json.Unmarshal(b, &r); err != nil || status != 200 {
			t.Fatalf("chat: %d %s", status, b)
		}
		return r.Usage
	}
	_, tb := do(t, ts, "POST", "/tokenize", `{"model":"m","messages":[{"role":"user","content":`+parts+`}]}`)
	var tok struct{ Count int }
	if err := json.Unmarshal(tb, &tok); err != nil {
		t.Fatal(err)
	}
	u, text := answer(body), answer(textOnly)
	if text.Details != nil {
		t.Errorf("text-only usage has details %+v", text.Details)
	}
	if u.Details == nil || *u.Details != (promptDetails{ImageTokens: 600, AudioTokens: 300}) {
		t.Fatalf("details %+v, want 600 image and 300 audio tokens", u.Details)
	}
	if u.PromptTokens != tok.Count+900 || tok.Count <= text.PromptTokens {
		t.Errorf("prompt %d, /tokenize %d, text alone %d: want the placeholders counted by /tokenize and 900 more in usage",
			u.PromptTokens, tok.Count, text.PromptTokens)
	}
}

// TestOutputLengthsPinned pins what the router benchmark's prompt
// generates (internal/route/report_bench_test.go): output lengths are
// seeded by a hash of the rendered prompt, so a change to what goes into
// that hash silently changes every benchmark's workload (it did once: a
// field added to chat messages made the GPU-paced answers shorter).
func TestOutputLengthsPinned(t *testing.T) {
	const body = `{"model":"m","max_tokens":32,"messages":[{"role":"system","content":"You are terse."},` +
		`{"role":"user","content":"Summarize capacity leasing in one short sentence, please."}]}`
	for _, tc := range []struct{ output, want int }{{32, 32}, {8, 8}} {
		cfg := fastConfig()
		cfg.OutputTokens = tc.output
		_, ts := newServer(t, cfg)
		_, b := do(t, ts, "POST", "/v1/chat/completions", body)
		var r struct{ Usage usage }
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		t.Logf("--output-tokens %d: %d completion tokens", tc.output, r.Usage.CompletionTokens)
		if r.Usage.CompletionTokens != tc.want {
			t.Errorf("--output-tokens %d: %d completion tokens, want %d", tc.output, r.Usage.CompletionTokens, tc.want)
		}
	}
}
