package openai

import (
	"bytes"
	"encoding/json"

	"github.com/leasehold/leasehold/internal/estimate"
)

// ContentPart is one part of a chat message's content array.
type ContentPart struct {
	Type    string `json:"type"`
	Text    string `json:"text"`
	Refusal string `json:"refusal"`
}

// partKinds maps the content part types the router sizes to a media kind,
// or to estimate.Kinds for text. The names are OpenAI's and vLLM's.
var partKinds = map[string]estimate.Kind{
	"text": estimate.Kinds, "input_text": estimate.Kinds, "refusal": estimate.Kinds,
	"image_url": estimate.Image, "image": estimate.Image, "input_image": estimate.Image, "image_embeds": estimate.Image, "image_pil": estimate.Image,
	"input_audio": estimate.Audio, "audio_url": estimate.Audio, "audio": estimate.Audio,
	"video_url": estimate.Video, "video": estimate.Video,
}

// PartKind is the media kind a content part type is sized as, or
// estimate.Kinds for text; ok is false for a type the router cannot size
// (to be refused rather than leased as nothing).
func PartKind(typ string) (kind estimate.Kind, ok bool) {
	kind, ok = partKinds[typ]
	return kind, ok
}

// WeighJSON is what n bytes of compact JSON count as prompt bytes: JSON
// runs nearer 3 bytes a token than prose's 4, so 4/3 of them.
func WeighJSON(n int64) int64 { return (4*n + 2) / 3 }

// CompactLen is the length of raw JSON without insignificant whitespace
// (0 for absent or null).
func CompactLen(raw json.RawMessage) int64 {
	if len(raw) == 0 || string(raw) == "null" {
		return 0
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return int64(len(raw))
	}
	return int64(b.Len())
}
