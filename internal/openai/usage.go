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

// Inspect looks at one server-sent event of a streamed answer: keep is
// false for the usage-only chunk (which the caller keeps if the client
// asked for it), u is its usage, hasChoices reports a chunk carrying
// output.
func Inspect(ev []byte) (keep bool, u *Usage, hasChoices bool) {
	data, ok := bytes.CutPrefix(bytes.TrimSpace(ev), []byte("data:"))
	if !ok {
		return true, nil, false
	}
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, []byte("[DONE]")) {
		return true, nil, false
	}
	if !bytes.Contains(data, []byte(`"usage"`)) {
		return true, nil, bytes.Contains(data, []byte(`"index"`))
	}
	var c struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   *Usage            `json:"usage"`
	}
	if json.Unmarshal(data, &c) != nil {
		return true, nil, false
	}
	if c.Usage != nil && len(c.Choices) == 0 {
		return false, c.Usage, false
	}
	return true, c.Usage, len(c.Choices) > 0
}
