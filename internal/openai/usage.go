package openai

import (
	"bytes"
	"encoding/json"

	"github.com/leasehold/leasehold/internal/estimate"
	"github.com/leasehold/leasehold/internal/ledger"
)

// Usage is an OpenAI usage object.
type Usage struct {
	PromptTokens     int64                   `json:"prompt_tokens"`
	CompletionTokens int64                   `json:"completion_tokens"`
	Details          *estimate.PromptDetails `json:"prompt_tokens_details"`
}

// Ledger is u as the ledger's release takes it.
func (u *Usage) Ledger() ledger.Usage {
	return ledger.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}
}

// BodyUsage is the usage of a whole (non-streamed) answer, nil when it
// has none or is not JSON.
func BodyUsage(data []byte) *Usage {
	var a struct {
		Usage *Usage `json:"usage"`
	}
	if json.Unmarshal(data, &a) != nil {
		return nil
	}
	return a.Usage
}

// Event is what Inspect finds in one server-sent event of a streamed
// answer.
type Event struct {
	// Keep is false for the usage-only chunk (which the caller keeps if the
	// client asked for it).
	Keep bool
	// Usage is the chunk's usage object, nil if none.
	Usage *Usage
	// Choices reports a chunk with choices.
	Choices bool
	// End reports the stream's end marker, data: [DONE].
	End  bool
	data []byte // the chunk's JSON, when it has choices
}

var (
	keyUsage        = []byte(`"usage"`)
	keyIndex        = []byte(`"index"`)
	keyFinished     = []byte(`"finish_reason":"`)
	keyRole         = []byte(`"role":"`)
	keyContent      = []byte(`"content":`)
	keyEmptyContent = []byte(`"content":""`)
	keysOutput      = [][]byte{[]byte(`"tool_calls"`), []byte(`"function_call"`), []byte(`"reasoning`), []byte(`"text"`), []byte(`"refusal"`)}
)

// Inspect looks at one server-sent event of a streamed answer. It decodes
// JSON only for a chunk that carries a usage object; the rest is found by
// substring, which escaped string contents cannot fake (a quote inside a
// JSON string is written \"). The event's bytes must not change while the
// Event is used.
func Inspect(ev []byte) Event {
	data, ok := bytes.CutPrefix(bytes.TrimSpace(ev), []byte("data:"))
	if !ok {
		return Event{Keep: true}
	}
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, []byte("[DONE]")) {
		return Event{Keep: true, End: true}
	}
	if count(data, keyUsage, 1) == 0 {
		if count(data, keyIndex, 1) == 0 {
			return Event{Keep: true}
		}
		return Event{Keep: true, Choices: true, data: data}
	}
	if !json.Valid(data) {
		return Event{Keep: true}
	}
	c, ok := decodeChunk(data)
	if !ok {
		if c, ok = unmarshalChunk(data); !ok {
			return Event{Keep: true}
		}
	}
	if c.usage != nil && c.choices == 0 {
		return Event{Usage: c.usage}
	}
	e := Event{Keep: true, Usage: c.usage, Choices: c.choices > 0}
	if e.Choices {
		e.data = data
	}
	return e
}

// Output reports a chunk with choices that may carry generated tokens:
// every chunk with choices except a role announcement (a delta of a role
// and empty content, which vLLM sends first for each choice). When in
// doubt it is true, the side growth errs on.
func (e Event) Output() bool { return e.Choices && !announcement(e.data) }

// Finished counts the choices the chunk ends: non-null finish_reasons in
// the compact form engines write ("finish_reason":"stop"). Another
// spelling counts none, so a reader waits for sequences that ended.
func (e Event) Finished() int { return count(e.data, keyFinished, -1) }

// announcement reports a chunk whose every content is empty, that names a
// role and carries nothing else a choice can generate.
func announcement(data []byte) bool {
	if count(data, keyRole, 1) == 0 || count(data, keyContent, -1) != count(data, keyEmptyContent, -1) {
		return false
	}
	for _, k := range keysOutput {
		if count(data, k, 1) > 0 {
			return false
		}
	}
	return true
}

// count counts the occurrences of quoted, a pattern that starts with a
// quote, in data, stopping at limit (< 0: none). It looks for what follows
// the quote and checks the quote before it: bytes.Index skips ahead to its
// pattern's first byte, and a quote is JSON's most frequent byte.
func count(data, quoted []byte, limit int) int {
	rest := quoted[1:]
	n := 0
	for i := 0; n != limit; {
		j := bytes.Index(data[i:], rest)
		if j < 0 {
			break
		}
		if at := i + j; at > 0 && data[at-1] == '"' {
			n++
		}
		i += j + 1
	}
	return n
}
