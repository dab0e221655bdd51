package capacity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
)

// Config is one simulated run. Zero durations take the defaults the
// routers and reservers have (Defaults).
type Config struct {
	Pools, EnginesPerPool, Routers int
	// EngineSlots binds; each engine's KV capacity is large enough that
	// only slots do.
	EngineSlots int64
	// Rate is requests per second, Poisson, spread evenly over pools and
	// routers.
	Rate float64
	// Hold is a request's mean time on its engine (uniform 0.5-1.5×).
	Hold time.Duration
	// PromptKV and OutputKV are what a request reserves; halfway through
	// it grows by half its output (one Grow), as an elastic lease does.
	PromptKV, OutputKV int64
	// Warmup runs before the measured Window.
	Warmup, Window time.Duration
	// SessionTTL, LeaseTTL: the routers' (lease.Config).
	SessionTTL, LeaseTTL time.Duration
	// ViewInterval is each router's Stats poll of each pool (0: off).
	ViewInterval time.Duration
	// ReconcileInterval, SweepInterval, ReapplyInterval: the one
	// reserver's loops.
	ReconcileInterval, SweepInterval, ReapplyInterval time.Duration
	// Block configures the routers' block leases (zero: off).
	Block lease.BlockConfig
	// MaxInFlight bounds requests in flight; arrivals beyond it are shed.
	MaxInFlight int
	Seed        uint64
}

// Defaults are the deployment defaults: session TTL 10 s, lease TTL 30 s,
// --view-interval 250 ms, --reconcile-interval 2 s, --sweep-interval 1 s,
// --reapply-interval 15 s.
func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.SessionTTL, lease.DefaultSessionTTL)
	def(&c.LeaseTTL, lease.DefaultLeaseTTL)
	def(&c.ReconcileInterval, 2*time.Second)
	def(&c.SweepInterval, time.Second)
	def(&c.ReapplyInterval, 15*time.Second)
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 4096
	}
	return c
}

// Validate reports the first impossible field.
func (c Config) Validate() error {
	switch {
	case c.Pools < 1 || c.EnginesPerPool < 1 || c.Routers < 1:
		return fmt.Errorf("capacity: config: %d pools, %d engines per pool, %d routers: want >= 1 of each", c.Pools, c.EnginesPerPool, c.Routers)
	case c.EngineSlots < 1 || c.PromptKV < 1 || c.OutputKV < 1:
		return errors.New("capacity: config: EngineSlots, PromptKV and OutputKV must be >= 1")
	case !(c.Rate > 0) || c.Hold <= 0 || c.Window <= 0 || c.Warmup < 0:
		return errors.New("capacity: config: Rate, Hold and Window must be > 0, Warmup >= 0")
	case c.ViewInterval < 0 || c.MaxInFlight < 0:
		return errors.New("capacity: config: ViewInterval and MaxInFlight must be >= 0")
	}
	return nil
}

// Deployment is the model's view of the run: one reserver, its routers'
// keepalive interval (a third of the session TTL), one Grow per request,
// and BlockLocal as the run measured it.
func (c Config) Deployment(blockLocal float64) Deployment {
	c = c.withDefaults()
	return Deployment{
		Pools: c.Pools, EnginesPerPool: c.EnginesPerPool, Routers: c.Routers, Reservers: 1,
		Rate: c.Rate, MeanDuration: c.Hold, GrowsPerRequest: 1, LeaseTTL: c.LeaseTTL, BlockLocal: blockLocal,
		KeepAliveInterval: c.SessionTTL / 3, ViewInterval: c.ViewInterval,
		ReconcileInterval: c.ReconcileInterval, SweepInterval: c.SweepInterval, ReapplyInterval: c.ReapplyInterval,
	}
}

// Probe reads the store's CPU time used so far.
type Probe func(ctx context.Context) (time.Duration, error)

// Result is a run's measurement over its window.
type Result struct {
	Window time.Duration
	// Calls are the ledger calls in the window, by Op.
	Calls Counts
	// Requests arrived in the window; Granted, Refused (capacity), Failed
	// (anything else) and Shed (over MaxInFlight) say what became of them.
	Requests, Granted, Refused, Failed, Shed int64
	// FirstFailure is the error of the window's first failed request.
	FirstFailure string
	// BlockLocal is the share of grants block leases admitted locally.
	BlockLocal float64
	// OverAdmitted counts grants that took an engine's held slots or KV
	// past its capacity (the engines' ground truth), over the whole run.
	OverAdmitted int64
	// PeakFill is the highest share of an engine's slots held at once.
	PeakFill float64
	// StoreCPU is what Probe measured over the window; SelfCPU this
	// process (routers, engines, reserver and load together).
	StoreCPU, SelfCPU time.Duration
}

// Rates are the window's calls per second.
func (r Result) Rates() Rates {
	var out Rates
	for i, n := range r.Calls {
		out[i] = float64(n) / r.Window.Seconds()
	}
	return out
}

// engine is a lightweight engine: the slots and KV its granted requests
// hold, checked against its capacity at every grant.
type engine struct {
	id          ledger.EngineID
	slots, kv   int64
	mu          sync.Mutex
	usedS, used int64
	peak        int64
}

// take starts a request holding kv tokens; it reports whether the engine
// is now over capacity.
func (e *engine) take(kv int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.usedS++
	e.used += kv
	e.peak = max(e.peak, e.usedS)
	return e.usedS > e.slots || e.used > e.kv
}

func (e *engine) grow(by int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.used += by
	return e.used > e.kv
}

func (e *engine) drop(kv int64) {
	e.mu.Lock()
	e.usedS--
	e.used -= kv
	e.mu.Unlock()
}

func (e *engine) observe() (used, running int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.used, e.usedS
}

// PoolSpec is the spec of simulated pool i: EnginesPerPool engines,
// tenant "t" with the whole pool, class "std", elastic with 0.1 growth
// headroom.
func (c Config) PoolSpec(i int) ledger.PoolSpec {
	kv := c.EngineSlots * (c.PromptKV + 2*c.OutputKV) * 2 // never binds
	s := ledger.PoolSpec{
		Name:           PoolName(i),
		Tenants:        []ledger.TenantSpec{{Name: "t", KVShare: 1}},
		Priorities:     []ledger.PrioritySpec{{Name: "std", MaxFill: 1}},
		GrowthHeadroom: 0.1,
		RetryAfter:     100 * time.Millisecond,
	}
	for e := range c.EnginesPerPool {
		s.Engines = append(s.Engines, ledger.EngineSpec{ID: ledger.EngineID(fmt.Sprintf("e%d", e)),
			URL: fmt.Sprintf("http://sim-%d-%d.invalid:8000", i, e), KVTokens: kv, Slots: c.EngineSlots})
	}
	return s
}

// PoolName is the name of simulated pool i.
func PoolName(i int) ledger.PoolID { return ledger.PoolID(fmt.Sprintf("sim-%04d", i)) }

// Opener opens a ledger on the store under test: one per router and one
// for the reserver, as each process has its own client. Run closes them.
type Opener func() (ledger.Ledger, error)

// Run configures the pools, starts the routers (lease.Managers, each on a
// ledger of its own from open), the reserver's loops (on one more) and the
// load, measures the window and stops everything. probe may be nil (no
// store CPU then).
func Run(ctx context.Context, cfg Config, open Opener, probe Probe) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	cfg = cfg.withDefaults()
	var counter Counter
	var opened []ledger.Ledger
	defer func() {
		for _, l := range opened {
			_ = l.Close()
		}
	}()
	newLedger := func() (*Counted, error) {
		l, err := open()
		if err != nil {
			return nil, err
		}
		opened = append(opened, l)
		return NewCounted(l, &counter), nil
	}
	cl, err := newLedger() // the reserver's
	if err != nil {
		return Result{}, err
	}
	pools := make([]ledger.PoolID, cfg.Pools)
	specs := make([]ledger.PoolSpec, cfg.Pools)
	engines := make([][]*engine, cfg.Pools)
	for i := range pools {
		specs[i] = cfg.PoolSpec(i)
		pools[i] = specs[i].Name
		if _, err := cl.Configure(ctx, specs[i]); err != nil {
			return Result{}, fmt.Errorf("configure %s: %w", pools[i], err)
		}
		for _, e := range specs[i].Engines {
			engines[i] = append(engines[i], &engine{id: e.ID, slots: e.Slots, kv: e.KVTokens})
		}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	routers := make([]*lease.Manager, cfg.Routers)
	views := make([]*Counted, cfg.Routers) // each router's ledger, for its fleet view
	defer func() {
		for _, m := range routers {
			if m != nil {
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = m.Close(cctx)
				cancel()
			}
		}
	}()
	for r := range routers {
		rl, err := newLedger()
		if err != nil {
			return Result{}, err
		}
		m, err := lease.New(lease.Config{Ledger: rl, Pools: pools, HolderName: fmt.Sprintf("router-%d", r),
			SessionTTL: cfg.SessionTTL, LeaseTTL: cfg.LeaseTTL, Block: cfg.Block, Logger: quiet})
		if err != nil {
			return Result{}, err
		}
		routers[r], views[r] = m, rl
	}
	for _, m := range routers {
		if err := m.WaitReady(ctx); err != nil {
			return Result{}, fmt.Errorf("routers' sessions: %w", err)
		}
	}

	lctx, stopLoops := context.WithCancel(ctx)
	var loops sync.WaitGroup
	defer func() { stopLoops(); loops.Wait() }()
	start := func(every time.Duration, n int, f func(ctx context.Context, i int)) {
		if every <= 0 {
			return
		}
		loops.Add(1)
		go func() { defer loops.Done(); pace(lctx, every, n, 16, f) }()
	}
	// The reserver: observe every engine, sweep and re-apply every pool.
	flat := make([][2]int, 0, cfg.Pools*cfg.EnginesPerPool)
	for p := range engines {
		for e := range engines[p] {
			flat = append(flat, [2]int{p, e})
		}
	}
	start(cfg.ReconcileInterval, len(flat), func(ctx context.Context, i int) {
		p, e := flat[i][0], flat[i][1]
		used, running := engines[p][e].observe()
		_, _ = cl.Observe(ctx, ledger.Observation{Pool: pools[p], Engine: engines[p][e].id, KVTokensUsed: used, Running: running, ObservedAt: time.Now()})
	})
	start(cfg.SweepInterval, cfg.Pools, func(ctx context.Context, i int) { _, _ = cl.Sweep(ctx, pools[i], 0) })
	start(cfg.ReapplyInterval, cfg.Pools, func(ctx context.Context, i int) { _, _ = cl.Configure(ctx, specs[i]) })
	// Each router's fleet view.
	for _, rl := range views {
		start(cfg.ViewInterval, cfg.Pools, func(ctx context.Context, i int) { _, _ = rl.Stats(ctx, pools[i]) })
	}

	var (
		over, requests, granted, refused, failed, shed, local atomic.Int64
		counting                                              atomic.Bool
		inflight                                              sync.WaitGroup
		failMu                                                sync.Mutex // guards firstFail
		firstFail                                             string
	)
	sem := make(chan struct{}, cfg.MaxInFlight)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	serve := func(m *lease.Manager, p int, id string, hold time.Duration) {
		defer func() { <-sem; inflight.Done() }()
		cands := make([]ledger.EngineID, len(engines[p]))
		for i, j := range rand.Perm(len(cands)) {
			cands[i] = engines[p][j].id
		}
		kv := cfg.PromptKV + cfg.OutputKV
		t, err := m.Admit(ctx, ledger.AcquireRequest{Pool: pools[p], Candidates: cands, Tenant: "t", Priority: "std",
			KVTokens: kv, Slots: 1, RequestID: ledger.RequestID(id)})
		count := counting.Load()
		switch {
		case errors.Is(err, ledger.ErrRejected):
			if count {
				refused.Add(1)
			}
			return
		case err != nil:
			if count {
				failed.Add(1)
				failMu.Lock()
				if firstFail == "" {
					firstFail = err.Error()
				}
				failMu.Unlock()
			}
			return
		}
		if count {
			granted.Add(1)
			if _, isSub := t.(*lease.Sub); isSub {
				local.Add(1)
			}
		}
		var e *engine
		for _, x := range engines[p] {
			if x.id == t.Engine() {
				e = x
			}
		}
		held := kv
		if e.take(kv) {
			over.Add(1)
		}
		time.Sleep(hold / 2)
		if g, ok := t.(lease.Grower); ok {
			more := cfg.OutputKV / 2
			if g.Grow(ctx, kv+more) == nil {
				held += more
				if e.grow(more) {
					over.Add(1)
				}
			}
		}
		time.Sleep(hold - hold/2)
		e.drop(held)
		_ = t.Release(ledger.Usage{PromptTokens: cfg.PromptKV, CompletionTokens: cfg.OutputKV, Finished: true})
	}
	load := func(until time.Time) {
		next := time.Now()
		for n := 0; ; n++ {
			next = next.Add(time.Duration(rng.ExpFloat64() / cfg.Rate * float64(time.Second)))
			if next.After(until) {
				return
			}
			if d := time.Until(next); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
			if counting.Load() {
				requests.Add(1)
			}
			select {
			case sem <- struct{}{}:
			default:
				if counting.Load() {
					shed.Add(1)
				}
				continue
			}
			inflight.Add(1)
			hold := time.Duration((0.5 + rng.Float64()) * float64(cfg.Hold))
			go serve(routers[rng.IntN(len(routers))], rng.IntN(cfg.Pools), fmt.Sprintf("req-%d", n), hold)
		}
	}

	var res Result
	began := time.Now()
	var loadDone sync.WaitGroup
	loadDone.Add(1)
	go func() { defer loadDone.Done(); load(began.Add(cfg.Warmup + cfg.Window)) }()
	if !sleepCtx(ctx, cfg.Warmup) {
		return Result{}, ctx.Err()
	}
	c0, cpu0, self0 := counter.Counts(), probeOr(ctx, probe), selfCPU()
	t0 := time.Now()
	counting.Store(true)
	if !sleepCtx(ctx, cfg.Window) {
		return Result{}, ctx.Err()
	}
	counting.Store(false)
	res.Window = time.Since(t0)
	res.Calls = counter.Counts().Minus(c0)
	res.StoreCPU = probeOr(ctx, probe) - cpu0
	res.SelfCPU = selfCPU() - self0
	loadDone.Wait()
	inflight.Wait()
	res.Requests, res.Granted, res.Refused, res.Failed, res.Shed = requests.Load(), granted.Load(), refused.Load(), failed.Load(), shed.Load()
	if res.Granted > 0 {
		res.BlockLocal = float64(local.Load()) / float64(res.Granted)
	}
	res.OverAdmitted = over.Load()
	res.FirstFailure = firstFail
	for p := range engines {
		for _, e := range engines[p] {
			res.PeakFill = max(res.PeakFill, float64(e.peak)/float64(e.slots))
		}
	}
	return res, nil
}

func probeOr(ctx context.Context, probe Probe) time.Duration {
	if probe == nil {
		return 0
	}
	d, err := probe(ctx)
	if err != nil {
		return 0
	}
	return d
}

// selfCPU is this process's user and system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// pace calls f(ctx, i) for every i in [0, n) once per every, spread
// evenly over it (batches every 10 ms), at most workers at a time; a call
// whose turn comes while every worker is busy waits for one.
func pace(ctx context.Context, every time.Duration, n, workers int, f func(ctx context.Context, i int)) {
	if n == 0 {
		return
	}
	work := make(chan int, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				f(ctx, i)
			}
		}()
	}
	defer func() { close(work); wg.Wait() }()
	const tick = 10 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	perTick := float64(n) * tick.Seconds() / every.Seconds()
	due, next := rand.Float64(), rand.IntN(n) // a random phase per loop
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		due += perTick
		for ; due >= 1; due-- {
			select {
			case work <- next:
			case <-ctx.Done():
				return
			}
			next = (next + 1) % n
		}
	}
}
