package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasehold/leasehold/internal/baseline"
	"github.com/leasehold/leasehold/internal/enginehealth"
	"github.com/leasehold/leasehold/internal/estimate"
	"github.com/leasehold/leasehold/internal/failover"
	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/fleetapply"
	"github.com/leasehold/leasehold/internal/fleetview"
	"github.com/leasehold/leasehold/internal/httpguard"
	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/oaihttp"
	"github.com/leasehold/leasehold/internal/skewclock"
	"github.com/leasehold/leasehold/internal/telemetry"
	"github.com/leasehold/leasehold/internal/tenancy"
	"github.com/leasehold/leasehold/internal/ttft"
	"github.com/leasehold/leasehold/internal/waitq"
)

// Options are a Router's collaborators.
type Options struct {
	// Fleet is the loaded fleet file. Required.
	Fleet *fleet.Fleet
	// Ledger is the shared ledger; required in ledger admission, unused in
	// local. The Router does not close it.
	Ledger ledger.Ledger
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Transport carries upstream requests and scrapes; nil means a
	// dedicated http.Transport.
	Transport http.RoundTripper
	// LeaseConfig, when set, adjusts the lease.Manager configuration built
	// from the fleet file (tests shorten timings).
	LeaseConfig func(*lease.Config)
	// Clock is the router's clock, skewed by Config.ClockOffset; nil means
	// the real clock.
	Clock clockwork.Clock
}

// Router is one router replica: the HTTP proxy that leases before it
// dispatches. Start it, then Shutdown.
type Router struct {
	cfg    Config
	fleet  *fleet.Fleet
	ledger ledger.Ledger
	log    *slog.Logger
	client *http.Client
	met    *metrics
	fo     *failover.Metrics
	opts   Options
	// clock is the only clock the router reads (Options.Clock skewed by
	// --clock-offset); the lease Manager gets it too.
	clock clockwork.Clock

	pools map[ledger.PoolID]*poolRT
	adm   admitter
	// ttft estimates each engine's time to first token and holds classes
	// to their ttft_slo; health is each engine's breaker, drain flag and
	// this router's recent failures there. Both rank candidates (plan).
	ttft   *ttft.Estimator
	health *enginehealth.Recorder
	// lens is each pool's context length (internal/estimate); lim bounds
	// requests with it.
	lens *estimate.ContextLens
	lim  limits
	// ten is the tenancy of the fleet file, swapped whole by Reload
	// (reloadMu serialises reloads); tm counts per tenant.
	ten      atomic.Pointer[tenancy.Table]
	reloadMu sync.Mutex
	tm       *tenancy.Metrics

	srv   *http.Server
	ln    net.Listener
	errC  chan error    // Serve's result
	stopC chan struct{} // closed at shutdown: queued waiters give up
	// cutC is closed when Shutdown's ctx ends before the handlers do:
	// releases waiting out --abort-grace go at once.
	cutC chan struct{}

	shutdownOnce sync.Once // Shutdown runs once; later calls return its result
	shutdownErr  error     // set inside shutdownOnce

	started time.Time

	draining atomic.Bool
	inflight atomic.Int64 // inference requests being served
	// handlers counts inference handlers and the releases they leave
	// behind (cut connections); Shutdown waits for it.
	handlers sync.WaitGroup
}

// poolRT is one pool's request-path state.
type poolRT struct {
	pool fleet.Pool
	urls map[ledger.EngineID]string
	est  *estimate.Estimator
	// learned is the fleet-wide completion length, read from the ledger's
	// counters each fleet-view poll; elastic says leases reserve it and
	// grow (an elastic pool, ledger admission, no block leases).
	learned  *estimate.Learned
	elastic  bool
	observed bool // every engine has telemetry: reconciliation sees growth
	q        *waitq.Queue
	tok      *estimate.PoolTokenizer // --prompt-tokens=tokenize
}

// grantable is the most KV one lease of a class with max_fill f may be
// granted on the pool's largest configured engine with headroom h kept
// free, or MaxAmount when no engine's capacity is configured.
func (p *poolRT) grantable(f, h float64) int64 {
	most := int64(0)
	for _, e := range p.pool.Engines {
		if e.KVTokens > 0 {
			most = max(most, ledger.Fill(e.KVTokens, f)-ledger.Fill(e.KVTokens, h))
		}
	}
	if most <= 0 {
		return ledger.MaxAmount
	}
	return most
}

// maxFill is the priority class's max_fill (1 for an unknown class).
func (r *Router) maxFill(prio ledger.PriorityName) float64 {
	for _, c := range r.fleet.Priorities {
		if c.Name == prio {
			return c.MaxFill
		}
	}
	return 1
}

// New checks cfg and builds a Router; Start runs it.
func New(cfg Config, opts Options) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Fleet == nil {
		return nil, errors.New("route: Options.Fleet is required")
	}
	if cfg.Admission == AdmissionLedger && opts.Ledger == nil {
		return nil, errors.New("route: Options.Ledger is required with --admission=ledger")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	tr := opts.Transport
	if tr == nil {
		tr = &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		}
	}
	r := &Router{
		cfg: cfg, fleet: opts.Fleet, ledger: opts.Ledger, log: opts.Logger, opts: opts,
		client: &http.Client{Transport: tr},
		met:    newMetrics(),
		clock:  skewclock.Offset(opts.Clock, cfg.ClockOffset),
		pools:  map[ledger.PoolID]*poolRT{},
		errC:   make(chan error, 1), stopC: make(chan struct{}), cutC: make(chan struct{}),
	}
	statsAge := 4 * cfg.ViewInterval // as fleetview.Engines
	r.ttft = ttft.New(ttft.Config{Clock: r.clock, SLOs: opts.Fleet.TTFTSLOs, MaxStatsAge: statsAge})
	r.health = enginehealth.New(enginehealth.Config{Clock: r.clock, MaxStatsAge: statsAge})
	r.met.reg.MustRegister(r.ttft)
	r.fo = failover.NewMetrics(r.met.reg)
	r.ten.Store(tenancy.New(opts.Fleet))
	r.tm = tenancy.NewMetrics(r.met.reg)
	r.lens = estimate.NewContextLens(estimate.ContextConfig{Fleet: opts.Fleet, Fallback: cfg.MaxModelLen,
		Client: r.client, Timeout: applyScrapeTimeout, Log: opts.Logger, Clock: r.clock})
	r.lim = limits{maxModelLen: r.lens.Limit, maxN: cfg.MaxN}
	for _, p := range opts.Fleet.Pools {
		rt := &poolRT{pool: p, urls: map[ledger.EngineID]string{}, est: estimate.NewEstimator(cfg.PromptMargin, p.MediaTokens),
			learned: estimate.NewLearned(cfg.ReserveQuantile, cfg.LearnWindow, estimate.DefaultMinSamples),
			elastic: p.Reserve != ledger.ReserveWorstCase && cfg.Admission == AdmissionLedger && cfg.BlockLeaseKV == 0,
			tok:     estimate.NewPoolTokenizer(p)}
		depth, wait := r.met.queueDepth.WithLabelValues(string(p.Name)), r.met.queueWait.MustCurryWith(prometheus.Labels{"pool": string(p.Name)})
		rt.q = waitq.New(waitq.Config{Depth: cfg.QueueDepth, Timeout: cfg.QueueTimeout, Clock: r.clock, Waits: r.queueWaits, OnEnter: depth.Inc,
			OnLeave: func(outcome string, d time.Duration) { depth.Dec(); wait.WithLabelValues(outcome).Observe(d.Seconds()) }})
		r.tm.WatchQueue(p.Name, rt.q, opts.Fleet)
		rt.observed = true
		for _, e := range p.Engines {
			rt.urls[e.ID] = strings.TrimRight(e.URL, "/")
			rt.observed = rt.observed && e.StaleAfter > 0
		}
		r.pools[p.Name] = rt
		r.met.registerMedia(p.Name, rt.est.Media())
		r.met.zero(p, opts.Fleet.Priorities, rt.est.Ratio())
		if rt.elastic {
			r.met.registerLearned(p.Name, rt.learned)
		}
	}
	return r, nil
}

// Start starts the fleet applier and the holder sessions (ledger
// admission) or the baseline's scraper, and serves on cfg.Listen. It does
// not wait for the ledger or for engines whose capacity is still to be
// discovered (see internal/fleetapply): it returns once serving, and /readyz turns
// ready when every pool is configured and its holder session confirmed
// (or, local, the first scrape is done).
func (r *Router) Start(ctx context.Context) error {
	r.started = r.clock.Now()
	pools := make([]ledger.PoolID, 0, len(r.fleet.Pools))
	for _, p := range r.fleet.Pools {
		pools = append(pools, p.Name)
	}
	switch r.cfg.Admission {
	case AdmissionLocal:
		specs, err := r.poolSpecs(ctx)
		if err != nil {
			return err
		}
		r.lens.DiscoverAll(ctx)
		r.log.Warn("--admission=local: BASELINE MODE, NOT LEASEHOLD. Admitting against scraped engine metrics with no shared ledger; " +
			"several routers WILL over-admit the fleet. Use only to measure the gap.")
		r.adm = localAdmitter{baseline.New(baseline.Config{Fleet: r.fleet, Specs: specs, Every: r.cfg.ScrapeInterval,
			Scraper: telemetry.Scraper{Client: r.client}, Log: r.log, Clock: r.clock})}
	default:
		la := &ledgerAdmitter{}
		scrape := fleetapply.ScrapeEngines(telemetry.Scraper{Client: r.client, Timeout: applyScrapeTimeout})
		ap := fleetapply.New(fleetapply.Config{
			Fleet: r.fleet, Ledger: r.ledger, Log: r.log, MayNotConfigure: mayNotConfigure,
			// Capacities scraped here; context lengths and TTFT seeds learnt in the same round.
			Discover: func(ctx context.Context, fl *fleet.Fleet, pool ledger.PoolID, known map[telemetry.EngineKey]int64) map[telemetry.EngineKey]int64 {
				found := scrape(ctx, fl, pool, known)
				r.lens.Discover(ctx, pool)
				if p, ok := fl.Pool(pool); ok { // seed TTFT estimates from engine metrics
					r.ttft.SeedPool(ctx, r.client, applyScrapeTimeout, pool, p.Engines)
				}
				return found
			},
			Epoch:        la.sessionEpoch,
			Publish:      la.publish,
			WaitingNote:  "they are not candidates until their metrics report one",
			ReadyTimeout: r.cfg.ReadyTimeout, Clock: r.clock,
		})
		lc := lease.Config{
			Ledger: r.ledger, Pools: pools, HolderName: r.cfg.ID,
			SessionTTL: r.fleet.Lease.SessionTTL, KeepAliveInterval: r.fleet.Lease.RenewInterval,
			LeaseTTL: r.fleet.Lease.LeaseTTL, Logger: r.log,
			Block: lease.BlockConfig{KVTokens: r.cfg.BlockLeaseKV, Slots: r.cfg.BlockLeaseSlots, Idle: r.cfg.BlockLeaseIdle}, Clock: r.clock,
			// The ledger lost the pool (wiped store): configure it again.
			Reconfigure: func(ctx context.Context, pool ledger.PoolID) error { return ap.ApplyPool(ctx, pool, true) },
		}
		if r.opts.LeaseConfig != nil {
			r.opts.LeaseConfig(&lc)
		}
		m, err := lease.New(lc)
		if err != nil {
			return fmt.Errorf("lease manager: %w", err)
		}
		la.m, la.ap = m, ap
		la.sessions.Store(m)
		ap.Start()
		if r.cfg.ViewInterval > 0 {
			la.fv = fleetview.New(fleetview.Config{Ledger: r.ledger, Pools: pools, Every: r.cfg.ViewInterval, Clock: r.clock, Log: r.log,
				OnFreed: func(pool ledger.PoolID) {
					if p := r.pools[pool]; p != nil {
						p.q.Notify()
					}
				},
				Counted: func(pool ledger.PoolID, result string) {
					r.met.viewPolls.WithLabelValues(string(pool), result).Inc()
				},
				OnStats: func(pool ledger.PoolID, st ledger.PoolStats) {
					r.ttft.ObserveStats(pool, st)
					r.health.ObserveStats(pool, st)
					if p := r.pools[pool]; p != nil && p.elastic {
						p.learned.Update(r.clock.Now(), st.Counters)
					}
				}})
			la.fv.Start()
		}
		r.adm = la
	}
	r.met.registerAdmitter(r.adm, pools)
	for name := range r.pools {
		r.met.queueDepth.WithLabelValues(string(name)).Set(0)
	}

	ln, err := net.Listen("tcp", r.cfg.Listen)
	if err != nil {
		_ = r.adm.close(ctx)
		return fmt.Errorf("listen on %s: %w", r.cfg.Listen, err)
	}
	g := httpguard.New(r.cfg.HTTP, httpguard.Options{Probes: []string{"/healthz", "/readyz"}, Public: []string{"/metrics"}, Logger: r.log, Registerer: r.met.reg,
		Authenticate: func(hr *http.Request) error { _, err := r.authenticate(hr); return err },
		Refuse:       func(w http.ResponseWriter, _ *http.Request, err error) { writeError(w, toAPIError(err)) }})
	r.ln, r.srv = g.Listener(ln), g.Server(r.Handler(), slog.NewLogLogger(r.log.Handler(), slog.LevelDebug))
	r.srv.Handler = oaihttp.WithRequestID(r.srv.Handler) // outermost: refusals carry it too
	go func() { r.errC <- r.srv.Serve(r.ln) }()
	attrs := []any{"addr", ln.Addr().String(), "id", r.cfg.ID, "admission", r.cfg.Admission, "pools", len(pools)}
	if r.cfg.ClockOffset != 0 {
		attrs = append(attrs, "clock_offset", r.cfg.ClockOffset.String())
	}
	r.log.Info("router serving", attrs...)
	return nil
}

// poolSpecs builds the local baseline's specs, discovering from the engines' metrics
// the capacity of engines whose kv_tokens the file omits.
func (r *Router) poolSpecs(ctx context.Context) ([]ledger.PoolSpec, error) {
	discovered := map[telemetry.EngineKey]int64{}
	sc := telemetry.Scraper{Client: r.client}
	for _, p := range r.fleet.Pools {
		for _, e := range p.Engines {
			if !e.KVFromMetrics {
				continue
			}
			s, _, err := sc.Scrape(ctx, e.MetricsURL, e.Format)
			if err == nil && s.Known.Has(telemetry.KnownKVTotal) {
				discovered[telemetry.EngineKey{Pool: p.Name, Engine: e.ID}] = s.KVTokensTotal
			}
		}
	}
	return r.fleet.PoolSpecs(discovered)
}

// Addr is the listening address, once started.
func (r *Router) Addr() string { return r.ln.Addr().String() }

// Err delivers the server's failure, if it stops on its own.
func (r *Router) Err() <-chan error { return r.errC }

// Ready reports whether the router admits: not draining, and every pool
// configured, its holder session confirmed and out of the ledger's
// recovery window (or the baseline's first scrape done).
func (r *Router) Ready() bool { return len(r.notReady()) == 0 }

// notReady says why the router does not admit now, one cause a line.
func (r *Router) notReady() []string {
	if r.draining.Load() {
		return []string{"draining: shutting down"}
	} else if r.adm == nil {
		return []string{"starting"}
	}
	return r.adm.unready()
}

// servedPaths is what the router serves, for the 404 of any other path.
const servedPaths = "POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /v1/models/{model}"

// Handler returns the router's HTTP API.
func (r *Router) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, hr *http.Request) { r.serveInference(w, hr, true) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, hr *http.Request) { r.serveInference(w, hr, false) })
	mux.HandleFunc("GET /v1/models", r.serveModels)
	mux.HandleFunc("GET /v1/models/{model...}", r.serveModels)
	mux.HandleFunc("/", oaihttp.NotServed(mux, servedPaths))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := r.notReady(); len(why) > 0 {
			http.Error(w, "not ready:\n"+strings.Join(why, "\n"), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(r.met.reg, promhttp.HandlerOpts{Registry: r.met.reg}))
	return mux
}

// serveModels answers GET /v1/models and GET /v1/models/{model} with the
// pools the tenant may use.
func (r *Router) serveModels(w http.ResponseWriter, hr *http.Request) {
	tenant, err := r.authenticate(hr)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	t := r.ten.Load().Tenant(tenant)
	var ids []string
	for _, p := range r.fleet.Pools {
		if t.InPool(p.Name) {
			ids = append(ids, string(p.Name))
		}
	}
	oaihttp.ServeModels(w, hr.PathValue("model"), ids, r.started)
}

// authenticate maps the bearer key to its tenant.
func (r *Router) authenticate(hr *http.Request) (ledger.TenantID, error) {
	if t, ok := r.ten.Load().Authenticate(httpguard.Bearer(hr)); ok {
		return t, nil
	}
	return "", ErrUnauthorized
}

// Reload reads the fleet file (--config) again and applies its tenants,
// API keys and priority_policy (fleet.WithTenancy) to the requests that
// start after it returns; the sections it names in kept differ and need a
// restart. The fleet applier configures the new tenant quotas in the
// ledger. On error nothing changed.
func (r *Router) Reload() (kept []string, err error) {
	r.reloadMu.Lock()
	defer r.reloadMu.Unlock()
	defer func() { r.tm.Reloaded(err) }()
	f, err := fleet.Load(r.cfg.FleetFile)
	if err != nil {
		return nil, err
	}
	next, kept, err := r.ten.Load().Fleet().WithTenancy(f)
	if err != nil {
		return kept, fmt.Errorf("fleet file %s: %w", r.cfg.FleetFile, err)
	}
	r.ten.Store(tenancy.New(next))
	if la, ok := r.adm.(*ledgerAdmitter); ok {
		la.ap.Replace(next)
		la.ap.Kick()
	}
	return kept, nil
}

// Shutdown stops in order: mark unready, stop accepting, and wait under
// ctx for in-flight requests and the releases cut requests leave behind
// (--abort-grace). If ctx ends first, like http.Server.Shutdown it stops
// waiting and returns ctx.Err() wrapped, but it still cuts what is left:
// connections are closed and pending releases go at once. Either way it
// then releases the leases still held and ends the holder sessions, under
// its own bounded context. Calling it again returns the first call's
// result.
func (r *Router) Shutdown(ctx context.Context) error {
	r.shutdownOnce.Do(func() { r.shutdownErr = r.shutdown(ctx) })
	return r.shutdownErr
}

func (r *Router) shutdown(ctx context.Context) error {
	r.draining.Store(true)
	close(r.stopC)
	var errs []error
	if r.srv != nil {
		err := r.srv.Shutdown(ctx)
		if err != nil {
			r.log.Warn("drain timed out; cutting requests still in flight", "in_flight", r.inflight.Load())
			_ = r.srv.Close()
		} else if !r.waitHandlers(ctx) {
			err = ctx.Err()
		}
		if err != nil {
			close(r.cutC)
			errs = append(errs, fmt.Errorf("route: shutdown: %d requests still in flight or releasing: %w", r.inflight.Load(), err))
		}
	}
	if r.adm != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := r.adm.close(cctx); err != nil {
			errs = append(errs, fmt.Errorf("release leases: %w", err))
		}
		cancel()
	}
	if t, ok := r.client.Transport.(*http.Transport); ok {
		t.CloseIdleConnections()
	}
	return errors.Join(errs...)
}

// waitHandlers waits for the inference handlers and the releases they
// left behind; false when ctx ended first.
func (r *Router) waitHandlers(ctx context.Context) bool {
	done := make(chan struct{})
	go func() { r.handlers.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// applyScrapeTimeout bounds one capacity or context-length scrape of an
// engine by the fleet applier's rounds.
const applyScrapeTimeout = 2 * time.Second

// mayNotConfigure reports whether the ledger refused Configure because this
// router's principal may not configure it (a reserver owns configuration):
// the fleet applier then adopts the ledger's pools.
func mayNotConfigure(err error) bool { return errors.Is(err, ledger.ErrPermissionDenied) }
