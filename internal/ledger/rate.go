package ledger

import (
	"fmt"
	"slices"
	"time"
)

// Rate budgets, in one place: a tenant's TokensPerMinute and
// RequestsPerMinute in a pool are checked by Admit in the same atomic step
// as its quota and the engines' capacity, against the tenant's rate window
// kept in the pool. The memory and etcd backends call these functions;
// scripts/lua (lib_admit.lua's rate helpers, acquire.lua, release.lua)
// implements the same rule, and TestAdmitMatchesGo and TestRatesMatchGo in
// internal/ledger/redis hold them to it.
//
// The window is a sliding window of RateBuckets buckets of width
// RateWindow/RateBuckets (one second for the default minute). A grant adds
// its tokens (AcquireRequest.ChargedTokens) and one request to the bucket
// holding the ledger's now. At now the window counts the bucket holding now
// and the RateBuckets buckets before it: a span of one window plus the
// part of the current bucket that has passed, so every window-long span
// ending at now is inside it. A grant is admitted only when what the
// window counts plus the request fits the budget; hence the tokens (and
// requests) charged by grants in any window-long span of the ledger clock
// never exceed the budget, whatever the number of holders. A bucket stops
// counting at its start + RateWindow + width: the retry hint of a rate
// rejection is the first such instant after which the request fits,
// exact to the millisecond (others' grants before then may take the room).
//
// Release trues a lease's charge up to what it used (RateTrueUp): the
// bucket of its grant, if it still counts, gets usage - charge added
// (never going below zero), so true-up goes both ways. A charge that
// bounds the usage (the router charges the prompt plus every completion
// token the request may produce) keeps "every window-long span holds at
// most the budget" true of the tokens used; a request that used more
// than it was charged is charged the excess at release, so the overshoot
// is at most the underestimates of the requests then in flight. A release
// whose usage is unknown (PromptTokens 0: the engine reported none), and a
// lease the ledger ends itself (expiry, a dead holder), keep the charge.

// RateBuckets is how many buckets one rate window holds.
const RateBuckets = 60

// Rate window bounds (PoolSpec.RateWindow).
const (
	// DefaultRateWindow is the window budgets are per: a minute.
	DefaultRateWindow = time.Minute
	// MinRateWindow is the shortest window a pool may set (one
	// millisecond buckets); windows shorter than a minute are for tests.
	MinRateWindow = RateBuckets * time.Millisecond
	// MaxRateWindow is the longest.
	MaxRateWindow = 24 * time.Hour
)

// RateBucket is one bucket of a tenant's rate window: the tokens and
// requests grants charged in [At, At + width), width being
// RateWidth(window); At is a multiple of the width since the Unix epoch.
type RateBucket struct {
	At       time.Time
	Tokens   int64
	Requests int64
}

// RateWindowOf returns the window of a pool whose spec sets w: w, or
// DefaultRateWindow when w is 0.
func RateWindowOf(w time.Duration) time.Duration {
	if w <= 0 {
		return DefaultRateWindow
	}
	return w
}

// RateWidth returns the bucket width of window w (0: the default).
func RateWidth(w time.Duration) time.Duration { return RateWindowOf(w) / RateBuckets }

// bucketStart returns the start of the bucket of width w holding t, in
// milliseconds since the Unix epoch.
func bucketStart(t time.Time, w time.Duration) int64 {
	ms, wm := t.UnixMilli(), w.Milliseconds()
	return ms - ms%wm
}

// counted reports whether a bucket starting at at (ms) still counts at
// now in window w.
func counted(at int64, now time.Time, w time.Duration) bool {
	return at >= bucketStart(now, RateWidth(w))-RateWindowOf(w).Milliseconds()
}

// PruneRates returns the buckets of bs that still count at now in window
// w (0: the default), oldest first. bs must be oldest first, as every
// function here keeps it.
func PruneRates(bs []RateBucket, now time.Time, w time.Duration) []RateBucket {
	i := 0
	for i < len(bs) && !counted(bs[i].At.UnixMilli(), now, w) {
		i++
	}
	return bs[i:]
}

// RateUse returns the tokens and requests the window w counts at now.
func RateUse(bs []RateBucket, now time.Time, w time.Duration) (tokens, requests int64) {
	for _, b := range PruneRates(bs, now, w) {
		tokens += b.Tokens
		requests += b.Requests
	}
	return tokens, requests
}

// ChargeRate returns bs pruned at now, with tokens and one request added
// to the bucket holding now: a grant's charge. The buckets stay oldest
// first when the pool's window changed width (a wider bucket holding now
// may start before the last narrower one). bs is not modified.
func ChargeRate(bs []RateBucket, now time.Time, w time.Duration, tokens int64) []RateBucket {
	out := append([]RateBucket(nil), PruneRates(bs, now, w)...)
	at := bucketStart(now, RateWidth(w))
	i := len(out)
	for i > 0 && out[i-1].At.UnixMilli() > at {
		i--
	}
	if i > 0 && out[i-1].At.UnixMilli() == at {
		out[i-1].Tokens += tokens
		out[i-1].Requests++
		return out
	}
	return slices.Insert(out, i, RateBucket{At: time.UnixMilli(at), Tokens: tokens, Requests: 1})
}

// TrueUpRate returns bs pruned at now, with delta added to the tokens of
// the bucket holding created (a lease's grant time) if it still counts,
// never taking them below zero; bs is not modified.
func TrueUpRate(bs []RateBucket, created, now time.Time, w time.Duration, delta int64) []RateBucket {
	out := append([]RateBucket(nil), PruneRates(bs, now, w)...)
	at := bucketStart(created, RateWidth(w))
	for i := range out {
		if out[i].At.UnixMilli() == at {
			out[i].Tokens = max(0, out[i].Tokens+delta)
		}
	}
	return out
}

// RateTrueUp returns what a release of l with usage u adds to the tokens
// its grant charged: u.PromptTokens + u.CompletionTokens - l.Tokens, or 0
// when l was not charged (Tokens 0) or u reports no prompt tokens (the
// engine's usage is unknown: the charge stays).
func RateTrueUp(l Lease, u Usage) int64 {
	if l.Tokens <= 0 || u.PromptTokens <= 0 {
		return 0
	}
	return u.PromptTokens + u.CompletionTokens - l.Tokens
}

// rateReason is Admit's rate check: the reason a grant of tokens to a's
// tenant would exceed a budget (tokens first), and when the window frees
// enough for every budget the request exceeds; "" when it fits.
func rateReason(a Admission, tokens int64) (Reason, time.Duration) {
	t := a.Tenant
	bs := PruneRates(a.Rates, a.Now, a.RateWindow)
	usedT, usedR := RateUse(bs, a.Now, a.RateWindow)
	var reason Reason
	var retry time.Duration
	if t.TokensPerMinute > 0 && usedT+tokens > t.TokensPerMinute {
		reason = ReasonTenantTokenRate
		retry = rateFrees(bs, a.Now, a.RateWindow, usedT, tokens, t.TokensPerMinute, func(b RateBucket) int64 { return b.Tokens })
	}
	if t.RequestsPerMinute > 0 && usedR+1 > t.RequestsPerMinute {
		if reason == "" {
			reason = ReasonTenantRequestRate
		}
		retry = max(retry, rateFrees(bs, a.Now, a.RateWindow, usedR, 1, t.RequestsPerMinute, func(b RateBucket) int64 { return b.Requests }))
	}
	return reason, retry
}

// rateFrees returns how long after now enough of bs (counted at now,
// oldest first, used in all) stops counting that need more fits budget:
// the end of the first bucket whose leaving makes room. need <= budget.
func rateFrees(bs []RateBucket, now time.Time, w time.Duration, used, need, budget int64, amount func(RateBucket) int64) time.Duration {
	win, width := RateWindowOf(w), RateWidth(w)
	for _, b := range bs {
		used -= amount(b)
		if used+need <= budget {
			return b.At.Add(win + width).Sub(now)
		}
	}
	return win + width // unreachable while need <= budget
}

// checkRateWindow validates PoolSpec.RateWindow.
func checkRateWindow(pool PoolID, w time.Duration) error {
	if w == 0 {
		return nil
	}
	if w < MinRateWindow || w > MaxRateWindow || w%MinRateWindow != 0 {
		return fmt.Errorf("%w: pool %s rate_window = %s, want 0 (a minute) or a multiple of %s in %s..%s",
			ErrInvalidArgument, pool, w, MinRateWindow, MinRateWindow, MaxRateWindow)
	}
	return nil
}
