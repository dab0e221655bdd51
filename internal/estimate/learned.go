package estimate

// The learned completion length (elastic pools; docs/design.md, "Elastic
// reservations"). The ledger keeps one completion-length histogram per pool
// and per tenant, counted from released leases' usage (ledger.
// CompletionHistogram), and every router reads the same counters when it
// polls the pool's Stats (internal/fleetview). Learned turns those reads
// into the output a new lease reserves: a quantile of the lengths released
// in the last Window, or of every length the ledger has counted when the
// window holds fewer than MinSamples, per tenant once the tenant has
// MinSamples of its own, else the pool's. With fewer than MinSamples in
// all, the pool is cold: from ColdSamples on it reserves the longest length
// counted so far (its histogram's top bucket), which only grows until the
// pool is warm, and before that Expected reports none and the request
// reserves its worst case. A new router reads the counters on its first
// poll, so it starts from what the others learned, and routers that poll
// the same counters agree.
//
// Lengths are counted per lease (all of a request's n sequences), so for
// n > 1 the quantile errs high per sequence, the safe side.

import (
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Learned defaults.
const (
	DefaultLearnedWindow = 10 * time.Minute
	DefaultMinSamples    = 64
	// ColdSamples is the fewest releases a cold pool's longest length is
	// reserved from (fewer: the worst case).
	ColdSamples = 8
	// learnedFloor is the least output a learned estimate reserves.
	learnedFloor = 16
	// snapshotsPerWindow bounds the reads kept: the window's base is at
	// most window/snapshotsPerWindow older than now-window.
	snapshotsPerWindow = 20
)

// snapshot is one read of a pool's counters.
type snapshot struct {
	at       time.Time
	counters map[string]int64
}

// Learned is one pool's learned completion length. Safe for concurrent use.
type Learned struct {
	quantile   float64
	window     time.Duration
	minSamples int64

	mu    sync.Mutex
	snaps []snapshot // kept reads, oldest first, spanning the window (plus one older)
	pool  estimateOf
	byTen map[ledger.TenantID]estimateOf
}

// estimateOf is a computed estimate and what it came from.
type estimateOf struct {
	tokens  int64 // 0: not enough samples
	samples int64
	warm    bool // from MinSamples or more (else the cold maximum)
}

// NewLearned returns a cold estimate: quantile in (0, 1), window and
// minSamples > 0.
func NewLearned(quantile float64, window time.Duration, minSamples int64) *Learned {
	return &Learned{quantile: quantile, window: window, minSamples: minSamples, byTen: map[ledger.TenantID]estimateOf{}}
}

// Update takes one read of the pool's counters (PoolStats.Counters) at now
// (the router's clock). Counters of a new epoch start again from zero; a
// read that went down drops the older reads.
func (l *Learned) Update(now time.Time, counters map[string]int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.snaps); n > 0 && counters[ledger.CounterReleases] < l.snaps[n-1].counters[ledger.CounterReleases] {
		l.snaps = nil // the ledger lost the pool: its counters restarted
	}
	// Keep one read per window/snapshotsPerWindow, not every poll's, and
	// of those the newest at or before now-window as the window's base.
	if n := len(l.snaps); n == 0 || now.Sub(l.snaps[n-1].at) >= l.window/snapshotsPerWindow {
		l.snaps = append(l.snaps, snapshot{at: now, counters: counters})
	}
	for len(l.snaps) > 2 && !l.snaps[1].at.After(now.Add(-l.window)) {
		l.snaps = l.snaps[1:]
	}
	newPool, newTen := ledger.CompletionHistograms(counters)
	basePool, baseTen := ledger.CompletionHistograms(l.snaps[0].counters)
	l.pool = l.estimate(newPool, basePool)
	clear(l.byTen)
	for t, h := range newTen {
		l.byTen[t] = l.estimate(h, baseTen[t])
	}
}

// estimate is the quantile of the window (all minus base), or of all that
// was counted when the window is too thin.
func (l *Learned) estimate(all, base ledger.Histogram) estimateOf {
	h := all.Sub(base)
	if h.Total < l.minSamples {
		h = all
	}
	switch {
	case h.Total >= l.minSamples:
		return estimateOf{tokens: max(h.Quantile(l.quantile), learnedFloor), samples: h.Total, warm: true}
	case h.Total >= min(ColdSamples, l.minSamples):
		return estimateOf{tokens: max(h.Quantile(1), learnedFloor), samples: h.Total}
	}
	return estimateOf{samples: h.Total}
}

// Expected is the output tokens per sequence a lease of tenant reserves,
// and whether there is one; without, the request reserves its worst case.
// A tenant's own estimate counts once it is warm.
func (l *Learned) Expected(tenant ledger.TenantID) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.byTen[tenant]; ok && e.warm {
		return e.tokens, true
	}
	return l.pool.tokens, l.pool.tokens > 0
}

// Pool is the pool-wide estimate (0 when cold) and how many releases it
// is drawn from, for metrics.
func (l *Learned) Pool() (tokens, samples int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pool.tokens, l.pool.samples
}
