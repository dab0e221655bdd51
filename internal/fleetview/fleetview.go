package fleetview

// The fleet view (ledger admission). A router's own lease table shows only
// what this router holds; the fleet view polls the ledger's per-engine
// totals (Stats: reservations plus telemetry correction, what admission
// counts) every ViewInterval, so that
//
//   - ranking sees what every router holds: an engine's used capacity is
//     the larger of the last poll and this router's own holdings (which are
//     current), so a busy engine is not ranked first just because another
//     router filled it;
//   - queued requests hear other routers' releases: when a pool's reserved
//     KV or slots went down since the previous poll, one waiter is woken
//     (and passes the wake-up on if it is granted), instead of waiting for
//     the ledger's retry hint.
//
// The view only orders candidates and times retries: admission is still
// the ledger's atomic decision, so a stale or failed poll can cost a
// retry, never capacity. A poll that fails keeps the previous figures
// until they are older than four intervals, then the view falls back to
// this router's own holdings.

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
)

// poolTotals is one poll of a pool.
type poolTotals struct {
	at      time.Time // local clock
	engines map[ledger.EngineID]lease.Reserved
	kv      int64
	slots   int64
}

// Config is what a View polls and whom it tells.
type Config struct {
	Ledger ledger.Ledger   // required
	Pools  []ledger.PoolID // the pools polled
	Every  time.Duration   // --view-interval, > 0
	Clock  clockwork.Clock // required
	Log    *slog.Logger    // required
	// OnFreed is called from the poll loop when a pool's reserved KV or
	// slots went down since the previous poll.
	OnFreed func(ledger.PoolID)
	// Counted, when set, counts each poll's result: ok, freed or error.
	Counted func(pool ledger.PoolID, result string)
	// OnStats, when set, is given every successful poll, from the poll
	// loop, before OnFreed (the router learns completion lengths from the
	// pool's counters).
	OnStats func(ledger.PoolID, ledger.PoolStats)
}

// View polls the ledger's reserved totals per pool. Start runs it; Stop
// stops it and waits.
type View struct {
	l       ledger.Ledger
	pools   []ledger.PoolID
	every   time.Duration
	clock   clockwork.Clock
	log     *slog.Logger
	onFreed func(ledger.PoolID) // called from the poll loop
	counted func(pool ledger.PoolID, result string)
	onStats func(ledger.PoolID, ledger.PoolStats)

	mu   sync.Mutex
	last map[ledger.PoolID]poolTotals

	stopOnce sync.Once
	stopC    chan struct{}
	doneC    chan struct{}
}

// New returns a View of cfg; it polls once started.
func New(cfg Config) *View {
	return &View{l: cfg.Ledger, pools: cfg.Pools, every: cfg.Every, clock: cfg.Clock, log: cfg.Log, onFreed: cfg.OnFreed, counted: cfg.Counted, onStats: cfg.OnStats,
		last: map[ledger.PoolID]poolTotals{}, stopC: make(chan struct{}), doneC: make(chan struct{})}
}

// Start starts the poll loop.
func (v *View) Start() { go v.loop() }

// Stop stops the poll loop and waits for it; safe to call more than once.
func (v *View) Stop() {
	v.stopOnce.Do(func() { close(v.stopC) })
	<-v.doneC
}

func (v *View) loop() {
	defer close(v.doneC)
	t := v.clock.NewTicker(v.every)
	defer t.Stop()
	for {
		select {
		case <-v.stopC:
			return
		case <-t.Chan():
		}
		for _, pool := range v.pools {
			v.poll(pool)
		}
	}
}

// poll reads pool's totals and wakes a waiter if they went down.
func (v *View) poll(pool ledger.PoolID) {
	ctx, cancel := context.WithTimeout(context.Background(), v.every)
	defer cancel()
	st, err := v.l.Stats(ctx, pool)
	if err != nil {
		v.log.Debug("fleet view: stats", "pool", pool, "err", err)
		v.count(pool, "error")
		return
	}
	if v.onStats != nil {
		v.onStats(pool, st)
	}
	now := totals(st, v.clock.Now())
	v.mu.Lock()
	prev, had := v.last[pool]
	v.last[pool] = now
	v.mu.Unlock()
	if had && (now.kv < prev.kv || now.slots < prev.slots) {
		v.onFreed(pool)
		v.count(pool, "freed")
		return
	}
	v.count(pool, "ok")
}

func (v *View) count(pool ledger.PoolID, result string) {
	if v.counted != nil {
		v.counted(pool, result)
	}
}

func totals(st ledger.PoolStats, at time.Time) poolTotals {
	t := poolTotals{at: at, engines: make(map[ledger.EngineID]lease.Reserved, len(st.Engines))}
	for _, e := range st.Engines {
		// What admission counts: reservations plus the telemetry
		// correction (load no lease covers, and leases the ledger ended
		// that the engine may still run).
		r := lease.Reserved{KVTokens: e.ReservedKV + e.CorrectionKV, Slots: e.ReservedSlots + e.CorrectionSlots, Leases: int(e.Leases)}
		t.engines[e.Spec.ID] = r
		t.kv += r.KVTokens
		t.slots += r.Slots
	}
	return t
}

// Engines returns pool's per-engine totals from a poll no older than four
// intervals; nil when there is none.
func (v *View) Engines(pool ledger.PoolID) map[ledger.EngineID]lease.Reserved {
	v.mu.Lock()
	defer v.mu.Unlock()
	t, ok := v.last[pool]
	if !ok || v.clock.Since(t.at) > 4*v.every {
		return nil
	}
	return t.engines
}
