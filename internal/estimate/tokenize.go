package estimate

// Exact prompt counts (--prompt-tokens=tokenize). Before a text prompt is
// leased for, the router asks one engine of the request's pool for its
// token count with vLLM's POST /tokenize: {"model", "prompt"} for
// completions; {"model", "messages"} for chat, with the request's fields
// that change how the chat template renders (tools, chat_template, ...).
// The answer's "count" is what the engine will hold for the prompt, chat
// template included, and it calibrates the estimator as an engine's
// reported usage does. Token-id prompts need no call.
//
// Every engine of a pool serves the same model, so the call goes to the
// pool's candidates in turn, skipping for TokenizeCooldown one whose last
// call failed (unless every one did). TGI-format engines are never asked
// (TGI's /tokenize has another shape), and SGLang-format engines only for
// completions: SGLang's /tokenize takes {"model", "prompt"} and answers
// {"tokens", "count", "max_model_len"} like vLLM's, but applies no chat
// template. A request no engine of its pool can count is leased for its
// estimate and counted with reason "unsupported". The call is bounded by
// --tokenize-timeout. When it fails the request is leased for the
// calibrated estimate, which errs high, and
// leasehold_router_tokenize_errors_total{pool,reason} counts it.
//
// The call runs before Acquire: no lease is held while it waits, and a
// request refused after it never had one.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// maxTokenizeBody bounds an engine's /tokenize answer.
const maxTokenizeBody = 64 << 20

// TokenizeCooldown is how long an engine whose /tokenize call failed is
// passed over.
const TokenizeCooldown = 5 * time.Second

// Reasons of leasehold_router_tokenize_errors_total (TokenizeError.Reason).
const (
	ReasonTimeout     = "timeout"
	ReasonUnreachable = "unreachable"
	ReasonHTTPError   = "http_error"
	ReasonBadResponse = "bad_response"
	ReasonUnsupported = "unsupported"
)

// chatTemplateFields are the chat request fields, besides messages, that
// change the rendered prompt; vLLM's chat /tokenize takes them too.
var chatTemplateFields = []string{"tools", "documents", "chat_template", "chat_template_kwargs",
	"add_generation_prompt", "continue_final_message", "add_special_tokens"}

// PoolTokenizer picks the engine of one pool that counts a prompt.
type PoolTokenizer struct {
	// prompts and chats list the pool's engines whose /tokenize counts a
	// prompt string, and chat messages.
	prompts, chats map[ledger.EngineID]bool
	next           atomic.Uint64
	// mu guards failed.
	mu     sync.Mutex
	failed map[ledger.EngineID]time.Time // when the engine's last call failed
}

// NewPoolTokenizer returns p's tokenizer choice.
func NewPoolTokenizer(p fleet.Pool) *PoolTokenizer {
	t := &PoolTokenizer{prompts: map[ledger.EngineID]bool{}, chats: map[ledger.EngineID]bool{}, failed: map[ledger.EngineID]time.Time{}}
	for _, e := range p.Engines {
		t.prompts[e.ID] = e.Format != telemetry.FormatTGI
		t.chats[e.ID] = e.Format != telemetry.FormatTGI && e.Format != telemetry.FormatSGLang
	}
	return t
}

// Pick returns the next of cands in turn that can count a chat (chat) or
// prompt request and has not failed within TokenizeCooldown, else the next
// that can; false when none can.
func (t *PoolTokenizer) Pick(cands []ledger.EngineID, chat bool, now time.Time) (ledger.EngineID, bool) {
	can := t.prompts
	if chat {
		can = t.chats
	}
	ids := make([]ledger.EngineID, 0, len(cands))
	for _, id := range cands {
		if can[id] {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return "", false
	}
	start := t.next.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range uint64(len(ids)) {
		id := ids[(start+i)%uint64(len(ids))]
		if at, failed := t.failed[id]; !failed || now.Sub(at) >= TokenizeCooldown {
			return id, true
		}
	}
	return ids[start%uint64(len(ids))], true
}

// Mark records the outcome of a call to engine; it reports whether the
// engine just started failing.
func (t *PoolTokenizer) Mark(engine ledger.EngineID, ok bool, now time.Time) (newlyFailed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ok {
		delete(t.failed, engine)
		return false
	}
	at, failed := t.failed[engine]
	t.failed[engine] = now
	return !failed || now.Sub(at) >= TokenizeCooldown
}

// TokenizeError is why a prompt was not counted; Reason labels the metric.
type TokenizeError struct {
	Reason string
	Err    error
}

func (e *TokenizeError) Error() string { return e.Reason + ": " + e.Err.Error() }

// Tokenize is one /tokenize call: the count of a request's prompt.
type Tokenize struct {
	Client *http.Client
	// Timeout bounds the call (--tokenize-timeout).
	Timeout time.Duration
	// BaseURL is the engine's, without a trailing slash.
	BaseURL string
	// Fields is the request's body; Chat whether it is a chat request.
	Fields map[string]json.RawMessage
	Chat   bool
	// RequestID, when set, is passed on as X-Request-Id.
	RequestID string
}

// Count asks the engine for the token count of the prompt. Its error is a
// *TokenizeError naming the reason.
func (t Tokenize) Count(ctx context.Context) (int64, error) {
	baseURL, requestID, client := t.BaseURL, t.RequestID, t.Client
	body := map[string]json.RawMessage{"model": t.Fields["model"]}
	keep := []string{"add_special_tokens"}
	if t.Chat {
		body["messages"] = t.Fields["messages"]
		keep = chatTemplateFields
	} else {
		prompt := t.Fields["prompt"]
		if len(prompt) > 0 && prompt[0] == '[' { // an array of one string
			var ss []string
			if json.Unmarshal(prompt, &ss) != nil || len(ss) != 1 {
				return 0, &TokenizeError{ReasonBadResponse, errors.New("the prompt is not one string")}
			}
			prompt, _ = json.Marshal(ss[0])
		}
		body["prompt"] = prompt
	}
	for _, k := range keep {
		if v, ok := t.Fields[k]; ok && len(v) > 0 && string(v) != "null" {
			body[k] = v
		}
	}
	data, err := json.Marshal(body)
	if err != nil {
		return 0, &TokenizeError{ReasonBadResponse, err}
	}
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	failed := func(reason string, err error) error {
		if errors.Is(err, context.DeadlineExceeded) {
			reason = ReasonTimeout
		}
		return &TokenizeError{reason, fmt.Errorf("POST %s/tokenize: %w", baseURL, err)}
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/tokenize", bytes.NewReader(data))
	if err != nil {
		return 0, failed(ReasonUnreachable, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	if requestID != "" {
		hreq.Header.Set("X-Request-Id", requestID)
	}
	resp, err := client.Do(hreq)
	if err != nil {
		return 0, failed(ReasonUnreachable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return 0, failed(ReasonHTTPError, fmt.Errorf("HTTP %s", resp.Status))
	}
	var out struct {
		Count *int64 `json:"count"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxTokenizeBody)).Decode(&out); err != nil {
		return 0, failed(ReasonBadResponse, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) // to EOF, so the connection is reused
	if out.Count == nil || *out.Count < 1 || *out.Count > ledger.MaxAmount {
		return 0, failed(ReasonBadResponse, fmt.Errorf("no count in 1..%d in the answer", ledger.MaxAmount))
	}
	return *out.Count, nil
}
