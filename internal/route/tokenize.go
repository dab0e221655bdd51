package route

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
// pool's candidates in turn, skipping for tokenizeCooldown one whose last
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

// tokenizeCooldown is how long an engine whose /tokenize call failed is
// passed over.
const tokenizeCooldown = 5 * time.Second

// Reasons of leasehold_router_tokenize_errors_total.
const (
	tokenizeTimeout     = "timeout"
	tokenizeUnreachable = "unreachable"
	tokenizeHTTPError   = "http_error"
	tokenizeBadResponse = "bad_response"
	tokenizeUnsupported = "unsupported"
)

// chatTemplateFields are the chat request fields, besides messages, that
// change the rendered prompt; vLLM's chat /tokenize takes them too.
var chatTemplateFields = []string{"tools", "documents", "chat_template", "chat_template_kwargs",
	"add_generation_prompt", "continue_final_message", "add_special_tokens"}

// poolTokenizer picks the engine of one pool that counts a prompt.
type poolTokenizer struct {
	// prompts and chats list the pool's engines whose /tokenize counts a
	// prompt string, and chat messages.
	prompts, chats map[ledger.EngineID]bool
	next           atomic.Uint64
	// mu guards failed.
	mu     sync.Mutex
	failed map[ledger.EngineID]time.Time // when the engine's last call failed
}

func newPoolTokenizer(p fleet.Pool) *poolTokenizer {
	t := &poolTokenizer{prompts: map[ledger.EngineID]bool{}, chats: map[ledger.EngineID]bool{}, failed: map[ledger.EngineID]time.Time{}}
	for _, e := range p.Engines {
		t.prompts[e.ID] = e.Format != telemetry.FormatTGI
		t.chats[e.ID] = e.Format != telemetry.FormatTGI && e.Format != telemetry.FormatSGLang
	}
	return t
}

// pick returns the next candidate in turn that can count a chat (chat) or
// prompt request and has not failed within tokenizeCooldown, else the next
// that can; false when none can.
func (t *poolTokenizer) pick(views []engineView, chat bool, now time.Time) (ledger.EngineID, bool) {
	can := t.prompts
	if chat {
		can = t.chats
	}
	ids := make([]ledger.EngineID, 0, len(views))
	for _, v := range views {
		if can[v.id] {
			ids = append(ids, v.id)
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
		if at, failed := t.failed[id]; !failed || now.Sub(at) >= tokenizeCooldown {
			return id, true
		}
	}
	return ids[start%uint64(len(ids))], true
}

// mark records the outcome of a call to engine; it reports whether the
// engine just started failing.
func (t *poolTokenizer) mark(engine ledger.EngineID, ok bool, now time.Time) (newlyFailed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ok {
		delete(t.failed, engine)
		return false
	}
	at, failed := t.failed[engine]
	t.failed[engine] = now
	return !failed || now.Sub(at) >= tokenizeCooldown
}

// tokenizeError is why a prompt was not counted; reason labels the metric.
type tokenizeError struct {
	reason string
	err    error
}

func (e *tokenizeError) Error() string { return e.reason + ": " + e.err.Error() }

// countPrompt makes req's prompt count exact (--prompt-tokens=tokenize)
// from one of views, the pool's candidates, and calibrates p's estimator
// with it. On failure req keeps its estimate, and the failure is counted
// unless the client went away. No-op for token-id prompts and in
// estimate mode.
func (r *Router) countPrompt(ctx context.Context, p *poolRT, req *request, views []engineView, requestID string) {
	if r.cfg.PromptTokens != PromptTokenize || req.promptTokens > 0 || len(views) == 0 {
		return
	}
	engine, ok := p.tok.pick(views, req.chat, r.clock.Now())
	if !ok {
		r.met.tokenize.WithLabelValues(string(req.model), tokenizeUnsupported).Inc()
		return
	}
	n, err := r.tokenize(ctx, p.urls[engine], req, requestID)
	if ctx.Err() != nil {
		return // the client is gone: acquire reports it
	}
	if p.tok.mark(engine, err == nil, r.clock.Now()) {
		r.log.Warn("tokenize failed; leasing prompt estimates, and passing this engine over for a while", "pool", req.model, "engine", engine, "err", err, "for", tokenizeCooldown)
	}
	if err != nil {
		reason := tokenizeBadResponse
		var te *tokenizeError
		if errors.As(err, &te) {
			reason = te.reason
		}
		r.met.tokenize.WithLabelValues(string(req.model), reason).Inc()
		r.log.Debug("tokenize failed; leasing the prompt estimate", "pool", req.model, "engine", engine, "err", err)
		return
	}
	p.est.observeTokenized(req, n)
	req.promptTokens = n
}

// tokenize asks the engine at baseURL for the token count of req's prompt.
func (r *Router) tokenize(ctx context.Context, baseURL string, req *request, requestID string) (int64, error) {
	body := map[string]json.RawMessage{"model": req.fields["model"]}
	keep := []string{"add_special_tokens"}
	if req.chat {
		body["messages"] = req.fields["messages"]
		keep = chatTemplateFields
	} else {
		prompt := req.fields["prompt"]
		if len(prompt) > 0 && prompt[0] == '[' { // an array of one string
			var ss []string
			if json.Unmarshal(prompt, &ss) != nil || len(ss) != 1 {
				return 0, &tokenizeError{tokenizeBadResponse, errors.New("the prompt is not one string")}
			}
			prompt, _ = json.Marshal(ss[0])
		}
		body["prompt"] = prompt
	}
	for _, k := range keep {
		if v, ok := req.fields[k]; ok && !isNull(v) {
			body[k] = v
		}
	}
	data, err := json.Marshal(body)
	if err != nil {
		return 0, &tokenizeError{tokenizeBadResponse, err}
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.TokenizeTimeout)
	defer cancel()
	failed := func(reason string, err error) error {
		if errors.Is(err, context.DeadlineExceeded) {
			reason = tokenizeTimeout
		}
		return &tokenizeError{reason, fmt.Errorf("POST %s/tokenize: %w", baseURL, err)}
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/tokenize", bytes.NewReader(data))
	if err != nil {
		return 0, failed(tokenizeUnreachable, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	if requestID != "" {
		hreq.Header.Set("X-Request-Id", requestID)
	}
	resp, err := r.client.Do(hreq)
	if err != nil {
		return 0, failed(tokenizeUnreachable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return 0, failed(tokenizeHTTPError, fmt.Errorf("HTTP %s", resp.Status))
	}
	var out struct {
		Count *int64 `json:"count"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxUpstreamBody)).Decode(&out); err != nil {
		return 0, failed(tokenizeBadResponse, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) // to EOF, so the connection is reused
	if out.Count == nil || *out.Count < 1 || *out.Count > ledger.MaxAmount {
		return 0, failed(tokenizeBadResponse, fmt.Errorf("no count in 1..%d in the answer", ledger.MaxAmount))
	}
	return *out.Count, nil
}
