package baseline

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// Admitter is the BASELINE, not Leasehold: like today's routers it
// admits against the last scrape of each engine's /metrics (KV tokens in
// use, requests running and waiting) plus what it dispatched itself since
// that scrape, with no shared state. Each of N routers fills the same
// free capacity, and KV in use lags what admitted requests will grow to,
// so the fleet over-admits. It ignores tenant quotas and priorities.
type Admitter struct {
	pools   map[ledger.PoolID]*pool
	scraper telemetry.Scraper
	every   time.Duration
	clock   clockwork.Clock
	log     *slog.Logger

	readyC chan struct{} // closed after the first scrape round
	stopC  chan struct{} // closed by close: the loop stops
	ctx    context.Context
	cancel context.CancelFunc // aborts scrapes in flight, by close
	wg     sync.WaitGroup
}

type pool struct {
	retryAfter time.Duration
	engines    []*engine
}

type engine struct {
	id      ledger.EngineID
	url     string
	format  telemetry.Format
	capKV   int64
	capSlot int64

	// mu guards the fields below.
	mu      sync.Mutex
	scraped bool
	usedKV  int64 // from the last scrape
	busy    int64 // running + waiting, from the last scrape
	addKV   int64 // dispatched since the last scrape
	addSlot int64
}

// Config is what an Admitter admits on and how it scrapes.
type Config struct {
	// Fleet gives each engine's metrics URL and format. Required.
	Fleet *fleet.Fleet
	// Specs are the pools and engines admitted on, with their capacities
	// (kv_tokens discovered where the file omits them). Required.
	Specs []ledger.PoolSpec
	// Every is the scrape interval (--scrape-interval), > 0.
	Every time.Duration
	// Scraper reads the engines' metrics.
	Scraper telemetry.Scraper
	// Log defaults to discarding.
	Log *slog.Logger
	// Clock times the scrapes; nil means the real clock.
	Clock clockwork.Clock
}

// New starts scraping cfg.Specs' engines every cfg.Every; Close stops it.
func New(cfg Config) *Admitter {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	a := &Admitter{pools: map[ledger.PoolID]*pool{}, scraper: cfg.Scraper, every: cfg.Every, clock: cfg.Clock, log: cfg.Log,
		readyC: make(chan struct{}), stopC: make(chan struct{})}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	for _, s := range cfg.Specs {
		fp, _ := cfg.Fleet.Pool(s.Name)
		lp := &pool{retryAfter: fp.RetryAfter}
		for i, e := range s.Engines {
			fe := fp.Engines[i]
			lp.engines = append(lp.engines, &engine{id: e.ID, url: fe.MetricsURL, format: fe.Format, capKV: e.KVTokens, capSlot: e.Slots})
		}
		a.pools[s.Name] = lp
	}
	a.wg.Add(1)
	go a.loop()
	return a
}

func (a *Admitter) loop() {
	defer a.wg.Done()
	ctx := a.ctx
	first := true
	t := a.clock.NewTicker(a.every)
	defer t.Stop()
	for {
		var wg sync.WaitGroup
		for _, p := range a.pools {
			for _, e := range p.engines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s, _, err := a.scraper.Scrape(ctx, e.url, e.format)
					e.mu.Lock()
					defer e.mu.Unlock()
					if err != nil {
						a.log.Debug("local admission: scrape failed; keeping the last snapshot", "engine", e.id, "err", err)
						return
					}
					e.scraped = true
					e.usedKV, e.busy = s.KVTokensUsed, s.Running+s.Waiting
					e.addKV, e.addSlot = 0, 0
				}()
			}
		}
		wg.Wait()
		if first {
			first = false
			close(a.readyC)
		}
		select {
		case <-a.stopC:
			return
		case <-t.Chan():
		}
	}
}

// View is one engine as the baseline sees it: its configured capacity and
// what the last scrape plus this router's dispatches since hold.
type View struct {
	ID                ledger.EngineID
	CapKV, CapSlots   int64
	UsedKV, UsedSlots int64
}

// Views returns pool's engines, for ranking.
func (a *Admitter) Views(pool ledger.PoolID) []View {
	p := a.pools[pool]
	if p == nil {
		return nil
	}
	out := make([]View, 0, len(p.engines))
	for _, e := range p.engines {
		e.mu.Lock()
		out = append(out, View{ID: e.id, CapKV: e.capKV, CapSlots: e.capSlot, UsedKV: e.usedKV + e.addKV, UsedSlots: e.busy + e.addSlot})
		e.mu.Unlock()
	}
	return out
}

// Admit grants req on its first candidate whose last scrape plus this
// router's dispatches since leave room, or returns a *ledger.Rejection.
func (a *Admitter) Admit(_ context.Context, req ledger.AcquireRequest) (lease.Ticket, error) {
	p := a.pools[req.Pool]
	if p == nil {
		return nil, lease.ErrUnknownPool
	}
	var first *ledger.Rejection
	for _, id := range req.Candidates {
		for _, e := range p.engines {
			if e.id != id {
				continue
			}
			e.mu.Lock()
			reason := ledger.Reason("")
			switch {
			case e.usedKV+e.addKV+req.KVTokens > e.capKV:
				reason = ledger.ReasonEngineKV
			case e.busy+e.addSlot+req.Slots > e.capSlot:
				reason = ledger.ReasonEngineSlots
			default:
				e.addKV += req.KVTokens
				e.addSlot += req.Slots
			}
			e.mu.Unlock()
			if reason == "" {
				return ticket{id: e.id}, nil
			}
			if first == nil {
				first = &ledger.Rejection{Reason: reason, Engine: e.id, RetryAfter: p.retryAfter}
			}
		}
	}
	if first == nil {
		first = &ledger.Rejection{Reason: ledger.ReasonEngineKV, RetryAfter: p.retryAfter}
	}
	return nil, first
}

// Ready reports whether the first scrape round is done.
func (a *Admitter) Ready() bool {
	select {
	case <-a.readyC:
		return true
	default:
		return false
	}
}

// Close stops the scrapes, aborting those in flight, and waits for them.
func (a *Admitter) Close() {
	close(a.stopC)
	a.cancel()
	a.wg.Wait()
}

// never is a channel that is never closed: a local ticket is never revoked.
var never = make(chan struct{})

// ticket is a local grant: never revoked, and nothing to give back (the
// next scrape sees the engine's real usage).
type ticket struct{ id ledger.EngineID }

var _ lease.Ticket = ticket{}

func (t ticket) Engine() ledger.EngineID    { return t.id }
func (t ticket) Done() <-chan struct{}      { return never }
func (t ticket) Err() error                 { return nil }
func (t ticket) Release(ledger.Usage) error { return nil }
