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
// text, where bytes/4 is close).
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

func newEstimator(margin, quantile float64) *estimator {
	return &estimator{margin: margin, quantile: quantile, mean: ratioInitial}
}

// rawPrompt is the uncalibrated token estimate of a text prompt.
func rawPrompt(bytes, messages int64) float64 {
	raw := math.Ceil(float64(bytes) / bytesPerToken)
	if messages > 0 {
		raw += float64(messages*msgOverhead + replyOverhead)
	}
	return max(raw, 1)
}

// promptTokens estimates r's prompt tokens.
func (e *estimator) promptTokens(r *request) int64 {
	if r.promptTokens > 0 {
		return r.promptTokens
	}
	return int64(math.Ceil(rawPrompt(r.promptBytes, r.promptMessages) * e.ratio()))
}

func (e *estimator) ratio() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return min(max(e.mean+e.margin*e.dev, ratioMin), ratioMax)
}

// observePrompt calibrates with an engine's reported prompt tokens.
func (e *estimator) observePrompt(r *request, actual int64) {
	if r.promptTokens > 0 || actual <= 0 {
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
