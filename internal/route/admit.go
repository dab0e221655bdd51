package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/fleetapply"
	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// admitter grants capacity for one request: the shared ledger through
// lease.Manager, or the local baseline.
type admitter interface {
	// views returns pool's engines as this router sees them, for ranking.
	views(pool ledger.PoolID) []engineView
	// admit grants on the first fitting candidate, or returns a
	// *ledger.Rejection or another error.
	admit(ctx context.Context, req ledger.AcquireRequest) (ticket, error)
	// ready reports whether admit can grant (sessions confirmed, first
	// scrape done).
	ready() bool
	// fenced reports whether pool's session is unconfirmed.
	fenced(pool ledger.PoolID) bool
	// close releases what is held and stops background work.
	close(ctx context.Context) error
}

// ticket is one admitted request's capacity.
type ticket interface {
	engine() ledger.EngineID
	// done closes when the capacity must no longer be used.
	done() <-chan struct{}
	err() error
	// release gives the capacity back with the actual usage, under its
	// own bounded context; idempotent.
	release(usage ledger.Usage) error
}

// capacities returns each pool's engines with their configured capacity.
func capacities(specs []ledger.PoolSpec) map[ledger.PoolID][]engineView {
	out := make(map[ledger.PoolID][]engineView, len(specs))
	for _, s := range specs {
		for _, e := range s.Engines {
			out[s.Name] = append(out[s.Name], engineView{id: e.ID, capKV: e.KVTokens, capSlots: e.Slots})
		}
	}
	return out
}

// ledgerAdmitter leases every request from the shared ledger. Its
// candidates are the engines the applier has configured in the ledger.
type ledgerAdmitter struct {
	m  *lease.Manager
	ap *fleetapply.Applier
	fv *fleetView // nil when --view-interval is 0
	// sessions is m once it exists (the applier's Reconfigure hook may
	// run before), the source of each pool's epoch.
	sessions atomic.Pointer[lease.Manager]
	// cands is each applied pool's candidates with their configured
	// capacity; replaced whole (copy on write), read lock-free.
	cands atomic.Pointer[map[ledger.PoolID][]engineView]
}

// candidates returns pool's candidate engines (nil while not applied):
// exactly the engines of the spec last applied. The slice is shared: copy
// before changing it.
func (a *ledgerAdmitter) candidates(pool ledger.PoolID) []engineView {
	if c := a.cands.Load(); c != nil {
		return (*c)[pool]
	}
	return nil
}

// publish installs the candidates of the applied specs (fleetapply
// Config.Publish).
func (a *ledgerAdmitter) publish(specs []ledger.PoolSpec) {
	c := capacities(specs)
	a.cands.Store(&c)
}

// sessionEpoch is pool's epoch as its holder session last saw it, or
// NoEpoch (fleetapply Config.Epoch).
func (a *ledgerAdmitter) sessionEpoch(pool ledger.PoolID) ledger.Epoch {
	m := a.sessions.Load()
	if m == nil {
		return ledger.NoEpoch
	}
	for _, p := range m.Stats().Pools {
		if p.Pool == pool {
			return p.Epoch
		}
	}
	return ledger.NoEpoch
}

func (a *ledgerAdmitter) views(pool ledger.PoolID) []engineView {
	cands := a.candidates(pool)
	if len(cands) == 0 {
		return nil
	}
	held := a.m.HeldByEngine(pool)
	var fleet map[ledger.EngineID]lease.Reserved
	if a.fv != nil {
		fleet = a.fv.engines(pool)
	}
	out := append([]engineView(nil), cands...)
	for i := range out {
		r, f := held[out[i].id], fleet[out[i].id]
		out[i].usedKV, out[i].usedSlots = max(r.KVTokens, f.KVTokens), max(r.Slots, f.Slots)
	}
	return out
}

func (a *ledgerAdmitter) admit(ctx context.Context, req ledger.AcquireRequest) (ticket, error) {
	if len(req.Candidates) == 0 {
		return nil, fmt.Errorf("%w: pool %s", ErrPoolNotConfigured, req.Pool)
	}
	t, err := a.m.Admit(ctx, req)
	if errors.Is(err, ledger.ErrUnknownEngine) || errors.Is(err, ledger.ErrUnknownPool) {
		a.ap.Reapply() // the ledger's configuration changed under the router
	}
	if err != nil {
		return nil, err
	}
	return heldTicket{t}, nil
}

// ready: every pool configured by the applier and its session confirmed.
func (a *ledgerAdmitter) ready() bool {
	if !a.ap.Configured() {
		return false
	}
	for _, p := range a.ap.Fleet().Pools {
		if !a.m.Confirmed(p.Name) {
			return false
		}
	}
	return true
}

func (a *ledgerAdmitter) fenced(pool ledger.PoolID) bool { return !a.m.Confirmed(pool) }

// close stops the applier first (it may be configuring, and the
// Reconfigure hook waits for it), then releases and ends the sessions.
func (a *ledgerAdmitter) close(ctx context.Context) error {
	if a.fv != nil {
		a.fv.stop()
	}
	a.ap.Stop()
	return a.m.Close(ctx)
}

// heldTicket is a lease of its own or a sub-request of a block lease.
type heldTicket struct{ h lease.Ticket }

func (t heldTicket) engine() ledger.EngineID          { return t.h.Engine() }
func (t heldTicket) done() <-chan struct{}            { return t.h.Done() }
func (t heldTicket) err() error                       { return t.h.Err() }
func (t heldTicket) release(usage ledger.Usage) error { return t.h.Release(usage) }

// localAdmitter is the BASELINE, not Leasehold: like today's routers it
// admits against the last scrape of each engine's /metrics (KV tokens in
// use, requests running and waiting) plus what it dispatched itself since
// that scrape, with no shared state. Each of N routers fills the same
// free capacity, and KV in use lags what admitted requests will grow to,
// so the fleet over-admits. It ignores tenant quotas and priorities.
type localAdmitter struct {
	pools   map[ledger.PoolID]*localPool
	scraper telemetry.Scraper
	every   time.Duration
	log     *slog.Logger

	readyC chan struct{} // closed after the first scrape round
	stopC  chan struct{} // closed by close: the loop stops
	ctx    context.Context
	cancel context.CancelFunc // aborts scrapes in flight, by close
	wg     sync.WaitGroup
}

type localPool struct {
	retryAfter time.Duration
	engines    []*localEngine
}

type localEngine struct {
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

func newLocalAdmitter(f *fleet.Fleet, specs []ledger.PoolSpec, every time.Duration, client telemetry.Scraper, log *slog.Logger) *localAdmitter {
	a := &localAdmitter{pools: map[ledger.PoolID]*localPool{}, scraper: client, every: every, log: log,
		readyC: make(chan struct{}), stopC: make(chan struct{})}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	for _, s := range specs {
		fp, _ := f.Pool(s.Name)
		lp := &localPool{retryAfter: fp.RetryAfter}
		for i, e := range s.Engines {
			fe := fp.Engines[i]
			lp.engines = append(lp.engines, &localEngine{id: e.ID, url: fe.MetricsURL, format: fe.Format, capKV: e.KVTokens, capSlot: e.Slots})
		}
		a.pools[s.Name] = lp
	}
	a.wg.Add(1)
	go a.loop()
	return a
}

func (a *localAdmitter) loop() {
	defer a.wg.Done()
	ctx := a.ctx
	first := true
	t := time.NewTicker(a.every)
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
		case <-t.C:
		}
	}
}

func (a *localAdmitter) views(pool ledger.PoolID) []engineView {
	p := a.pools[pool]
	if p == nil {
		return nil
	}
	out := make([]engineView, 0, len(p.engines))
	for _, e := range p.engines {
		e.mu.Lock()
		out = append(out, engineView{id: e.id, capKV: e.capKV, capSlots: e.capSlot, usedKV: e.usedKV + e.addKV, usedSlots: e.busy + e.addSlot})
		e.mu.Unlock()
	}
	return out
}

func (a *localAdmitter) admit(_ context.Context, req ledger.AcquireRequest) (ticket, error) {
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
				return localTicket{id: e.id}, nil
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

func (a *localAdmitter) ready() bool {
	select {
	case <-a.readyC:
		return true
	default:
		return false
	}
}

func (a *localAdmitter) fenced(ledger.PoolID) bool { return false }

func (a *localAdmitter) close(context.Context) error {
	close(a.stopC)
	a.cancel()
	a.wg.Wait()
	return nil
}

// never is a channel that is never closed: a local ticket is never revoked.
var never = make(chan struct{})

type localTicket struct{ id ledger.EngineID }

func (t localTicket) engine() ledger.EngineID    { return t.id }
func (t localTicket) done() <-chan struct{}      { return never }
func (t localTicket) err() error                 { return nil }
func (t localTicket) release(ledger.Usage) error { return nil }
