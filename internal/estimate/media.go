package estimate

// Media. A chat request's images, audio clips and videos (content parts)
// take prompt tokens at the engine that no text estimate sees, and that
// an engine's /tokenize does not count either: vLLM's counts one
// placeholder per item, not the tokens its multimodal processor expands it
// to (vllm-project/vllm#16191). A request's prompt is therefore its text
// (estimated, or counted by /tokenize) plus, per item, the pool's
// media_tokens for its kind (fleet file; fleet.DefaultMediaTokens). That
// is a floor: when an engine reports more per item, the router reserves
// the most it saw over the last MediaWindow items of that kind. An engine
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

// Kind indexes the kinds of media a chat request may carry.
type Kind int

// The kinds, in the order of Counts.
const (
	Image Kind = iota
	Audio
	Video
	// Kinds counts the kinds; as a content part's kind it means text.
	Kinds
)

// KindNames are the kinds as metrics, fleet files and errors name them.
var KindNames = [Kinds]string{"image", "audio", "video"}

// MediaWindow is how many recent per-item reports of a kind the
// reservation keeps the largest of.
const MediaWindow = 256

// Counts is a number per media kind: items, or tokens.
type Counts [Kinds]int64

// Any reports whether c counts anything.
func (c Counts) Any() bool { return c != Counts{} }

// Media is one pool's reservation per media item. Safe for concurrent
// use.
type Media struct {
	floor Counts // the fleet file's media_tokens

	mu   sync.Mutex
	seen [Kinds][]int64 // the last MediaWindow per-item reports
	next [Kinds]int
	high Counts // the largest of seen
}

// NewMedia returns the reservation per item for a pool with media_tokens m.
func NewMedia(m fleet.MediaTokens) *Media {
	return &Media{floor: Counts{m.Image, m.Audio, m.Video}}
}

// PerItem is what one item of kind k is reserved at.
func (m *Media) PerItem(k Kind) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return max(m.floor[k], m.high[k])
}

// tokens is what items take in all.
func (m *Media) tokens(items Counts) int64 {
	var n int64
	for k, c := range items {
		if c > 0 {
			n += c * m.PerItem(Kind(k))
		}
	}
	return n
}

// Floor is the fleet file's media_tokens for kind k: 0 means the pool's
// model takes none, and a request carrying one is refused.
func (m *Media) Floor(k Kind) int64 { return m.floor[k] }

// observe records that one item of kind k took perItem tokens.
func (m *Media) observe(k Kind, perItem int64) {
	if perItem <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.seen[k]) < MediaWindow {
		m.seen[k] = append(m.seen[k], perItem)
	} else {
		m.seen[k][m.next[k]] = perItem
		m.next[k] = (m.next[k] + 1) % MediaWindow
	}
	m.high[k] = slices.Max(m.seen[k])
}

// PromptDetails is usage.prompt_tokens_details, as far as the router reads
// it.
type PromptDetails struct {
	ImageTokens *int64 `json:"image_tokens"`
	AudioTokens *int64 `json:"audio_tokens"`
	VideoTokens *int64 `json:"video_tokens"`
}

// media returns the tokens the engine reports per kind, and which kinds it
// reported.
func (d *PromptDetails) media() (tokens Counts, known [Kinds]bool) {
	if d == nil {
		return tokens, known
	}
	for k, v := range [Kinds]*int64{d.ImageTokens, d.AudioTokens, d.VideoTokens} {
		if v != nil {
			tokens[k], known[k] = *v, true
		}
	}
	return tokens, known
}
