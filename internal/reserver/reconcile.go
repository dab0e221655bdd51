package reserver

// The reserver's side of applying the fleet: internal/fleetapply keeps the
// ledger configured as the fleet file says; this file feeds it and
// schedules it. The discovery source is the telemetry reconciler, which
// scrapes every engine each ReconcileInterval and pushes capacities it
// discovered (an engine that must report its capacity is left out of its
// pool's spec until then, and joins when it arrives, which changes the spec
// and re-applies it). Rounds run at start, on SIGHUP (Reload), every
// ReapplyInterval (a new epoch or a wiped store is found with Stats), and
// when new capacity arrives or an Observe reports the ledger lost a pool or
// engine. Tenant quotas follow the configured engines, so they grow as
// engines join (never beyond the pool).
//
// Reconciliation needs no leader election: Observe is idempotent by
// observation time (older or equal ObservedAt is ignored), so several
// reservers scraping the same engines only repeat each other.

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/audit"
	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/fleetapply"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/metricinit"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// fleetState owns the fleet applier, the reconciler that feeds it and the
// loops that schedule both.
type fleetState struct {
	r  *Reserver
	ap *fleetapply.Applier

	// mu guards the fields below.
	mu          sync.Mutex
	rec         *telemetry.Reconciler // nil when no engine is scraped
	lastAttempt map[telemetry.EngineKey]time.Time
	mismatch    map[telemetry.EngineKey]int64 // last capacity gap logged
}

func newFleetState(r *Reserver, fl *fleet.Fleet) (*fleetState, error) {
	fs := &fleetState{r: r, lastAttempt: map[telemetry.EngineKey]time.Time{}, mismatch: map[telemetry.EngineKey]int64{}}
	fs.ap = fleetapply.New(fleetapply.Config{
		Fleet: fl, Ledger: r.ledger, Log: r.log,
		Counted: func(pool ledger.PoolID, result string) {
			r.metrics.applies.WithLabelValues(string(pool), result).Inc()
		},
		WaitingNote: "they join when their metrics report one (tenant quotas grow then)",
	})
	rec, err := fs.newReconciler(fl)
	if err != nil {
		return nil, err
	}
	fs.rec = rec
	return fs, nil
}

func (fs *fleetState) newReconciler(fl *fleet.Fleet) (*telemetry.Reconciler, error) {
	targets := fl.Targets()
	if len(targets) == 0 {
		return nil, nil
	}
	for _, tg := range targets { // at zero from the start: the scrape-error alert and panel read 0, not "No data"
		_ = metricinit.Zero(fs.r.metrics.scrapeErrors.MetricVec, []string{string(tg.Pool)}, []string{string(tg.Engine)})
	}
	return telemetry.NewReconciler(telemetry.ReconcilerConfig{
		Targets:  targets,
		Ledger:   observer{fs},
		Scraper:  &telemetry.Scraper{Timeout: fs.r.cfg.ScrapeTimeout},
		Interval: fs.r.cfg.ReconcileInterval,
	})
}

// observer passes observations to the ledger. For a pool not configured
// yet it swallows ErrUnknownPool, and for an engine its pool's applied spec
// leaves out (waiting for its capacity) ErrUnknownEngine, so that the
// reconciler keeps the sample and its discovered capacity. For a configured
// pool or engine those errors mean the store lost it, and the applier is
// kicked.
type observer struct{ fs *fleetState }

func (o observer) Observe(ctx context.Context, obs ledger.Observation) (ledger.Observed, error) {
	cctx, cancel := context.WithTimeout(ctx, fleetapply.CallTimeout) // an unreachable ledger holds no round
	res, err := o.fs.r.ledger.Observe(cctx, obs)
	cancel()
	unknownPool, unknownEngine := errors.Is(err, ledger.ErrUnknownPool), errors.Is(err, ledger.ErrUnknownEngine)
	if !unknownPool && !unknownEngine {
		if err == nil && res.Applied {
			o.fs.checkCapacity(obs)
		}
		return res, err
	}
	spec, applied := o.fs.ap.Applied(obs.Pool)
	if unknownPool && !applied {
		return ledger.Observed{}, nil
	}
	if unknownEngine && applied && !slices.ContainsFunc(spec.Engines, func(e ledger.EngineSpec) bool { return e.ID == obs.Engine }) {
		return ledger.Observed{}, nil
	}
	o.fs.ap.Kick()
	return res, err
}

// checkCapacity compares an engine's reported KV capacity with what its
// pool's applied spec configures: a fleet file that claims more is logged
// when the gap appears or changes, and exported as a gauge
// (docs/design.md, "Capacity truth"). The ledger already admits against the
// smaller figure.
func (fs *fleetState) checkCapacity(obs ledger.Observation) {
	spec, ok := fs.ap.Applied(obs.Pool)
	if !ok || obs.KVTokensTotal <= 0 {
		return
	}
	i := slices.IndexFunc(spec.Engines, func(e ledger.EngineSpec) bool { return e.ID == obs.Engine })
	if i < 0 {
		return
	}
	gauge := fs.r.metrics.capMismatch.WithLabelValues(string(obs.Pool), string(obs.Engine))
	gap := max(spec.Engines[i].KVTokens-obs.KVTokensTotal, 0)
	key := telemetry.EngineKey{Pool: obs.Pool, Engine: obs.Engine}
	fs.mu.Lock()
	prev := fs.mismatch[key]
	fs.mismatch[key] = gap
	fs.mu.Unlock()
	gauge.Set(float64(gap))
	if gap > 0 && gap != prev {
		fs.r.log.Warn("engine reports less KV capacity than the fleet file configures; admitting against the engine's figure",
			"pool", obs.Pool, "engine", obs.Engine, "configured_kv_tokens", spec.Engines[i].KVTokens, "reported_kv_tokens", obs.KVTokensTotal)
	}
}

// startup applies the fleet; when a pool or engine waits for discovered
// capacity it runs one telemetry round and applies again.
func (fs *fleetState) startup(ctx context.Context) {
	fs.ap.ApplyAll(ctx, true)
	fs.mu.Lock()
	rec := fs.rec
	fs.mu.Unlock()
	if (len(fs.ap.Pending()) > 0 || len(fs.ap.Waiting()) > 0) && rec != nil {
		fs.round(ctx, rec)
		fs.ap.ApplyAll(ctx, false)
	}
}

// startLoops starts the reconcile and maintenance loops; they end when
// stopC closes, and wg waits for them.
func (fs *fleetState) startLoops(wg *sync.WaitGroup, stopC <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	wg.Add(3)
	go func() {
		defer wg.Done()
		<-stopC
		cancel()
	}()
	go func() {
		defer wg.Done()
		fs.reconcileLoop(ctx)
	}()
	go func() {
		defer wg.Done()
		fs.maintainLoop(ctx)
	}()
}

func (fs *fleetState) reconcileLoop(ctx context.Context) {
	t := time.NewTimer(fs.r.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fs.mu.Lock()
		rec := fs.rec
		fs.mu.Unlock()
		if rec != nil {
			fs.round(ctx, rec)
		}
		t.Reset(fs.r.cfg.ReconcileInterval)
	}
}

// round runs one reconciler round, counts its failures and hands the
// capacities it discovered to the applier; new capacity kicks it.
func (fs *fleetState) round(ctx context.Context, rec *telemetry.Reconciler) {
	rec.RunOnce(ctx)
	fs.mu.Lock()
	for _, st := range rec.Status() {
		k := st.Target.Key()
		if st.LastAttempt.IsZero() || st.LastAttempt.Equal(fs.lastAttempt[k]) {
			continue
		}
		fs.lastAttempt[k] = st.LastAttempt
		if st.LastError != nil {
			fs.r.metrics.scrapeErrors.WithLabelValues(string(k.Pool), string(k.Engine)).Inc()
			fs.r.log.Debug("engine scrape failed", "engine", k.String(), "failures", st.Failures, "err", st.LastError)
		}
	}
	fs.mu.Unlock()
	if fs.ap.Learn(rec.Discovered()) {
		fs.ap.Kick()
	}
}

// maintainLoop applies the fleet every ReapplyInterval and when kicked
// (the applier's Kick; its own loop is not started here), and sweeps.
func (fs *fleetState) maintainLoop(ctx context.Context) {
	reapply := time.NewTicker(fs.r.cfg.ReapplyInterval)
	defer reapply.Stop()
	var sweepC <-chan time.Time
	if fs.r.cfg.SweepInterval > 0 {
		sweep := time.NewTicker(fs.r.cfg.SweepInterval)
		defer sweep.Stop()
		sweepC = sweep.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-reapply.C:
			fs.ap.ApplyAll(ctx, false)
		case <-fs.ap.Kicked():
			fs.ap.ApplyAll(ctx, false)
		case <-sweepC:
			fs.sweep(ctx)
		}
	}
}

// replace installs a reloaded fleet and applies it.
func (fs *fleetState) replace(ctx context.Context, fl *fleet.Fleet) {
	old := fs.ap.Fleet()
	if !reflect.DeepEqual(old.Targets(), fl.Targets()) {
		rec, err := fs.newReconciler(fl)
		if err != nil { // the fleet file was validated; keep scraping the old targets
			fs.r.log.Error("reconciler for the reloaded fleet", "err", err)
		} else {
			fs.mu.Lock()
			fs.rec = rec
			fs.mu.Unlock()
		}
	}
	fs.ap.Replace(fl)
	fs.ap.ApplyAll(ctx, true)
}

// sweep sweeps every applied pool once.
func (fs *fleetState) sweep(ctx context.Context) {
	for _, p := range fs.ap.AppliedPools() {
		cctx, cancel := context.WithTimeout(ctx, fleetapply.CallTimeout)
		sw, err := fs.r.ledger.Sweep(cctx, p, 0)
		cancel()
		if err != nil {
			if errors.Is(err, ledger.ErrUnknownPool) {
				fs.ap.Kick()
			} else if ctx.Err() == nil {
				fs.r.log.Warn("sweep failed", "pool", p, "err", err)
			}
			continue
		}
		if sw.Expired > 0 {
			fs.r.metrics.swept.WithLabelValues(string(p), "expired").Add(float64(sw.Expired))
		}
		if sw.Revoked > 0 {
			fs.r.metrics.swept.WithLabelValues(string(p), "revoked").Add(float64(sw.Revoked))
		}
	}
}

// pendingPools returns the pools not configured, with why.
func (fs *fleetState) pendingPools() map[ledger.PoolID]string { return fs.ap.Pending() }

// waitingEngines returns, per configured pool, the engines left out of it
// until their capacity is known.
func (fs *fleetState) waitingEngines() map[ledger.PoolID][]fleet.WaitingEngine {
	return fs.ap.Waiting()
}

// scrapes returns the reconciler's view for the audit.
func (fs *fleetState) scrapes() map[telemetry.EngineKey]audit.Scrape {
	fs.mu.Lock()
	rec := fs.rec
	fs.mu.Unlock()
	if rec == nil {
		return nil
	}
	out := map[telemetry.EngineKey]audit.Scrape{}
	for _, st := range rec.Status() {
		s := audit.Scrape{LastSuccess: st.LastSuccess, Failures: st.Failures}
		if st.LastError != nil {
			s.LastError = st.LastError.Error()
		}
		out[st.Target.Key()] = s
	}
	return out
}
