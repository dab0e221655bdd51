package openai

import (
	"encoding/json"
	"testing"

	"github.com/leasehold/leasehold/internal/estimate"
)

func TestInspect(t *testing.T) {
	tests := []struct {
		name                     string
		ev                       string
		keep, hasChoices, output bool
		finished                 int
		wantUsage                int64 // completion tokens; -1: no usage
	}{
		{"comment", ": ping\n\n", true, false, false, 0, -1},
		{"done", "data: [DONE]\n\n", true, false, false, 0, -1},
		{"chunk", `data: {"choices":[{"index":0,"text":"a"}]}` + "\n\n", true, true, true, 0, -1},
		{"usage only", `data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":7}}` + "\n\n", false, false, false, 0, 7},
		{"chunk with usage", `data: {"choices":[{"index":0,"text":"a"}],"usage":{"prompt_tokens":3,"completion_tokens":8}}` + "\n\n", true, true, true, 0, 8},
		{"usage null", `data: {"choices":[{"index":0,"text":"a"}],"usage":null}` + "\n\n", true, true, true, 0, -1},
		{"not JSON", `data: {"usage": oops` + "\n\n", true, false, false, 0, -1},
		{"role announcement", `data: {"choices":[{"index":0,"delta":{"content":"","role":"assistant"},"logprobs":null,"finish_reason":null}]}` + "\n\n", true, true, false, 0, -1},
		{"role without content", `data: {"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}` + "\n\n", true, true, false, 0, -1},
		{"role with content", `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}` + "\n\n", true, true, true, 0, -1},
		{"role with a tool call", `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"","tool_calls":[{"index":0}]}}]}` + "\n\n", true, true, true, 0, -1},
		{"role and another choice's content", `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}},{"index":1,"delta":{"content":"x"}}]}` + "\n\n", true, true, true, 0, -1},
		{"escaped keys in content", `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"\"content\":\"\" \"finish_reason\":\"stop\""},"finish_reason":null}]}` + "\n\n", true, true, true, 0, -1},
		{"last token", `data: {"choices":[{"index":0,"delta":{"content":" is"},"logprobs":null,"finish_reason":"stop"}]}` + "\n\n", true, true, true, 1, -1},
		{"two choices end", `data: {"choices":[{"index":0,"text":"","finish_reason":"length"},{"index":1,"text":"","finish_reason":"stop"}]}` + "\n\n", true, true, true, 2, -1},
		{"end with usage", `data: {"choices":[{"index":0,"text":"a","finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":8}}` + "\n\n", true, true, true, 1, 8},
		{"spaced finish_reason counts none", `data: {"choices":[{"index":0,"text":"a","finish_reason": "stop"}]}` + "\n\n", true, true, true, 0, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := Inspect([]byte(tc.ev))
			if ev.End != (tc.name == "done") {
				t.Errorf("Inspect: end %v, want it for [DONE] only", ev.End)
			}
			if ev.Keep != tc.keep || ev.Choices != tc.hasChoices || ev.Output() != tc.output || ev.Finished() != tc.finished {
				t.Errorf("Inspect = keep %v, choices %v, output %v, finished %d; want %v, %v, %v, %d",
					ev.Keep, ev.Choices, ev.Output(), ev.Finished(), tc.keep, tc.hasChoices, tc.output, tc.finished)
			}
			u := ev.Usage
			switch {
			case tc.wantUsage < 0 && u != nil:
				t.Errorf("usage %+v, want none", u)
			case tc.wantUsage >= 0 && (u == nil || u.CompletionTokens != tc.wantUsage || u.Ledger().CompletionTokens != tc.wantUsage):
				t.Errorf("usage %+v, want %d completion tokens", u, tc.wantUsage)
			}
		})
	}
}

func TestBodyUsage(t *testing.T) {
	u := BodyUsage([]byte(`{"id":"x","usage":{"prompt_tokens":5,"completion_tokens":9,"prompt_tokens_details":{"image_tokens":4}}}`))
	if u == nil || u.PromptTokens != 5 || u.CompletionTokens != 9 || u.Details == nil || u.Details.ImageTokens == nil || *u.Details.ImageTokens != 4 {
		t.Errorf("BodyUsage = %+v, want 5 prompt, 9 completion, 4 image tokens", u)
	}
	for _, body := range []string{`{"id":"x"}`, `not json`, `{"error":{"message":"boom"}}`} {
		if u := BodyUsage([]byte(body)); u != nil {
			t.Errorf("BodyUsage(%s) = %+v, want nil", body, u)
		}
	}
}

func TestPartKindAndWeight(t *testing.T) {
	for typ, want := range map[string]estimate.Kind{"text": estimate.Kinds, "image_url": estimate.Image, "input_audio": estimate.Audio, "video_url": estimate.Video} {
		if got, ok := PartKind(typ); !ok || got != want {
			t.Errorf("PartKind(%q) = %v, %v; want %v", typ, got, ok, want)
		}
	}
	if _, ok := PartKind("hologram"); ok {
		t.Errorf("PartKind(hologram) is known, want refused")
	}
	if got := CompactLen(json.RawMessage(`[ {"a" : 1} ]`)); got != 9 {
		t.Errorf("CompactLen = %d, want 9", got)
	}
	for _, raw := range []string{"", "null"} {
		if got := CompactLen(json.RawMessage(raw)); got != 0 {
			t.Errorf("CompactLen(%q) = %d, want 0", raw, got)
		}
	}
	if got := WeighJSON(9); got != 12 {
		t.Errorf("WeighJSON(9) = %d, want 12", got)
	}
}
