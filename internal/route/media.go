package route

// Media. A chat request's images, audio clips and videos (content parts)
// take prompt tokens at the engine that no text estimate sees, and that
// an engine's /tokenize does not count either: vLLM's counts one
// placeholder per item, not the tokens its multimodal processor expands it
// to (vllm-project/vllm#16191). A request's prompt is therefore its text
// (estimated, or counted by /tokenize) plus, per item, the pool's
// media_tokens for its kind (fleet file; fleet.DefaultMediaTokens). That
// is a floor: when an engine reports more per item, the router reserves
// the most it saw over the last mediaWindow items of that kind. An engine
// that reports usage.prompt_tokens_details.{image,audio,video}_tokens
// (vLLM with --enable-prompt-tokens-details, SGLang) says exactly; without
// them, the tokens a request's text did not take are put on its one media
// kind (a request mixing kinds teaches nothing then). Requests with media
// never calibrate the text ratio on a guess. A kind whose media_tokens is
// 0 is refused (400) before any lease: the pool's model takes none.

import (
	"slices"
	"sync"

	"github.com/leasehold/leasehold/internal/fleet"
)

// mediaKind indexes the kinds of media a chat request may carry.
type mediaKind int

const (
	mediaImage mediaKind = iota
	mediaAudio
	mediaVideo
	// mediaKinds counts the kinds; as a content part's kind it means text.
	mediaKinds
)

var mediaNames = [mediaKinds]string{"image", "audio", "video"}

// mediaWindow is how many recent per-item reports of a kind the
// reservation keeps the largest of.
const mediaWindow = 256

// mediaCounts is a number per media kind: items, or tokens.
type mediaCounts [mediaKinds]int64

func (c mediaCounts) any() bool { return c != mediaCounts{} }

// media is one pool's reservation per media item. Safe for concurrent
// use.
type media struct {
	floor mediaCounts // the fleet file's media_tokens

	mu   sync.Mutex
	seen [mediaKinds][]int64 // the last mediaWindow per-item reports
	next [mediaKinds]int
	high mediaCounts // the largest of seen
}

func newMedia(m fleet.MediaTokens) *media {
	return &media{floor: mediaCounts{m.Image, m.Audio, m.Video}}
}

// perItem is what one item of kind k is reserved at.
func (m *media) perItem(k mediaKind) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return max(m.floor[k], m.high[k])
}

// tokens is what items take in all.
func (m *media) tokens(items mediaCounts) int64 {
	var n int64
	for k, c := range items {
		if c > 0 {
			n += c * m.perItem(mediaKind(k))
		}
	}
	return n
}

// check refuses items of a kind the pool's model takes none of.
func (m *media) check(pool string, items mediaCounts) error {
	for k, c := range items {
		if c > 0 && m.floor[k] == 0 {
			return badf("messages", "model %q takes no %s input (its pool's media_tokens.%s is 0)", pool, mediaNames[k], mediaNames[k])
		}
	}
	return nil
}

// observe records that one item of kind k took perItem tokens.
func (m *media) observe(k mediaKind, perItem int64) {
	if perItem <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.seen[k]) < mediaWindow {
		m.seen[k] = append(m.seen[k], perItem)
	} else {
		m.seen[k][m.next[k]] = perItem
		m.next[k] = (m.next[k] + 1) % mediaWindow
	}
	m.high[k] = slices.Max(m.seen[k])
}

// promptDetails is usage.prompt_tokens_details, as far as the router reads
// it.
type promptDetails struct {
	ImageTokens *int64 `json:"image_tokens"`
	AudioTokens *int64 `json:"audio_tokens"`
	VideoTokens *int64 `json:"video_tokens"`
}

// media returns the tokens the engine reports per kind, and which kinds it
// reported.
func (d *promptDetails) media() (tokens mediaCounts, known [mediaKinds]bool) {
	if d == nil {
		return tokens, known
	}
	for k, v := range [mediaKinds]*int64{d.ImageTokens, d.AudioTokens, d.VideoTokens} {
		if v != nil {
			tokens[k], known[k] = *v, true
		}
	}
	return tokens, known
}
