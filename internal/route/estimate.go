package route

// KV estimation. A request reserves, per sequence, its prompt tokens plus
// its output reservation, times n sequences, and n slots:
//
//	kv    = min(prompt + output, MaxModelLen) × n
//	slots = n
//
// MaxModelLen is the pool's context length, the largest of its engines'
// (ctxLen.reserve, contextlen.go): no engine holds more for one sequence.
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
// reserved. With --overcommit it is instead a learned high quantile of
// completion lengths per sequence (last 512 completions per pool; at least
// 16 tokens; max_tokens until 32 were seen), capped by max_tokens: more
// admitted, at the price that the ledger no longer bounds the worst case.

import (
	"math"
	"slices"
	"sync"

	"github.com/leasehold/leasehold/internal/fleet"
)

const (
	bytesPerToken     = 4
	msgOverhead       = 4
	replyOverhead     = 3
	ratioInitial      = 1.5
	ratioMin          = 0.25
	ratioMax          = 8
	ratioAlpha        = 0.1
	completionWindow  = 512
	completionMinSeen = 32
	completionFloor   = 16
)

// estimator is one pool's calibration. Safe for concurrent use.
type estimator struct {
	margin   float64
	quantile float64
	media    *media

	// mu guards everything below.
	mu     sync.Mutex
	mean   float64 // EWMA of actual/raw prompt tokens
	dev    float64 // EWMA of |actual/raw - mean|
	seen   int64   // calibrations applied
	ring   []int64 // last completion lengths per sequence
	next   int
	qCache int64 // quantile of ring, recomputed every 16 additions
	qAdds  int
}

func newEstimator(margin, quantile float64, m fleet.MediaTokens) *estimator {
	return &estimator{margin: margin, quantile: quantile, media: newMedia(m), mean: ratioInitial}
}

// rawPrompt is the uncalibrated token estimate of a text prompt.
func rawPrompt(bytes, messages int64) float64 {
	raw := math.Ceil(float64(bytes) / bytesPerToken)
	if messages > 0 {
		raw += float64(messages*msgOverhead + replyOverhead)
	}
	return max(raw, 1)
}

// promptTokens estimates r's prompt tokens: its text (exact, or
// estimated) and its media (media.go).
func (e *estimator) promptTokens(r *request) int64 {
	text := r.promptTokens
	if text <= 0 {
		text = int64(math.Ceil(rawPrompt(r.promptBytes, r.promptMessages) * e.ratio()))
	}
	return text + e.media.tokens(r.media)
}

func (e *estimator) ratio() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return min(max(e.mean+e.margin*e.dev, ratioMin), ratioMax)
}

// textTokens is r's text prompt as best known: exact, or the calibrated
// mean without the margin.
func (e *estimator) textTokens(r *request) int64 {
	if r.promptTokens > 0 {
		return r.promptTokens
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return int64(math.Round(rawPrompt(r.promptBytes, r.promptMessages) * e.mean))
}

// observeTokenized calibrates with an engine's /tokenize count of r's
// prompt, which counts text (and one placeholder per media item).
func (e *estimator) observeTokenized(r *request, n int64) {
	if r.promptTokens <= 0 {
		e.calibrate(r, n)
	}
}

// observeUsage learns from the prompt tokens an engine reported for r:
// the media per item, and the text ratio unless the text's share is a
// guess or was counted exactly.
func (e *estimator) observeUsage(r *request, actual int64, details *promptDetails) {
	if actual <= 0 {
		return
	}
	text := actual
	if r.media.any() {
		tokens, known := details.media()
		unknown := mediaKinds
		for k, items := range r.media {
			switch {
			case items == 0:
			case known[k]:
				e.media.observe(mediaKind(k), ceilDiv(tokens[k], items))
				text -= tokens[k]
			case unknown == mediaKinds:
				unknown = mediaKind(k)
			default:
				return // two kinds unreported: no way to split them
			}
		}
		if unknown < mediaKinds {
			e.media.observe(unknown, ceilDiv(text-e.textTokens(r), r.media[unknown]))
			return
		}
	}
	if r.promptTokens <= 0 {
		e.calibrate(r, text)
	}
}

// calibrate updates the text ratio with actual tokens for r's text.
func (e *estimator) calibrate(r *request, actual int64) {
	if actual <= 0 {
		return
	}
	x := min(max(float64(actual)/rawPrompt(r.promptBytes, r.promptMessages), ratioMin), ratioMax)
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

// observeCompletion records completion tokens per sequence, for
// --overcommit.
func (e *estimator) observeCompletion(perSeq int64) {
	if perSeq < 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.ring) < completionWindow {
		e.ring = append(e.ring, perSeq)
	} else {
		e.ring[e.next] = perSeq
		e.next = (e.next + 1) % completionWindow
	}
	if e.qAdds++; e.qAdds >= 16 || e.qCache == 0 {
		e.qAdds = 0
		s := slices.Clone(e.ring)
		slices.Sort(s)
		e.qCache = s[min(len(s)-1, int(math.Ceil(e.quantile*float64(len(s))))-1)]
	}
}

// outputTokens is the output reservation per sequence: maxTokens (0 means
// the rest of the context), or with overcommit the learned quantile capped
// by it.
func (e *estimator) outputTokens(r *request, maxModelLen, prompt int64, overcommit bool) int64 {
	out := r.maxTokens
	if out == 0 {
		out = max(maxModelLen-prompt, 1)
	}
	if !overcommit {
		return out
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.ring) < completionMinSeen {
		return out
	}
	return min(out, max(e.qCache, completionFloor))
}

// demand returns the KV tokens and slots to lease for r.
func (e *estimator) demand(r *request, maxModelLen int64, overcommit bool) (kv, slots, prompt int64) {
	prompt = e.promptTokens(r)
	out := e.outputTokens(r, maxModelLen, prompt, overcommit)
	perSeq := min(prompt+out, maxModelLen)
	return perSeq * r.n, r.n, prompt
}
