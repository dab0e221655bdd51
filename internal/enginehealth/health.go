package enginehealth

import (
	"math"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Defaults of Config.
const (
	// DefaultHalfLife is how fast a failure is forgiven: one failure
	// demotes an engine for about this long.
	DefaultHalfLife = 10 * time.Second
	// DefaultMaxStatsAge bounds the age of the poll the breaker and drain
	// flag are read from.
	DefaultMaxStatsAge = time.Second
	// demoteAt is the failure score from which an engine is demoted.
	demoteAt = 0.5
)

// Config is a Recorder's settings; zero fields take the defaults.
type Config struct {
	// Clock is the router's; nil is the real clock.
	Clock clockwork.Clock
	// HalfLife halves the failure score (default DefaultHalfLife).
	HalfLife time.Duration
	// MaxStatsAge: a poll older than this is not read (default
	// DefaultMaxStatsAge; the router passes four --view-interval).
	MaxStatsAge time.Duration
}

type key struct {
	pool   ledger.PoolID
	engine ledger.EngineID
}

// state is one engine's. Guarded by Recorder.mu.
type state struct {
	score    float64   // failure score at scoredAt
	scoredAt time.Time // zero: never scored
	polled   time.Time
	breaker  ledger.BreakerState
	draining bool
}

// Recorder keeps every engine's health. Safe for concurrent use.
type Recorder struct {
	cfg Config
	// mu guards engines.
	mu      sync.Mutex
	engines map[key]*state
}

// New returns a Recorder of cfg.
func New(cfg Config) *Recorder {
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.HalfLife <= 0 {
		cfg.HalfLife = DefaultHalfLife
	}
	if cfg.MaxStatsAge <= 0 {
		cfg.MaxStatsAge = DefaultMaxStatsAge
	}
	return &Recorder{cfg: cfg, engines: map[key]*state{}}
}

func (r *Recorder) stateLocked(k key) *state {
	s := r.engines[k]
	if s == nil {
		s = &state{}
		r.engines[k] = s
	}
	return s
}

// decayedLocked is s's score at now.
func (r *Recorder) decayedLocked(s *state, now time.Time) float64 {
	if s.score == 0 {
		return 0
	}
	halves := now.Sub(s.scoredAt).Seconds() / r.cfg.HalfLife.Seconds()
	return s.score * math.Exp2(-max(halves, 0))
}

// Failure records a dispatch to engine that failed on the engine's side:
// no connection, a reset, a 5xx answer, no first byte in time.
func (r *Recorder) Failure(pool ledger.PoolID, engine ledger.EngineID) { r.Report(pool, engine, false) }

// Success records a dispatch to engine that the engine answered.
func (r *Recorder) Success(pool ledger.PoolID, engine ledger.EngineID) { r.Report(pool, engine, true) }

// Report is Success when ok, else Failure.
func (r *Recorder) Report(pool ledger.PoolID, engine ledger.EngineID, ok bool) {
	failed := !ok
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stateLocked(key{pool, engine})
	v := r.decayedLocked(s, now)
	if failed {
		v++
	} else {
		v /= 2
	}
	s.score, s.scoredAt = v, now
}

// ObserveStats records a fleet-view poll of pool: each engine's breaker
// (as it reads at the ledger's now) and drain flag (fleetview
// Config.OnStats).
func (r *Recorder) ObserveStats(pool ledger.PoolID, st ledger.PoolStats) {
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range st.Engines {
		s := r.stateLocked(key{pool, e.Spec.ID})
		s.polled, s.breaker, s.draining = now, e.Breaker.State, e.Draining
	}
}

// Health is one engine's, as this router knows it.
type Health struct {
	// Breaker and Draining are the ledger's, from a poll no older than
	// MaxStatsAge (else closed and not draining: the ledger still
	// decides).
	Breaker  ledger.BreakerState
	Draining bool
	// Demoted: this router saw the engine fail recently.
	Demoted bool
}

// Of returns engine's health now.
func (r *Recorder) Of(pool ledger.PoolID, engine ledger.EngineID) Health {
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.engines[key{pool, engine}]
	if s == nil {
		return Health{}
	}
	h := Health{Demoted: r.decayedLocked(s, now) >= demoteAt}
	if !s.polled.IsZero() && now.Sub(s.polled) <= r.cfg.MaxStatsAge {
		h.Breaker, h.Draining = s.breaker, s.draining
	}
	return h
}
