package telemetry

// The reconciler is one goroutine that runs rounds: each round scrapes every
// target, at most Concurrency at a time, and waits for all of them before
// the next round is scheduled one Interval later, so rounds never overlap
// and a slow engine delays only its own round. A successful scrape is
// passed to Observe stamped with the time it was taken; a failed scrape or
// a failed Observe leaves the engine's last success where it was, so its
// age grows until it is reported stale. Nothing is ever observed for an
// engine that did not answer: to the ledger that engine simply stops
// reporting, and its StalePolicy applies.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Reconciler defaults.
const (
	DefaultInterval    = 2 * time.Second
	DefaultConcurrency = 8
	// DefaultStaleRounds is how many intervals without a success make a
	// target with no StaleAfter stale.
	DefaultStaleRounds = 3
)

// ErrStarted: Start was called twice, or after Stop.
var ErrStarted = errors.New("telemetry: reconciler already started")

// EngineKey names an engine fleet-wide.
type EngineKey struct {
	Pool   ledger.PoolID
	Engine ledger.EngineID
}

// String formats k as "pool/engine".
func (k EngineKey) String() string { return string(k.Pool) + "/" + string(k.Engine) }

// Target is one engine to scrape.
type Target struct {
	Pool   ledger.PoolID
	Engine ledger.EngineID
	// MetricsURL is the engine's Prometheus endpoint.
	MetricsURL string
	Format     Format
	// StaleAfter is how long after its last success the engine counts as
	// stale; 0 means DefaultStaleRounds × the reconciler's interval.
	StaleAfter time.Duration
	// Policy is the ledger's policy while stale, carried for reporting.
	Policy ledger.StalePolicy
}

// Key returns the target's engine key.
func (t Target) Key() EngineKey { return EngineKey{Pool: t.Pool, Engine: t.Engine} }

// Observer is the part of ledger.Ledger the reconciler uses.
type Observer interface {
	Observe(ctx context.Context, obs ledger.Observation) (ledger.Observed, error)
}

// ReconcilerConfig configures a Reconciler.
type ReconcilerConfig struct {
	// Targets are the engines to scrape; required, keys unique.
	Targets []Target
	// Ledger receives observations; required.
	Ledger Observer
	// Scraper fetches metrics; nil means a Scraper with defaults. Its
	// Clock, when nil, is set to Clock.
	Scraper *Scraper
	// Interval is the pause between rounds; 0 means DefaultInterval.
	Interval time.Duration
	// Concurrency bounds scrapes in flight; 0 means DefaultConcurrency.
	Concurrency int
	// Clock drives rounds and staleness; nil means the real clock.
	Clock clockwork.Clock
}

// EngineStatus is what the reconciler knows about one target.
type EngineStatus struct {
	Target Target
	// LastAttempt and LastSuccess are reconciler-clock times; zero if none.
	LastAttempt time.Time
	LastSuccess time.Time
	// LastError is the last round's error, nil after a success.
	LastError error
	// Failures counts consecutive failed rounds.
	Failures int
	// Stale is set when there was no success within the target's
	// StaleAfter (or ever).
	Stale bool
	// Age is the time since LastSuccess; 0 when there was none.
	Age time.Duration
	// Sample is the last successful scrape.
	Sample Sample
}

// Reconciler scrapes engines and observes their telemetry into a ledger.
// Status and its friends are safe for concurrent use with the loop.
type Reconciler struct {
	targets     []Target
	obs         Observer
	scraper     *Scraper
	interval    time.Duration
	concurrency int
	clock       clockwork.Clock

	// mu guards state, started and stopC.
	mu      sync.Mutex
	state   map[EngineKey]*EngineStatus
	started bool
	stopC   chan struct{}
	doneC   chan struct{}
}

// NewReconciler checks cfg and returns a stopped Reconciler.
func NewReconciler(cfg ReconcilerConfig) (*Reconciler, error) {
	if cfg.Ledger == nil {
		return nil, errors.New("telemetry: reconciler: Ledger is required")
	}
	if cfg.Interval < 0 || cfg.Concurrency < 0 {
		return nil, fmt.Errorf("telemetry: reconciler: interval %s and concurrency %d must be >= 0", cfg.Interval, cfg.Concurrency)
	}
	r := &Reconciler{
		obs:         cfg.Ledger,
		interval:    cmp(cfg.Interval, DefaultInterval),
		concurrency: cmp(cfg.Concurrency, DefaultConcurrency),
		clock:       cfg.Clock,
		state:       make(map[EngineKey]*EngineStatus, len(cfg.Targets)),
		stopC:       make(chan struct{}),
		doneC:       make(chan struct{}),
	}
	if r.clock == nil {
		r.clock = clockwork.NewRealClock()
	}
	sc := Scraper{}
	if cfg.Scraper != nil {
		sc = *cfg.Scraper
	}
	if sc.Clock == nil {
		sc.Clock = r.clock
	}
	r.scraper = &sc
	for i, t := range cfg.Targets {
		if t.Pool == "" || t.Engine == "" || t.MetricsURL == "" {
			return nil, fmt.Errorf("telemetry: reconciler: targets[%d] needs pool, engine and metrics URL", i)
		}
		f, err := ParseFormat(string(t.Format))
		if err != nil {
			return nil, fmt.Errorf("telemetry: reconciler: targets[%d] (%s): %w", i, t.Key(), err)
		}
		t.Format = f
		if t.StaleAfter <= 0 {
			t.StaleAfter = DefaultStaleRounds * r.interval
		}
		if _, dup := r.state[t.Key()]; dup {
			return nil, fmt.Errorf("telemetry: reconciler: targets[%d]: engine %s listed twice", i, t.Key())
		}
		r.targets = append(r.targets, t)
		r.state[t.Key()] = &EngineStatus{Target: t}
	}
	return r, nil
}

func cmp[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// Start runs the first round at once, then one every Interval, until Stop.
func (r *Reconciler) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return ErrStarted
	}
	r.started = true
	go r.run()
	return nil
}

// Stop ends the loop, cancelling scrapes in flight, and waits for it. It is
// idempotent and safe to call without Start.
func (r *Reconciler) Stop() {
	r.mu.Lock()
	select {
	case <-r.stopC:
	default:
		close(r.stopC)
	}
	started := r.started
	r.started = true // no Start after Stop
	r.mu.Unlock()
	if started {
		<-r.doneC
	}
}

func (r *Reconciler) run() {
	defer close(r.doneC)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-r.stopC:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		r.RunOnce(ctx)
		t := r.clock.NewTimer(r.interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.Chan():
		}
	}
}

// RunOnce scrapes every target once, at most Concurrency at a time, and
// returns when all are done or ctx ends.
func (r *Reconciler) RunOnce(ctx context.Context) {
	sem := make(chan struct{}, r.concurrency)
	var wg sync.WaitGroup
	for _, t := range r.targets {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			r.reconcile(ctx, t)
		})
	}
	wg.Wait()
}

// reconcile scrapes one target and observes the sample.
func (r *Reconciler) reconcile(ctx context.Context, t Target) {
	attempt := r.clock.Now()
	sample, at, err := r.scraper.Scrape(ctx, t.MetricsURL, t.Format)
	if err == nil {
		_, err = r.obs.Observe(ctx, sample.Observation(t.Pool, t.Engine, at))
		if err != nil {
			err = fmt.Errorf("observe %s: %w", t.Key(), err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state[t.Key()]
	st.LastAttempt = attempt
	st.LastError = err
	if err != nil {
		st.Failures++
		return
	}
	st.Failures = 0
	st.LastSuccess = at
	st.Sample = sample
}

// Status returns every target's status, sorted by pool then engine.
func (r *Reconciler) Status() []EngineStatus {
	now := r.clock.Now()
	r.mu.Lock()
	out := make([]EngineStatus, 0, len(r.state))
	for _, st := range r.state {
		out = append(out, st.at(now))
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b EngineStatus) int {
		return strings.Compare(a.Target.Key().String(), b.Target.Key().String())
	})
	return out
}

// Engine returns one target's status; ok is false for an unknown engine.
func (r *Reconciler) Engine(k EngineKey) (st EngineStatus, ok bool) {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.state[k]
	if !ok {
		return EngineStatus{}, false
	}
	return s.at(now), true
}

// Discovered returns the KV capacity each engine last reported, for
// engines whose format reveals it; engines never scraped are absent.
func (r *Reconciler) Discovered() map[EngineKey]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[EngineKey]int64{}
	for k, st := range r.state {
		if !st.LastSuccess.IsZero() && st.Sample.Known.Has(KnownKVTotal) && st.Sample.KVTokensTotal > 0 {
			out[k] = st.Sample.KVTokensTotal
		}
	}
	return out
}

// at returns a copy of st with Stale and Age as of now.
func (st *EngineStatus) at(now time.Time) EngineStatus {
	c := *st
	if c.LastSuccess.IsZero() {
		c.Stale = true
		return c
	}
	c.Age = max(0, now.Sub(c.LastSuccess))
	c.Stale = c.Age > c.Target.StaleAfter
	return c
}
