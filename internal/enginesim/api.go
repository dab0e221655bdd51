package enginesim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
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

func (e *Engine) injectedError(w http.ResponseWriter) bool {
	if f, _ := e.faults(); f.Errors {
		writeError(w, &apiError{status: http.StatusInternalServerError, typ: "server_error", code: "injected_failure", msg: "enginesim: injected failure (POST /admin/fail)"})
		return true
	}
	return false
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

// completionRequest is the union of the chat and completions bodies.
type completionRequest struct {
	Model               string          `json:"model"`
	Messages            []rawMessage    `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	Functions           json.RawMessage `json:"functions"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	MinTokens           int             `json:"min_tokens"`
	N                   *int            `json:"n"`
	Seed                *int64          `json:"seed"`
	IgnoreEOS           bool            `json:"ignore_eos"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type rawMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Name      string          `json:"name"`
	ToolCalls json.RawMessage `json:"tool_calls"`
}

// decodeBody reads a JSON body into v, rejecting trailing data.
func decodeBody(r *http.Request, w http.ResponseWriter, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err := dec.Decode(v); err != nil {
		return badRequest("", "invalid JSON body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("", "invalid JSON body: trailing data after the object")
	}
	return nil
}

// messages reduces chat messages to text, as a chat template renders
// them: tool definitions (each of tools, non-null) first, as a message of
// their own, then each message's name, content and tool calls.
func messages(raw []rawMessage, tools ...json.RawMessage) ([]chatMessage, error) {
	out := make([]chatMessage, 0, len(raw)+1)
	var defs strings.Builder
	for _, t := range tools {
		s, ok := compactJSON(t)
		if !ok {
			return nil, badRequest("tools", "tools must be an array of tool definitions")
		}
		defs.WriteString(s)
	}
	if defs.Len() > 0 {
		out = append(out, chatMessage{Role: "tools", Text: defs.String()})
	}
	for i, m := range raw {
		if m.Role == "" {
			return nil, badRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d].role is required", i)
		}
		var text string
		var media [mediaKinds]int
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		switch {
		case len(m.Content) == 0 || string(m.Content) == "null":
		case json.Unmarshal(m.Content, &text) == nil:
		case json.Unmarshal(m.Content, &parts) == nil:
			var b strings.Builder
			for _, p := range parts {
				if k, ok := mediaParts[p.Type]; ok {
					media[k]++
					b.WriteString(mediaPlaceholders[k])
				}
				if p.Type == "text" {
					b.WriteString(p.Text)
					b.WriteByte('\n')
				}
			}
			text = b.String()
		default:
			return nil, badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content must be a string or an array of content parts", i)
		}
		if m.Name != "" {
			text = m.Name + ": " + text
		}
		calls, ok := compactJSON(m.ToolCalls)
		if !ok {
			return nil, badRequest(fmt.Sprintf("messages[%d].tool_calls", i), "messages[%d].tool_calls must be an array", i)
		}
		out = append(out, chatMessage{Role: m.Role, Text: text + calls, Media: media})
	}
	return out, nil
}

// The media kinds of chat content parts: a vision or audio model's
// processor expands each item into Config.MediaTokens prompt tokens; the
// chat template leaves a placeholder, which is all /tokenize counts (as
// vLLM's does).
const (
	mediaImage = iota
	mediaAudio
	mediaVideo
	mediaKinds
)

var (
	mediaParts = map[string]int{
		"image_url": mediaImage, "image": mediaImage, "input_image": mediaImage, "image_embeds": mediaImage,
		"input_audio": mediaAudio, "audio_url": mediaAudio, "audio": mediaAudio,
		"video_url": mediaVideo, "video": mediaVideo,
	}
	mediaPlaceholders = [mediaKinds]string{"<image>", "<audio>", "<video>"}
	mediaNames        = [mediaKinds]string{"image", "audio", "video"}
)

// mediaTokens is what msgs' media expand to, per kind; a model that takes
// no media (MediaTokens 0) refuses them as vLLM refuses images for a text
// model.
func (e *Engine) mediaTokens(msgs []chatMessage) ([mediaKinds]int, error) {
	var t [mediaKinds]int
	for _, m := range msgs {
		for k, n := range m.Media {
			if n > 0 && e.cfg.MediaTokens == 0 {
				return t, badRequest("messages", "%s input is not supported by this model (enginesim --media-tokens is 0)", mediaNames[k])
			}
			t[k] += n * e.cfg.MediaTokens
		}
	}
	return t, nil
}

// compactJSON is raw without insignificant whitespace, "" when absent or
// null; false when raw is not JSON.
func compactJSON(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", true
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return "", false
	}
	return b.String(), true
}

// promptTokens counts the prompt of a completions request: a string, an
// array of one string, an array of token ids, or an array of one such
// array.
func promptTokens(raw json.RawMessage) (int, error) {
	var s string
	var ss []string
	var ids []int
	var idss [][]int
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return 0, badRequest("prompt", "prompt is required")
	case json.Unmarshal(raw, &s) == nil:
		return countTokens(s), nil
	case json.Unmarshal(raw, &ss) == nil && len(ss) == 1:
		return countTokens(ss[0]), nil
	case json.Unmarshal(raw, &ids) == nil && len(ids) > 0:
		return len(ids), nil
	case json.Unmarshal(raw, &idss) == nil && len(idss) == 1:
		return len(idss[0]), nil
	}
	return 0, badRequest("prompt", "prompt must be a string or token ids; batches of several prompts are not supported")
}

// parsed is a validated inference request.
type parsed struct {
	sub          submission
	stream       bool
	includeUsage bool
	model        string
}

func (e *Engine) parseCompletion(body *completionRequest, chat bool) (parsed, error) {
	var p parsed
	if e.cfg.StrictModel && body.Model != "" && body.Model != e.cfg.Model {
		return p, &apiError{status: http.StatusNotFound, typ: "not_found_error", code: "model_not_found", param: "model",
			msg: fmt.Sprintf("the model %q does not exist; this engine serves %q", body.Model, e.cfg.Model)}
	}
	p.model = body.Model
	if p.model == "" {
		p.model = e.cfg.Model
	}
	var key []byte
	if chat {
		if len(body.Messages) == 0 {
			return p, badRequest("messages", "messages is required and must not be empty")
		}
		msgs, err := messages(body.Messages, body.Tools, body.Functions)
		if err != nil {
			return p, err
		}
		media, err := e.mediaTokens(msgs)
		if err != nil {
			return p, err
		}
		p.sub.promptTokens = countChatTokens(msgs) + media[mediaImage] + media[mediaAudio] + media[mediaVideo]
		p.sub.media = media
		key, _ = json.Marshal(msgs)
	} else {
		n, err := promptTokens(body.Prompt)
		if err != nil {
			return p, err
		}
		if n == 0 {
			return p, badRequest("prompt", "prompt has no tokens")
		}
		p.sub.promptTokens = n
		key = body.Prompt
	}
	p.sub.key = hashString(string(key))
	if body.Seed != nil {
		p.sub.key = mix(uint64(*body.Seed), 0x5eed)
	}
	mt := body.MaxTokens
	if chat && body.MaxCompletionTokens != nil {
		mt = body.MaxCompletionTokens
	}
	if mt != nil {
		if *mt < 1 {
			return p, badRequest("max_tokens", "max_tokens = %d, want >= 1", *mt)
		}
		p.sub.maxTokens = *mt
	}
	if body.MinTokens < 0 {
		return p, badRequest("min_tokens", "min_tokens = %d, want >= 0", body.MinTokens)
	}
	p.sub.minTokens = body.MinTokens
	p.sub.n = 1
	if body.N != nil {
		if *body.N < 1 || *body.N > maxN {
			return p, badRequest("n", "n = %d, want 1..%d", *body.N, maxN)
		}
		p.sub.n = *body.N
	}
	p.sub.ignoreEOS = body.IgnoreEOS
	p.stream = body.Stream
	if body.StreamOptions != nil {
		if !body.Stream {
			return p, badRequest("stream_options", "stream_options is only allowed with stream = true")
		}
		p.includeUsage = body.StreamOptions.IncludeUsage
	}
	return p, nil
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

// response writes one accepted request's answer.
type response struct {
	e       *Engine
	r       *request
	chat    bool
	id      string
	model   string
	created int64
	// start is when the request reached the handler.
	start time.Time
}

// dropConnection cuts the client's connection without a final answer, as
// a crashed engine would.
func dropConnection() { panic(http.ErrAbortHandler) }

// wait blocks until r makes progress; false means the answer is over: the
// client went away (r is aborted) or the engine closed.
func (o *response) wait(ctx context.Context) bool {
	select {
	case <-o.r.notifyC:
		return true
	case <-ctx.Done():
		o.e.abort(o.r)
		return false
	case <-o.e.stopC:
		o.e.abort(o.r)
		return false
	}
}

func (o *response) text(seq, from, to int) string {
	var b strings.Builder
	for t := from; t < to; t++ {
		b.WriteString(tokenText(o.r.seqs[seq].key, t))
	}
	return b.String()
}

func (o *response) whole(ctx context.Context, w http.ResponseWriter) {
	select {
	case <-o.r.doneC:
	case <-ctx.Done():
		o.e.abort(o.r)
		return
	case <-o.e.stopC:
		o.e.abort(o.r)
		writeError(w, ErrClosed)
		return
	}
	prog, err := o.e.snapshot(o.r, nil)
	if err != nil {
		dropConnection()
	}
	choices := make([]map[string]any, len(prog))
	for i, p := range prog {
		c := map[string]any{"index": i, "finish_reason": p.finish, "logprobs": nil}
		if o.chat {
			c["message"] = map[string]any{"role": "assistant", "content": o.text(i, 0, p.generated)}
		} else {
			c["text"] = o.text(i, 0, p.generated)
		}
		choices[i] = c
	}
	object := "text_completion"
	if o.chat {
		object = "chat.completion"
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": o.id, "object": object, "created": o.created, "model": o.model,
		"choices": choices, "usage": usageOf(o.r, prog),
	})
}

// streamChoice is one choice of a stream chunk.
type streamChoice struct {
	Index        int            `json:"index"`
	Delta        map[string]any `json:"delta,omitempty"`
	Text         *string        `json:"text,omitempty"`
	Logprobs     any            `json:"logprobs"`
	FinishReason *string        `json:"finish_reason"`
}

type streamChunk struct {
	ID      string         `json:"id"`
	Object  string         `json:"object"`
	Created int64          `json:"created"`
	Model   string         `json:"model"`
	Choices []streamChoice `json:"choices"`
	Usage   *usage         `json:"usage,omitempty"`
	// Sim is the simulator's own extension, on the usage chunk only.
	Sim *simTiming `json:"x_enginesim,omitempty"`
}

// simTiming is how long the engine spent on a request: service_us runs
// from the request reaching the handler to the usage chunk, which goes out
// with [DONE] in the stream's last write. A client subtracts it from what
// it measured to see what lies outside the engine (the network, a hop),
// free of the engine's own step-to-step variance.
type simTiming struct {
	ServiceMicros int64 `json:"service_us"`
}

// stream writes the answer as server-sent events: per choice, a role chunk
// (chat), one chunk per token, the finish reason on the last; then a usage
// chunk with no choices when asked for, then [DONE].
func (o *response) stream(ctx context.Context, w http.ResponseWriter, includeUsage bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	object := "text_completion"
	if o.chat {
		object = "chat.completion.chunk"
	}
	var buf bytes.Buffer
	emit := func(c streamChunk) {
		c.ID, c.Object, c.Created, c.Model = o.id, object, o.created, o.model
		if c.Choices == nil {
			c.Choices = []streamChoice{}
		}
		b, _ := json.Marshal(c)
		buf.WriteString("data: ")
		buf.Write(b)
		buf.WriteString("\n\n")
	}
	flush := func() bool {
		_, err := w.Write(buf.Bytes())
		buf.Reset()
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			o.e.abort(o.r)
			return false
		}
		return true
	}
	n := len(o.r.seqs)
	if o.chat {
		for i := range n {
			emit(streamChunk{Choices: []streamChoice{{Index: i, Delta: map[string]any{"role": "assistant", "content": ""}}}})
		}
	}
	if !flush() {
		return
	}
	sent := make([]int, n)
	done := make([]bool, n)
	var prog []progress
	for left := n; left > 0; {
		if !o.wait(ctx) {
			return
		}
		var err error
		if prog, err = o.e.snapshot(o.r, prog); err != nil {
			dropConnection()
		}
		for i, p := range prog {
			for t := sent[i]; t < p.generated; t++ {
				tok := tokenText(o.r.seqs[i].key, t)
				ch := streamChoice{Index: i}
				if o.chat {
					ch.Delta = map[string]any{"content": tok}
				} else {
					ch.Text = &tok
				}
				if t == p.generated-1 && p.finish != "" {
					ch.FinishReason = &p.finish
					done[i] = true
					left--
				}
				emit(streamChunk{Choices: []streamChoice{ch}})
			}
			sent[i] = p.generated
			if p.finish != "" && !done[i] { // ended without a new token
				done[i] = true
				left--
				ch := streamChoice{Index: i, FinishReason: &p.finish}
				if o.chat {
					ch.Delta = map[string]any{}
				} else {
					empty := ""
					ch.Text = &empty
				}
				emit(streamChunk{Choices: []streamChoice{ch}})
			}
		}
		if !flush() {
			return
		}
	}
	if includeUsage {
		u := usageOf(o.r, prog)
		emit(streamChunk{Usage: &u, Sim: &simTiming{ServiceMicros: time.Since(o.start).Microseconds()}})
	}
	buf.WriteString("data: [DONE]\n\n")
	flush()
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
