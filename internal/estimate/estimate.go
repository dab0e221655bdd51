package estimate

// KV estimation. A request reserves, per sequence, its prompt tokens plus
// its output reservation, times n sequences, and n slots:
//
//	kv    = min(prompt + output, MaxModelLen) × n
//	slots = n
//
// MaxModelLen is the pool's context length, the largest of its engines'
// (Bounds.Reserve, contextlen.go): no engine holds more for one sequence.
//
// prompt is exact for token-id prompts, and with --prompt-tokens=tokenize
// once an engine counted it (tokenize.go). Otherwise it is estimated
// without a tokenizer from the prompt's text bytes (for chat: roles,
// names, content, tool calls and tool definitions, the JSON weighed 4/3):
// raw = ceil(bytes/4) + 4 per chat message + 3
// (template overhead), times a ratio calibrated online from the engines'
// reported usage.prompt_tokens (and /tokenize counts). The ratio is an EWMA
// (alpha 0.1) of actual/raw with an EWMA of its absolute deviation; the
// estimate uses mean + PromptMargin × deviation, bounded to [0.25, 8], so
// it errs high on text like what it was calibrated on: an underestimate
// lets an engine hold more than was leased. Text far from that (CJK, emoji,
// runs of punctuation) can still be undershot; tokenize mode closes that
// gap. Until calibrated the ratio starts at 1.5 (pessimistic for English
// text, where bytes/4 is close). A chat request's images, audio and videos
// add their reservation per item on top, in both modes (media.go).
//
// output is max_tokens (max_completion_tokens for chat); without one the
// engine may generate up to its context, so the whole MaxModelLen is
// reserved. That is a worst_case pool's reservation, and a cold elastic
// pool's. A warm elastic pool reserves instead the learned completion
// length (learned.go) capped by it, and the router grows the lease as the
// request generates more (internal/lease, grow.go).

import (
	"math"
	"sync"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
)

const (
	bytesPerToken = 4
	msgOverhead   = 4
	replyOverhead = 3
	ratioInitial  = 1.5
	ratioMin      = 0.25
	ratioMax      = 8
	ratioAlpha    = 0.1
)

// Prompt is what a request tells the estimator: its prompt, as counted or
// weighed, and what it asks for.
type Prompt struct {
	// Tokens is the exact prompt count (token ids, or counted by an
	// engine's /tokenize); 0 when unknown.
	Tokens int64
	// Bytes is the prompt's text bytes; Messages counts chat messages (0
	// for completions).
	Bytes, Messages int64
	// Media counts the chat content's images, audio clips and videos.
	Media Counts
	// MaxTokens is the explicit output limit per sequence; 0 for none.
	MaxTokens int64
	// N is the number of sequences, at least 1.
	N int64
}

// Estimator is one pool's calibration. Safe for concurrent use.
type Estimator struct {
	margin float64
	media  *Media

	// mu guards everything below.
	mu   sync.Mutex
	mean float64 // EWMA of actual/raw prompt tokens
	dev  float64 // EWMA of |actual/raw - mean|
	seen int64   // calibrations applied
}

// NewEstimator returns a pool's estimator: margin is --prompt-margin, m
// the pool's media_tokens.
func NewEstimator(margin float64, m fleet.MediaTokens) *Estimator {
	return &Estimator{margin: margin, media: NewMedia(m), mean: ratioInitial}
}

// Media is the pool's reservation per media item.
func (e *Estimator) Media() *Media { return e.media }

// rawPrompt is the uncalibrated token estimate of a text prompt.
func rawPrompt(bytes, messages int64) float64 {
	raw := math.Ceil(float64(bytes) / bytesPerToken)
	if messages > 0 {
		raw += float64(messages*msgOverhead + replyOverhead)
	}
	return max(raw, 1)
}

// PromptTokens estimates p's prompt tokens: its text (exact, or
// estimated) and its media (media.go).
func (e *Estimator) PromptTokens(p Prompt) int64 {
	text := p.Tokens
	if text <= 0 {
		text = int64(math.Ceil(rawPrompt(p.Bytes, p.Messages) * e.Ratio()))
	}
	return text + e.media.tokens(p.Media)
}

// Ratio is the text ratio the estimate uses: the calibrated mean plus the
// margin times its deviation, bounded.
func (e *Estimator) Ratio() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return min(max(e.mean+e.margin*e.dev, ratioMin), ratioMax)
}

// TextTokens is p's text prompt as best known: exact, or the calibrated
// mean without the margin.
func (e *Estimator) TextTokens(p Prompt) int64 {
	if p.Tokens > 0 {
		return p.Tokens
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return int64(math.Round(rawPrompt(p.Bytes, p.Messages) * e.mean))
}

// ObserveTokenized calibrates with an engine's /tokenize count of p's
// prompt, which counts text (and one placeholder per media item).
func (e *Estimator) ObserveTokenized(p Prompt, n int64) {
	if p.Tokens <= 0 {
		e.calibrate(p, n)
	}
}

// ObserveUsage learns from the prompt tokens an engine reported for p:
// the media per item, and the text ratio unless the text's share is a
// guess or was counted exactly.
func (e *Estimator) ObserveUsage(p Prompt, actual int64, details *PromptDetails) {
	if actual <= 0 {
		return
	}
	text := actual
	if p.Media.Any() {
		tokens, known := details.media()
		unknown := Kinds
		for k, items := range p.Media {
			switch {
			case items == 0:
			case known[k]:
				e.media.observe(Kind(k), ceilDiv(tokens[k], items))
				text -= tokens[k]
			case unknown == Kinds:
				unknown = Kind(k)
			default:
				return // two kinds unreported: no way to split them
			}
		}
		if unknown < Kinds {
			e.media.observe(unknown, ceilDiv(text-e.TextTokens(p), p.Media[unknown]))
			return
		}
	}
	if p.Tokens <= 0 {
		e.calibrate(p, text)
	}
}

// calibrate updates the text ratio with actual tokens for p's text.
func (e *Estimator) calibrate(p Prompt, actual int64) {
	if actual <= 0 {
		return
	}
	x := min(max(float64(actual)/rawPrompt(p.Bytes, p.Messages), ratioMin), ratioMax)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.seen == 0 {
		e.mean, e.dev = x, 0
	} else {
		e.dev += ratioAlpha * (math.Abs(x-e.mean) - e.dev)
		e.mean += ratioAlpha * (x - e.mean)
	}
	e.seen++
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// OutputTokens is the output reservation per sequence: maxTokens (0 means
// the rest of the context), or, when expected > 0 (a warm elastic pool's
// learned length), expected capped by it.
func OutputTokens(p Prompt, maxModelLen, prompt, expected int64) int64 {
	out := p.MaxTokens
	if out == 0 {
		out = max(maxModelLen-prompt, 1)
	}
	if expected > 0 {
		out = min(out, expected)
	}
	return out
}

// RateTokens is what a request of a tenant with a rate budget is charged
// at grant (ledger.AcquireRequest.Tokens): every token it may use, its
// prompt counted once and each of its n sequences' whole output
// reservation (OutputTokens with nothing learned), at most
// ledger.MaxAmount. Release trues the charge up to the engine's usage.
func RateTokens(p Prompt, maxModelLen, prompt int64) int64 {
	out, n := OutputTokens(p, maxModelLen, prompt, 0), max(p.N, 1)
	if prompt >= ledger.MaxAmount || out > (ledger.MaxAmount-prompt)/n {
		return ledger.MaxAmount
	}
	return prompt + out*n
}

// Demand returns the KV tokens and slots to lease for p.
func (e *Estimator) Demand(p Prompt, maxModelLen, expected int64) (kv, slots, prompt int64) {
	prompt = e.PromptTokens(p)
	out := OutputTokens(p, maxModelLen, prompt, expected)
	perSeq := min(prompt+out, maxModelLen)
	return perSeq * p.N, p.N, prompt
}
