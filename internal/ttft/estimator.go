package ttft

// The estimate of one engine, for one request:
//
//	ahead    = own + others
//	own      = Σ prompt tokens of this router's dispatches to the engine
//	           that have not had their first token (a non-streamed one
//	           counts until its estimated first token has passed)
//	others   = meanPrompt × max(othersInFlight × share, waiting − ownCount, 0)
//	estimate = overhead + (ahead + prompt) / rate        (fit.go)
//
// othersInFlight is the ledger's lease count on the engine (the fleet
// view's last poll) less this router's own dispatches there; share is the
// part of a request's time in flight spent before its first token (this
// router's mean TTFT over its mean hold, Little's law), so it is the
// expected number of other routers' requests still in prefill. waiting is
// the engine's own reported queue (its last applied observation, unless
// stale). Both come from a poll no older than MaxStatsAge, else others is
// 0. The learned rate absorbs what the count gets wrong on average: an
// engine that prefills in parallel learns a flat line.

import (
	"math"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Defaults of Config.
const (
	// DefaultRate is the prefill rate, tokens per second, an engine is
	// assumed to have before it is measured or seeded: a single modern
	// GPU on an 8B model (the engine fixtures' vLLM figures give about
	// 9,800) and enginesim's default.
	DefaultRate = 10000
	// DefaultWindow is about how many recent samples the fit follows.
	DefaultWindow = 64
	// DefaultMargin is how many mean absolute deviations of the fit are
	// added to the estimate when it is held against an SLO.
	DefaultMargin = 2
	// DefaultMaxStatsAge bounds the age of a fleet-view poll the estimate
	// reads.
	DefaultMaxStatsAge = time.Second
	// warmSamples is how many observed first tokens make an engine's
	// estimate warm (a seeded one is warm at once).
	warmSamples = 8
	// ewmaAlpha weighs each new sample of the pool means.
	ewmaAlpha = 1.0 / 64
)

// ReasonSLO is the router's refusal reason when no candidate engine can
// start a request within its class's ttft_slo (docs/design.md, "HTTP
// errors"). It is carried in a *ledger.Rejection, like the ledger's own
// reasons, but no ledger returns it.
const ReasonSLO ledger.Reason = "ttft_slo"

// Config is an Estimator's settings. Zero fields take the defaults.
type Config struct {
	// Clock times dispatches and first tokens; nil is the real clock.
	Clock clockwork.Clock
	// SLOs is each priority class's ttft_slo; a class absent or 0 has none.
	SLOs map[ledger.PriorityName]time.Duration
	// DefaultRate is the prefill rate of an engine not yet measured or
	// seeded, tokens per second (default DefaultRate).
	DefaultRate float64
	// Window is about how many recent samples the fit follows (default
	// DefaultWindow).
	Window int
	// Margin is the mean absolute deviations added for the SLO check
	// (default DefaultMargin; negative means 0).
	Margin float64
	// MaxStatsAge bounds the age of the fleet-view poll the estimate
	// reads (default DefaultMaxStatsAge; the router passes four
	// --view-interval).
	MaxStatsAge time.Duration
}

type key struct {
	pool   ledger.PoolID
	engine ledger.EngineID
}

// engineState is what is known of one engine. Guarded by Estimator.mu.
type engineState struct {
	fit    *fit
	seeded bool
	// This router's dispatches to it not past their first token: the
	// streamed ones as a count and a sum of prompts (read on every
	// request, kept as they come and go rather than summed), the others
	// one by one (each ends at its estimated first token).
	streamN, streamPrompt int64
	timed                 map[*Inflight]struct{}
	inflight              int // this router's dispatches to it not Done
	// errObs is errHist's series of the engine, once looked up.
	errObs prometheus.Observer
	// From the last fleet-view poll.
	polled    time.Time
	leases    int64
	waiting   int64
	waitingOK bool
}

// poolState is a pool's means over this router's dispatches, seconds and
// tokens; 0 until the first sample. Guarded by Estimator.mu.
type poolState struct {
	prompt, ttft, hold float64
	// ttftObs is ttftHist's series of each class, once looked up.
	ttftObs map[ledger.PriorityName]prometheus.Observer
}

func ewma(old, v float64) float64 {
	if old == 0 {
		return v
	}
	return old + ewmaAlpha*(v-old)
}

// Estimator estimates each engine's time to first token and learns it
// from this router's streamed dispatches. Safe for concurrent use.
type Estimator struct {
	cfg   Config
	clock clockwork.Clock

	// mu guards engines and pools.
	mu      sync.Mutex
	engines map[key]*engineState
	pools   map[ledger.PoolID]*poolState
	// seedRead marks engines whose metrics were read for a seed.
	seedRead map[key]bool

	errHist  *prometheus.HistogramVec // pool, engine
	ttftHist *prometheus.HistogramVec // pool, priority
}

// New returns an Estimator of cfg.
func New(cfg Config) *Estimator {
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.DefaultRate <= 0 {
		cfg.DefaultRate = DefaultRate
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Margin == 0 {
		cfg.Margin = DefaultMargin
	}
	cfg.Margin = max(cfg.Margin, 0)
	if cfg.MaxStatsAge <= 0 {
		cfg.MaxStatsAge = DefaultMaxStatsAge
	}
	return &Estimator{cfg: cfg, clock: cfg.Clock,
		engines: map[key]*engineState{}, pools: map[ledger.PoolID]*poolState{}, seedRead: map[key]bool{},
		errHist: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "leasehold", Subsystem: "router", Name: "ttft_estimate_error_ratio",
			Help:    "|estimated − observed| / observed time to first token of streamed dispatches, the estimate taken when the request was sent (p50: histogram_quantile(0.5, ...)).",
			Buckets: []float64{0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 4, 8}}, []string{"pool", "engine"}),
		ttftHist: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "leasehold", Subsystem: "router", Name: "ttft_seconds",
			Help:    "Time to first token as the client sees it (arrival at the router, queueing included, to the first streamed chunk with output), by priority class.",
			Buckets: []float64{.025, .05, .1, .25, .5, .75, 1, 1.5, 2, 3, 5, 10, 30}}, []string{"pool", "priority"}),
	}
}

// engineLocked returns k's state, creating it.
func (e *Estimator) engineLocked(k key) *engineState {
	st := e.engines[k]
	if st == nil {
		st = &engineState{fit: newFit(e.cfg.DefaultRate, e.cfg.Window), timed: map[*Inflight]struct{}{}}
		e.engines[k] = st
	}
	return st
}

// addPending counts in among s's dispatches not past their first token.
func (s *engineState) addPending(in *Inflight) {
	in.pending = true
	if in.until.IsZero() {
		s.streamN++
		s.streamPrompt += in.prompt
		return
	}
	s.timed[in] = struct{}{}
}

// dropPending removes in from them, if it is counted.
func (s *engineState) dropPending(in *Inflight) {
	if !in.pending {
		return
	}
	in.pending = false
	if in.until.IsZero() {
		s.streamN--
		s.streamPrompt -= in.prompt
		return
	}
	delete(s.timed, in)
}

func (e *Estimator) poolLocked(p ledger.PoolID) *poolState {
	ps := e.pools[p]
	if ps == nil {
		ps = &poolState{}
		e.pools[p] = ps
	}
	return ps
}

// ObserveStats records a fleet-view poll of pool: each engine's lease
// count and its engine-reported waiting queue (fleetview Config.OnStats).
func (e *Estimator) ObserveStats(pool ledger.PoolID, st ledger.PoolStats) {
	now := e.clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, es := range st.Engines {
		s := e.engineLocked(key{pool, es.Spec.ID})
		s.polled, s.leases = now, es.Leases
		s.waiting = es.LastObservation.Waiting
		s.waitingOK = !es.Stale && !es.ObservedAt.IsZero()
	}
}

// Seed sets engine's prefill rate (tokens per second) from its own
// metrics, unless this router has observed it already; a seeded engine's
// estimate is warm.
func (e *Estimator) Seed(pool ledger.PoolID, engine ledger.EngineID, rate float64) {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.engineLocked(key{pool, engine})
	if s.fit.samples == 0 {
		s.fit.seed(rate)
		s.seeded = true
	}
}

// Estimate is one engine's expected time to first token for one request.
type Estimate struct {
	// Expected is the fitted line at the work ahead plus the prompt.
	Expected time.Duration
	// Upper is Expected plus Margin mean absolute deviations: what an
	// SLO is held against.
	Upper time.Duration
	// Ahead is the prefill tokens estimated to be ahead of the request.
	Ahead int64
	// Warm is true once the engine was seeded or observed warmSamples
	// times; a cold estimate ranks but refuses nothing.
	Warm bool
}

// Estimate returns engine's estimate for a prompt of prompt tokens.
func (e *Estimator) Estimate(pool ledger.PoolID, engine ledger.EngineID, prompt int64) Estimate {
	now := e.clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.estimateLocked(pool, e.engineLocked(key{pool, engine}), prompt, now)
}

func (e *Estimator) estimateLocked(pool ledger.PoolID, s *engineState, prompt int64, now time.Time) Estimate {
	ahead := e.aheadLocked(pool, s, now)
	exp := s.fit.predict(ahead + float64(max(prompt, 0)))
	return Estimate{Expected: seconds(exp), Upper: seconds(exp + e.cfg.Margin*s.fit.mad),
		Ahead: int64(ahead), Warm: s.seeded || s.fit.samples >= warmSamples}
}

// aheadLocked is the prefill tokens ahead of a new request on s.
func (e *Estimator) aheadLocked(pool ledger.PoolID, s *engineState, now time.Time) float64 {
	own, ownN := float64(s.streamPrompt), s.streamN
	for in := range s.timed {
		if now.After(in.until) {
			continue // past its estimated first token
		}
		own += float64(in.prompt)
		ownN++
	}
	if s.polled.IsZero() || now.Sub(s.polled) > e.cfg.MaxStatsAge {
		return own
	}
	ps := e.poolLocked(pool)
	share := 0.0
	if ps.hold > 0 {
		share = min(ps.ttft/ps.hold, 1)
	}
	others := float64(max(s.leases-int64(s.inflight), 0)) * share
	if s.waitingOK {
		others = max(others, float64(s.waiting-ownN))
	}
	return own + max(others, 0)*ps.prompt
}

func seconds(s float64) time.Duration {
	if !(s > 0) {
		return 0
	}
	return time.Duration(min(s, 24*3600) * float64(time.Second))
}

// Dispatch describes one request sent to an engine.
type Dispatch struct {
	Pool   ledger.PoolID
	Engine ledger.EngineID
	// Class is the request's priority class.
	Class ledger.PriorityName
	// Prompt is its prompt tokens (exact or estimated).
	Prompt int64
	// Stream is true when its first token will be seen (FirstToken).
	Stream bool
	// Arrived is when the request reached the router (zero: at Start).
	Arrived time.Time
}

// Inflight is one dispatch between Start and Done. Its methods are safe
// for concurrent use.
type Inflight struct {
	e       *Estimator
	k       key
	class   ledger.PriorityName
	prompt  int64
	stream  bool
	arrived time.Time
	started time.Time
	work    float64 // ahead + prompt at Start
	est     float64 // the expected TTFT at Start, seconds
	// until ends a non-streamed dispatch's pending prefill: its estimated
	// first token.
	until time.Time
	// first, done and pending are guarded by e.mu; pending: counted in
	// its engine's dispatches not past their first token.
	first, done, pending bool
}

// Start records a dispatch about to be sent: until FirstToken (or, not
// streamed, until its estimated first token) its prompt counts as work
// ahead of later requests to the engine. Call Done on every way out.
func (e *Estimator) Start(d Dispatch) *Inflight {
	now := e.clock.Now()
	if d.Arrived.IsZero() {
		d.Arrived = now
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	k := key{d.Pool, d.Engine}
	s := e.engineLocked(k)
	ahead := e.aheadLocked(d.Pool, s, now)
	in := &Inflight{e: e, k: k, class: d.Class, prompt: max(d.Prompt, 0), stream: d.Stream, arrived: d.Arrived, started: now}
	in.work = ahead + float64(in.prompt)
	in.est = s.fit.predict(in.work)
	if !d.Stream {
		in.until = now.Add(seconds(in.est))
	}
	s.addPending(in)
	s.inflight++
	ps := e.poolLocked(d.Pool)
	ps.prompt = ewma(ps.prompt, float64(in.prompt))
	return in
}

// FirstToken records that the first chunk with output arrived and
// returns the time since Start: the engine's time to first token, which
// the estimate learns from (once per Inflight; later calls return 0).
func (in *Inflight) FirstToken() time.Duration {
	e := in.e
	now := e.clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if in.first || in.done {
		return 0
	}
	in.first = true
	s := e.engineLocked(in.k)
	s.dropPending(in)
	d := now.Sub(in.started)
	obs := d.Seconds()
	ps := e.poolLocked(in.k.pool)
	if obs > 0 {
		s.fit.add(in.work, obs)
		if s.errObs == nil {
			s.errObs = e.errHist.WithLabelValues(string(in.k.pool), string(in.k.engine))
		}
		s.errObs.Observe(math.Abs(in.est-obs) / obs)
		ps.ttft = ewma(ps.ttft, obs)
	}
	obsT, ok := ps.ttftObs[in.class]
	if !ok {
		if ps.ttftObs == nil {
			ps.ttftObs = map[ledger.PriorityName]prometheus.Observer{}
		}
		obsT = e.ttftHist.WithLabelValues(string(in.k.pool), string(in.class))
		ps.ttftObs[in.class] = obsT
	}
	obsT.Observe(now.Sub(in.arrived).Seconds())
	return d
}

// Done ends the dispatch; safe to call more than once.
func (in *Inflight) Done() {
	e := in.e
	now := e.clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if in.done {
		return
	}
	in.done = true
	s := e.engineLocked(in.k)
	s.dropPending(in)
	s.inflight--
	if in.first {
		ps := e.poolLocked(in.k.pool)
		ps.hold = ewma(ps.hold, now.Sub(in.started).Seconds())
	}
}
