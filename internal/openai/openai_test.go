package openai

import (
	"encoding/json"
	"testing"

	"github.com/leasehold/leasehold/internal/estimate"
)

func TestInspect(t *testing.T) {
	tests := []struct {
		name             string
		ev               string
		keep, hasChoices bool
		wantUsage        int64 // completion tokens; -1: no usage
	}{
		{"comment", ": ping\n\n", true, false, -1},
		{"done", "data: [DONE]\n\n", true, false, -1},
		{"chunk", `data: {"choices":[{"index":0,"text":"a"}]}` + "\n\n", true, true, -1},
		{"usage only", `data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":7}}` + "\n\n", false, false, 7},
		{"chunk with usage", `data: {"choices":[{"index":0,"text":"a"}],"usage":{"prompt_tokens":3,"completion_tokens":8}}` + "\n\n", true, true, 8},
		{"usage null", `data: {"choices":[{"index":0,"text":"a"}],"usage":null}` + "\n\n", true, true, -1},
		{"not JSON", `data: {"usage": oops` + "\n\n", true, false, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			keep, u, hasChoices := Inspect([]byte(tc.ev))
			if keep != tc.keep || hasChoices != tc.hasChoices {
				t.Errorf("Inspect = keep %v, choices %v; want %v, %v", keep, hasChoices, tc.keep, tc.hasChoices)
			}
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
