package enginesim

// Request parsing: the chat and completions bodies, their messages and
// media, decoded into what the scheduler needs. Errors are OpenAI-style
// invalid_request_error answers naming the field.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

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
