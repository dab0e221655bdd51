package enginesim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/internal/telemetry"
)

// The HTTP API: OpenAI-compatible inference, vLLM's /tokenize, /metrics,
// /health, TGI's GET /info (format tgi only: max_total_tokens is the
// context length, as GET /v1/models' max_model_len is for the others) and
// the admin endpoints. Every error body is OpenAI-style:
// {"error":{"message","type","param","code"}}.

const (
	maxBodyBytes = 8 << 20
	maxN         = 128
)

// apiError is an error with its HTTP answer.
type apiError struct {
	status int
	typ    string
	code   string
	param  string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(param, format string, a ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "invalid_request", param: param, msg: fmt.Sprintf(format, a...)}
}

// toAPIError maps an error to its HTTP answer: the one table of statuses.
func toAPIError(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, ErrTooLong):
		return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "context_length_exceeded", param: "max_tokens", msg: err.Error()}
	case errors.Is(err, ErrClosed):
		return &apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "shutting_down", msg: err.Error()}
	case errors.Is(err, ErrEngineFailure):
		return &apiError{status: http.StatusInternalServerError, typ: "server_error", code: "engine_failure", msg: err.Error()}
	}
	return &apiError{status: http.StatusInternalServerError, typ: "server_error", code: "internal_error", msg: err.Error()}
}

func writeError(w http.ResponseWriter, err error) {
	ae := toAPIError(err)
	body := map[string]any{"error": map[string]any{
		"message": ae.msg, "type": ae.typ, "code": ae.code, "param": nilIfEmpty(ae.param),
	}}
	writeJSON(w, ae.status, body)
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Handler returns the engine's HTTP API.
func (e *Engine) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { e.serveCompletion(w, r, true) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { e.serveCompletion(w, r, false) })
	mux.HandleFunc("GET /v1/models", e.serveModels)
	mux.HandleFunc("POST /tokenize", e.serveTokenize)
	if e.cfg.Format == telemetry.FormatTGI {
		mux.HandleFunc("GET /info", e.serveInfo)
	}
	mux.HandleFunc("GET /health", e.serveHealth)
	mux.HandleFunc("GET /metrics", e.serveMetrics)
	mux.HandleFunc("GET /admin/stats", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, e.Stats()) })
	mux.HandleFunc("POST /admin/reset", func(w http.ResponseWriter, r *http.Request) {
		e.Reset()
		writeJSON(w, http.StatusOK, e.Stats())
	})
	mux.HandleFunc("GET /admin/fail", func(w http.ResponseWriter, r *http.Request) {
		f, _ := e.faults()
		writeJSON(w, http.StatusOK, f)
	})
	mux.HandleFunc("POST /admin/fail", e.serveFail)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: http.StatusNotFound, typ: "not_found_error", code: "not_found", msg: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
	})
	return mux
}

// injectedError answers as the faults in force make an OpenAI endpoint,
// /tokenize or /health answer, and reports whether it did.
func (e *Engine) injectedError(w http.ResponseWriter) bool {
	switch f, _ := e.faults(); {
	case f.Reset:
		dropConnection()
	case f.Errors:
		writeError(w, &apiError{status: http.StatusInternalServerError, typ: "server_error", code: "injected_failure", msg: "enginesim: injected failure (POST /admin/fail)"})
	case f.Unavailable:
		writeError(w, &apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "injected_unavailable", msg: "enginesim: injected unavailability (POST /admin/fail)"})
	default:
		return false
	}
	return true
}

func (e *Engine) serveHealth(w http.ResponseWriter, _ *http.Request) {
	if e.injectedError(w) {
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (e *Engine) serveModels(w http.ResponseWriter, _ *http.Request) {
	if e.injectedError(w) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": e.cfg.Model, "object": "model", "created": e.started.Unix(),
			"owned_by": "enginesim", "root": e.cfg.Model, "max_model_len": e.cfg.MaxModelLen,
		}},
	})
}

// serveInfo answers like TGI's GET /info, with the fields a client reads
// for the model's limits.
func (e *Engine) serveInfo(w http.ResponseWriter, _ *http.Request) {
	if e.injectedError(w) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"model_id": e.cfg.Model, "model_sha": nil, "model_pipeline_tag": "text-generation",
		"max_concurrent_requests": e.cfg.Slots, "max_best_of": maxN, "max_stop_sequences": 4,
		"max_input_tokens": e.cfg.MaxModelLen - 1, "max_total_tokens": e.cfg.MaxModelLen,
		"max_client_batch_size": 1, "validation_workers": 1,
		"router": "text-generation-router", "version": "enginesim",
	})
}

// usage is the OpenAI usage object.
type usage struct {
	PromptTokens     int            `json:"prompt_tokens"`
	CompletionTokens int            `json:"completion_tokens"`
	TotalTokens      int            `json:"total_tokens"`
	Details          *promptDetails `json:"prompt_tokens_details,omitempty"`
}

// promptDetails is usage.prompt_tokens_details for a request with media,
// as vLLM reports it with --enable-prompt-tokens-details: the prompt
// tokens each kind took.
type promptDetails struct {
	ImageTokens int `json:"image_tokens"`
	AudioTokens int `json:"audio_tokens"`
	VideoTokens int `json:"video_tokens"`
}

func usageOf(r *request, prog []progress) usage {
	u := usage{PromptTokens: r.prompt}
	if m := r.media; m != ([mediaKinds]int{}) {
		u.Details = &promptDetails{ImageTokens: m[mediaImage], AudioTokens: m[mediaAudio], VideoTokens: m[mediaVideo]}
	}
	for _, p := range prog {
		u.CompletionTokens += p.generated
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

func (e *Engine) serveCompletion(w http.ResponseWriter, hr *http.Request, chat bool) {
	start := time.Now()
	if e.injectedError(w) {
		return
	}
	var body completionRequest
	if err := decodeBody(hr, w, &body); err != nil {
		writeError(w, err)
		return
	}
	p, err := e.parseCompletion(&body, chat)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx := hr.Context()
	if f, hangC := e.faults(); f.Hang {
		select {
		case <-hangC:
		case <-ctx.Done():
			return
		}
	}
	r, err := e.submit(p.sub)
	if err != nil {
		writeError(w, err)
		return
	}
	out := response{e: e, r: r, chat: chat, model: p.model, created: time.Now().Unix(), start: start}
	if chat {
		out.id = "chatcmpl-" + strconv.FormatUint(r.id, 16)
	} else {
		out.id = "cmpl-" + strconv.FormatUint(r.id, 16)
	}
	if p.stream {
		out.stream(ctx, w, p.includeUsage)
		return
	}
	out.whole(ctx, w)
}

// serveTokenize is vLLM's POST /tokenize: {"model", "prompt"} or
// {"model", "messages"} (the chat template and reply header included, as
// in a chat request's usage.prompt_tokens); the answer is {"count",
// "max_model_len", "tokens"}.
func (e *Engine) serveTokenize(w http.ResponseWriter, hr *http.Request) {
	if e.injectedError(w) {
		return
	}
	if f, _ := e.faults(); f.Tokenize {
		writeError(w, &apiError{status: http.StatusInternalServerError, typ: "server_error", code: "injected_failure", msg: "enginesim: injected /tokenize failure (POST /admin/fail)"})
		return
	}
	var body struct {
		Model    string          `json:"model"`
		Prompt   *string         `json:"prompt"`
		Messages []rawMessage    `json:"messages"`
		Tools    json.RawMessage `json:"tools"`
	}
	if err := decodeBody(hr, w, &body); err != nil {
		writeError(w, err)
		return
	}
	var ids []int
	switch {
	case body.Prompt != nil:
		ids = appendTokens([]int{}, *body.Prompt)
	case e.cfg.Format == telemetry.FormatSGLang:
		// SGLang's /tokenize takes a prompt string only.
		writeError(w, badRequest("prompt", "prompt is required (this /tokenize does not apply a chat template to messages)"))
		return
	case len(body.Messages) > 0:
		msgs, err := messages(body.Messages, body.Tools)
		if err != nil {
			writeError(w, err)
			return
		}
		ids = chatTokens(msgs)
	default:
		writeError(w, badRequest("prompt", "prompt or messages is required"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": ids, "count": len(ids), "max_model_len": e.cfg.MaxModelLen})
}

func (e *Engine) serveFail(w http.ResponseWriter, hr *http.Request) {
	var c FailChange
	if mode := hr.URL.Query().Get("mode"); mode != "" {
		var err error
		if c, err = failMode(mode); err != nil {
			writeError(w, badRequest("mode", "%v", err))
			return
		}
	} else if err := decodeBody(hr, w, &c); err != nil {
		writeError(w, err)
		return
	}
	f, aborted := e.Fail(c)
	writeJSON(w, http.StatusOK, map[string]any{"fail": f, "aborted": aborted})
}
