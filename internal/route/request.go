package route

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/internal/estimate"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/openai"
	"github.com/leasehold/leasehold/internal/tenancy"
)

// The request as the router needs it: validated before any lease is taken,
// so that a request rejected here never touches the ledger. The body is
// kept as a map of raw fields and forwarded re-encoded, with the router's
// own field ("priority") removed and stream_options.include_usage set.

// limits bound what parseRequest accepts.
type limits struct {
	// maxModelLen is the context length of the pool a request names (its
	// model; see estimate.ContextLens): max_tokens may not exceed it.
	maxModelLen func(ledger.PoolID) int64
	maxN        int
}

// request is a validated inference request.
type request struct {
	chat  bool
	model ledger.PoolID
	// priority is the body's "priority", "" if absent.
	priority ledger.PriorityName
	// maxTokens is the explicit max_tokens (max_completion_tokens for
	// chat), 0 when absent.
	maxTokens int64
	// maxTokensField is the body field maxTokens came from.
	maxTokensField string
	n              int64
	stream         bool
	// includeUsage is what the client asked for in stream_options.
	includeUsage bool

	// promptBytes is the text bytes of the prompt (messages' content,
	// roles, names and tool calls, and the tool definitions, JSON counting
	// 4/3 of its bytes; or the prompt string); promptMessages counts chat
	// messages;
	// promptTokens is the exact count when the prompt is token ids, or
	// once an engine counted it (--prompt-tokens=tokenize).
	promptBytes    int64
	promptMessages int64
	promptTokens   int64
	// media counts the chat request's images, audio clips and videos
	// (content parts), which the engine expands into many prompt tokens.
	media estimate.Counts
	// prefix is the prompt's leading bytes, for engine affinity.
	prefix []byte
	// Set by serve once known: the priority class, the prompt tokens
	// leased (exact or estimated) and when the request arrived.
	class     ledger.PriorityName
	promptEst int64
	arrived   time.Time
	// enginePriority is the "priority" sent to the engine (engine_priority), nil for none;
	// acct is the request's per-tenant series.
	enginePriority json.RawMessage
	acct           *tenancy.Request

	fields  map[string]json.RawMessage
	body    []byte // as the client sent it
	members int    // the body's members, a repeated name counted each time
}

// badRequest is a validation error naming the offending field.
type badRequest struct {
	param string
	msg   string
}

func (e *badRequest) Error() string { return e.msg }

func badf(param, format string, a ...any) error {
	return &badRequest{param: param, msg: fmt.Sprintf(format, a...)}
}

// parseRequest validates body as a chat (chat = true) or completions
// request. prefixBytes bounds the kept prompt prefix.
func parseRequest(body []byte, chat bool, lim limits, prefixBytes int) (*request, error) {
	fields, members, ok := openai.Fields(body)
	if !ok { // not one JSON object: encoding/json says why
		dec := json.NewDecoder(bytes.NewReader(body))
		if err := dec.Decode(&fields); err != nil {
			return nil, badf("", "invalid JSON body: %v", err)
		}
		if fields == nil {
			return nil, badf("", "the body must be a JSON object")
		}
		if _, err := dec.Token(); err != io.EOF {
			return nil, badf("", "invalid JSON body: trailing data after the object")
		}
	}
	r := &request{chat: chat, fields: fields, n: 1, body: body, members: members}

	var model string
	if err := field(fields, "model", &model); err != nil {
		return nil, err
	}
	if model == "" {
		return nil, badf("model", "model is required")
	}
	r.model = ledger.PoolID(model)

	if raw, ok := fields["priority"]; ok && !isNull(raw) {
		p, ok := openai.Text(raw)
		if !ok || p == "" {
			return nil, badf("priority", "priority must be the name of a priority class")
		}
		r.priority = ledger.PriorityName(p)
	}

	var prefix []byte
	if chat {
		if err := r.parseMessages(fields["messages"], &prefix, prefixBytes); err != nil {
			return nil, err
		}
		n, err := toolBytes(fields)
		if err != nil {
			return nil, err
		}
		r.promptBytes += openai.WeighJSON(n)
	} else if err := r.parsePrompt(fields["prompt"], &prefix, prefixBytes); err != nil {
		return nil, err
	}
	r.prefix = prefix

	mtName := "max_tokens"
	raw, ok := fields["max_tokens"]
	if chat {
		if rc, okc := fields["max_completion_tokens"]; okc && !isNull(rc) {
			mtName, raw, ok = "max_completion_tokens", rc, true
		}
	}
	if ok && !isNull(raw) {
		v, err := intField(mtName, raw)
		if err != nil {
			return nil, err
		}
		maxLen := lim.maxModelLen(r.model)
		if v < 1 || v > maxLen || v > ledger.MaxAmount {
			return nil, badf(mtName, "%s = %d, want 1..%d (the engines' context length)", mtName, v, min(maxLen, ledger.MaxAmount))
		}
		r.maxTokens, r.maxTokensField = v, mtName
	}
	if raw, ok := fields["n"]; ok && !isNull(raw) {
		v, err := intField("n", raw)
		if err != nil {
			return nil, err
		}
		if v < 1 || v > int64(lim.maxN) {
			return nil, badf("n", "n = %d, want 1..%d", v, lim.maxN)
		}
		r.n = v
	}
	if raw, ok := fields["best_of"]; ok && !isNull(raw) {
		v, err := intField("best_of", raw)
		if err != nil {
			return nil, err
		}
		if v < r.n || v > int64(lim.maxN) {
			return nil, badf("best_of", "best_of = %d, want n..%d", v, lim.maxN)
		}
		r.n = v // the engine runs best_of sequences
	}
	if err := field(fields, "stream", &r.stream); err != nil {
		return nil, err
	}
	if raw, ok := fields["stream_options"]; ok && !isNull(raw) {
		if !r.stream {
			return nil, badf("stream_options", "stream_options is only allowed with stream = true")
		}
		var ok bool
		if r.includeUsage, ok = openai.StreamOptions(raw); !ok {
			return nil, badf("stream_options", "stream_options must be an object with a boolean include_usage")
		}
	}
	return r, nil
}

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// field decodes an optional field into v, naming it on a type error.
func field(fields map[string]json.RawMessage, name string, v any) error {
	raw, ok := fields[name]
	if !ok || isNull(raw) {
		return nil
	}
	if err := openai.Decode(raw, v); err != nil {
		return badf(name, "%s has the wrong type: %v", name, err)
	}
	return nil
}

// intField decodes an integer, rejecting fractions and out-of-range values.
func intField(name string, raw json.RawMessage) (int64, error) {
	f, ok := openai.Number(raw)
	if !ok {
		return 0, badf(name, "%s must be an integer", name)
	}
	if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, badf(name, "%s = %v must be an integer", name, f)
	}
	return int64(f), nil
}

func appendPrefix(prefix *[]byte, max int, s string) {
	if room := max - len(*prefix); room > 0 {
		*prefix = append(*prefix, s[:min(len(s), room)]...)
	}
}

func (r *request) parseMessages(raw json.RawMessage, prefix *[]byte, prefixBytes int) error {
	if isNull(raw) {
		return badf("messages", "messages is required and must not be empty")
	}
	msgs, ok := openai.Messages(raw)
	if !ok {
		return badf("messages", "messages must be an array of message objects")
	}
	if len(msgs) == 0 {
		return badf("messages", "messages is required and must not be empty")
	}
	for i, m := range msgs {
		if m.Role == nil || *m.Role == "" {
			return badf(fmt.Sprintf("messages[%d].role", i), "messages[%d].role is required", i)
		}
		r.promptBytes += int64(len(*m.Role)) + int64(len(m.Name)) + openai.WeighJSON(openai.CompactLen(m.ToolCalls))
		appendPrefix(prefix, prefixBytes, *m.Role)
		text, isText := openai.Text(m.Content)
		var parts []openai.ContentPart
		switch {
		case isNull(m.Content):
		case isText:
			r.promptBytes += int64(len(text))
			appendPrefix(prefix, prefixBytes, text)
		case json.Unmarshal(m.Content, &parts) == nil:
			for j, p := range parts {
				kind, ok := openai.PartKind(p.Type)
				if !ok {
					return badf(fmt.Sprintf("messages[%d].content[%d].type", i, j),
						"messages[%d].content[%d].type %q is not a content part type this router can size (text, refusal, image_url, input_audio, audio_url, video_url)", i, j, p.Type)
				}
				if kind < estimate.Kinds {
					r.media[kind]++
					continue
				}
				text := p.Text + p.Refusal
				r.promptBytes += int64(len(text))
				appendPrefix(prefix, prefixBytes, text)
			}
		default:
			return badf(fmt.Sprintf("messages[%d].content", i), "messages[%d].content must be a string or an array of content parts", i)
		}
	}
	r.promptMessages = int64(len(msgs))
	return nil
}

// toolBytes is the size of a chat request's tool definitions ("tools", and
// the older "functions"), which the chat template renders into the prompt:
// they take KV like the messages, often more.
func toolBytes(fields map[string]json.RawMessage) (int64, error) {
	var n int64
	for _, name := range []string{"tools", "functions"} {
		raw, ok := fields[name]
		if !ok || isNull(raw) {
			continue
		}
		// raw is valid JSON (it came out of the decoded body): an array
		// is one that opens with '['.
		if v := bytes.TrimSpace(raw); len(v) == 0 || v[0] != '[' {
			return 0, badf(name, "%s must be an array of definitions", name)
		}
		n += openai.CompactLen(raw)
	}
	return n, nil
}

// parsePrompt accepts a string, an array of one string, token ids, or an
// array of one token-id array. Batches of several prompts are refused: one
// request is one reservation of n sequences.
func (r *request) parsePrompt(raw json.RawMessage, prefix *[]byte, prefixBytes int) error {
	var s string
	var ss []string
	var ids []int64
	var idss [][]int64
	switch {
	case isNull(raw):
		return badf("prompt", "prompt is required")
	case json.Unmarshal(raw, &s) == nil:
	case json.Unmarshal(raw, &ss) == nil && len(ss) == 1:
		s = ss[0]
	case json.Unmarshal(raw, &ids) == nil && len(ids) > 0:
		r.promptTokens = int64(len(ids))
		appendPrefix(prefix, prefixBytes, string(raw))
		return nil
	case json.Unmarshal(raw, &idss) == nil && len(idss) == 1 && len(idss[0]) > 0:
		r.promptTokens = int64(len(idss[0]))
		appendPrefix(prefix, prefixBytes, string(raw))
		return nil
	default:
		return badf("prompt", "prompt must be a string or token ids; batches of several prompts are not supported")
	}
	if s == "" {
		return badf("prompt", "prompt must not be empty")
	}
	r.promptBytes = int64(len(s))
	appendPrefix(prefix, prefixBytes, s)
	return nil
}

// upstreamBody returns the body to send to the engine: the client's fields
// without "priority" (a router field; vLLM gives it another meaning: it is
// sent only as the class's rank, under engine_priority), and
// with stream_options.include_usage set when streaming so the router
// learns the actual usage. It is the client's body as sent when that
// changes nothing and names each field once (so the engine reads the
// values the router validated), else the fields re-encoded.
func (r *request) upstreamBody() ([]byte, error) {
	_, prio := r.fields["priority"]
	addUsage := r.stream && !r.includeUsage
	if !prio && r.enginePriority == nil && !addUsage && r.members == len(r.fields) && utf8.Valid(r.body) {
		return r.body, nil
	}
	replace := map[string]json.RawMessage{"priority": r.enginePriority} // nil: none
	if addUsage {
		so := map[string]json.RawMessage{}
		if raw, ok := r.fields["stream_options"]; ok && !isNull(raw) {
			_ = json.Unmarshal(raw, &so)
		}
		so["include_usage"] = json.RawMessage("true")
		b, err := json.Marshal(so)
		if err != nil {
			return nil, err
		}
		replace["stream_options"] = b
	}
	return openai.AppendObject(make([]byte, 0, len(r.body)+32), r.fields, replace), nil
}

// prompt is r as the estimator takes it.
func (r *request) prompt() estimate.Prompt {
	return estimate.Prompt{Tokens: r.promptTokens, Bytes: r.promptBytes, Messages: r.promptMessages,
		Media: r.media, MaxTokens: r.maxTokens, N: r.n}
}

// checkContext refuses, before any lease, a request whose prompt is known
// exactly (token ids, or counted by --prompt-tokens=tokenize) and does not
// fit maxCtx, the largest context of the pool's engines: no engine could
// serve it. An estimated prompt is never refused here (the estimate errs
// high); the engine judges it.
func checkContext(req *request, maxCtx int64) error {
	if req.promptTokens <= 0 {
		return nil
	}
	param := "prompt"
	if req.chat {
		param = "messages"
	}
	switch {
	case req.promptTokens >= maxCtx:
		return &contextLengthError{param: param, msg: fmt.Sprintf(
			"this model's maximum context length is %d tokens; the prompt has %d, leaving no room for output", maxCtx, req.promptTokens)}
	case req.maxTokens > 0 && req.promptTokens+req.maxTokens > maxCtx:
		return &contextLengthError{param: req.maxTokensField, msg: fmt.Sprintf(
			"this model's maximum context length is %d tokens; you requested %d (%d in the prompt, %d for the output): lower %s or shorten the prompt",
			maxCtx, req.promptTokens+req.maxTokens, req.promptTokens, req.maxTokens, req.maxTokensField)}
	}
	return nil
}

// checkMedia refuses items of a kind the pool's model takes none of.
func checkMedia(m *estimate.Media, pool string, items estimate.Counts) error {
	for k, c := range items {
		if c > 0 && m.Floor(estimate.Kind(k)) == 0 {
			name := estimate.KindNames[k]
			return badf("messages", "model %q takes no %s input (its pool's media_tokens.%s is 0)", pool, name, name)
		}
	}
	return nil
}
