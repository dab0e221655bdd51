package reserver

// The fleet applier keeps the ledger configured as the fleet file says.
// Configure is idempotent and leaves leases alone, so applying is always
// safe: at start, on SIGHUP, when a pool's epoch changes (the store lost
// its state and someone configured it again), when the ledger no longer
// knows a pool (wiped store) and when discovered capacity changes a spec.
// An engine whose capacity must be discovered from its metrics is left out
// of its pool's spec until the reconciler has scraped it (fleet
// PartialPoolSpec): the pool is configured with the engines that are known,
// and the waiting engine joins when its capacity arrives, which changes the
// spec and re-applies it. A pool with no known engine stays pending and is
// retried every ReapplyInterval. Tenant quotas follow the configured
// engines, so they grow as engines join (never beyond the pool). The check is periodic (Stats per pool) and also kicked
// when an Observe reports ErrUnknownPool.
//
// Reconciliation needs no leader election: Observe is idempotent by
// observation time (older or equal ObservedAt is ignored), so several
// reservers scraping the same engines only repeat each other.

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/audit"
	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// callTimeout bounds one ledger call of the applier or sweeper.
const callTimeout = 10 * time.Second

type appliedPool struct {
	spec  ledger.PoolSpec
	epoch ledger.Epoch
}

// fleetState owns the loaded fleet, the reconciler built from it and what
// has been applied to the ledger.
type fleetState struct {
	r     *Reserver
	kickC chan struct{} // buffered 1: re-check now

	// applyMu serialises applyAll (startup, reload, the loop).
	applyMu sync.Mutex

	// mu guards every field below.
	mu         sync.Mutex
	fleet      *fleet.Fleet
	rec        *telemetry.Reconciler // nil when no engine is scraped
	discovered map[telemetry.EngineKey]int64
	applied    map[ledger.PoolID]appliedPool
	pending    map[ledger.PoolID]string // pool -> why it is not configured
	// waiting lists, per applied pool, the engines its applied spec leaves
	// out because their capacity is unknown.
	waiting     map[ledger.PoolID][]fleet.WaitingEngine
	lastAttempt map[telemetry.EngineKey]time.Time
}

func newFleetState(r *Reserver, fl *fleet.Fleet) (*fleetState, error) {
	fs := &fleetState{
		r: r, kickC: make(chan struct{}, 1), fleet: fl,
		discovered: map[telemetry.EngineKey]int64{}, applied: map[ledger.PoolID]appliedPool{},
		pending: map[ledger.PoolID]string{}, lastAttempt: map[telemetry.EngineKey]time.Time{},
		waiting: map[ledger.PoolID][]fleet.WaitingEngine{},
	}
	rec, err := fs.newReconciler(fl)
	if err != nil {
		return nil, err
	}
	fs.rec = rec
	for _, p := range fl.Pools {
		fs.pending[p.Name] = "not configured yet"
	}
	return fs, nil
}

func (fs *fleetState) newReconciler(fl *fleet.Fleet) (*telemetry.Reconciler, error) {
	targets := fl.Targets()
	if len(targets) == 0 {
		return nil, nil
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
	res, err := o.fs.r.ledger.Observe(ctx, obs)
	unknownPool, unknownEngine := errors.Is(err, ledger.ErrUnknownPool), errors.Is(err, ledger.ErrUnknownEngine)
	if !unknownPool && !unknownEngine {
		return res, err
	}
	o.fs.mu.Lock()
	ap, applied := o.fs.applied[obs.Pool]
	o.fs.mu.Unlock()
	if unknownPool && !applied {
		return ledger.Observed{}, nil
	}
	if unknownEngine && applied && !slices.ContainsFunc(ap.spec.Engines, func(e ledger.EngineSpec) bool { return e.ID == obs.Engine }) {
		return ledger.Observed{}, nil
	}
	o.fs.kick()
	return res, err
}

func (fs *fleetState) kick() {
	select {
	case fs.kickC <- struct{}{}:
	default:
	}
}

// startup applies the fleet; when a pool or engine waits for discovered
// capacity it runs one telemetry round and applies again.
func (fs *fleetState) startup(ctx context.Context) {
	fs.applyAll(ctx, true)
	fs.mu.Lock()
	waiting, rec := len(fs.pending) > 0 || len(fs.waiting) > 0, fs.rec
	fs.mu.Unlock()
	if waiting && rec != nil {
		fs.round(ctx, rec)
		fs.applyAll(ctx, false)
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

// round runs one reconciler round, counts its failures and merges the
// capacities it discovered; new capacity for a pending pool kicks the
// applier.
func (fs *fleetState) round(ctx context.Context, rec *telemetry.Reconciler) {
	rec.RunOnce(ctx)
	disc := rec.Discovered()
	fs.mu.Lock()
	defer fs.mu.Unlock()
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
	changed := false
	for k, v := range disc {
		if fs.discovered[k] != v {
			fs.discovered[k] = v
			changed = true
		}
	}
	if changed {
		fs.kick()
	}
}

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
			fs.applyAll(ctx, false)
		case <-fs.kickC:
			fs.applyAll(ctx, false)
		case <-sweepC:
			fs.sweep(ctx)
		}
	}
}

// applyAll configures every pool of the fleet with the engines whose
// capacity is known. Unless force is set, a pool already applied with the
// same spec is configured again only when the ledger reports another epoch
// or does not know it.
func (fs *fleetState) applyAll(ctx context.Context, force bool) {
	fs.applyMu.Lock()
	defer fs.applyMu.Unlock()
	fs.mu.Lock()
	fl, disc := fs.fleet, maps.Clone(fs.discovered)
	fs.mu.Unlock()
	log, l := fs.r.log, fs.r.ledger
	for _, p := range fl.Pools {
		spec, waiting, err := fl.PartialPoolSpec(p.Name, disc)
		if err == nil && len(waiting) > 0 {
			// Keep what another reserver already configured: this
			// reserver's narrower view must not remove engines.
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			st, serr := l.Stats(cctx, p.Name)
			cancel()
			switch {
			case serr == nil:
				spec, waiting = fl.KeepConfigured(p.Name, spec, waiting, st)
			case !errors.Is(serr, ledger.ErrUnknownPool):
				log.Warn("pool check before a partial configure failed; retrying", "pool", p.Name, "err", serr)
				continue
			}
		}
		if err != nil {
			fs.setPending(p.Name, err, "pending")
			continue
		}
		fs.mu.Lock()
		prev, ok := fs.applied[p.Name]
		fs.mu.Unlock()
		if !force && ok && reflect.DeepEqual(prev.spec, spec) {
			fs.setWaiting(p.Name, waiting) // same engines; the reasons may have changed
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			st, err := l.Stats(cctx, p.Name)
			cancel()
			switch {
			case err == nil && st.Epoch == prev.epoch:
				continue
			case err == nil:
				log.Warn("pool has a new ledger epoch; re-applying the fleet", "pool", p.Name, "applied_epoch", prev.epoch, "epoch", st.Epoch)
			case errors.Is(err, ledger.ErrUnknownPool):
				log.Warn("the ledger no longer knows the pool (store wiped?); re-applying the fleet", "pool", p.Name)
			default:
				log.Warn("pool epoch check failed", "pool", p.Name, "err", err)
				continue
			}
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		ep, err := l.Configure(cctx, spec)
		cancel()
		if err != nil {
			fs.setPending(p.Name, err, "error")
			continue
		}
		fs.r.metrics.applies.WithLabelValues(string(p.Name), "ok").Inc()
		fs.mu.Lock()
		fs.applied[p.Name] = appliedPool{spec: spec, epoch: ep}
		delete(fs.pending, p.Name)
		fs.mu.Unlock()
		if !ok || prev.epoch != ep || !reflect.DeepEqual(prev.spec, spec) {
			log.Info("pool configured", "pool", p.Name, "epoch", ep, "engines", len(spec.Engines),
				"waiting_engines", len(waiting), "tenants", len(spec.Tenants))
		}
		fs.setWaiting(p.Name, waiting)
	}
}

// setWaiting records the engines an applied pool's spec leaves out,
// logging when the set changes: a warning naming them while some wait, and
// a note when the last one has joined.
func (fs *fleetState) setWaiting(pool ledger.PoolID, waiting []fleet.WaitingEngine) {
	fs.mu.Lock()
	changed := fleet.UpdateWaiting(fs.waiting, pool, waiting)
	fs.mu.Unlock()
	if changed {
		fleet.LogWaiting(fs.r.log, pool, waiting, "they join when their metrics report one (tenant quotas grow then)")
	}
}

// setPending records why a pool is not configured, logging when the
// reason changes.
func (fs *fleetState) setPending(pool ledger.PoolID, err error, result string) {
	fs.r.metrics.applies.WithLabelValues(string(pool), result).Inc()
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	fs.mu.Lock()
	prev := fs.pending[pool]
	fs.pending[pool] = msg
	fs.mu.Unlock()
	if prev != msg {
		if errors.Is(err, fleet.ErrCapacityUnknown) {
			fs.r.log.Warn("pool not configured yet: waiting for engine capacity from telemetry; retrying", "pool", pool, "why", msg)
		} else {
			fs.r.log.Error("configuring pool failed; retrying", "pool", pool, "err", msg)
		}
	}
}

// replace installs a reloaded fleet and applies it.
func (fs *fleetState) replace(ctx context.Context, fl *fleet.Fleet) {
	fs.mu.Lock()
	old := fs.fleet
	fs.fleet = fl
	if !reflect.DeepEqual(old.Targets(), fl.Targets()) {
		rec, err := fs.newReconciler(fl)
		if err != nil { // the fleet file was validated; keep scraping the old targets
			fs.r.log.Error("reconciler for the reloaded fleet", "err", err)
		} else {
			fs.rec = rec
		}
	}
	keep := map[ledger.PoolID]bool{}
	for _, p := range fl.Pools {
		keep[p.Name] = true
		if _, ok := fs.applied[p.Name]; !ok {
			if _, ok := fs.pending[p.Name]; !ok {
				fs.pending[p.Name] = "not configured yet"
			}
		}
	}
	for _, p := range old.Pools {
		if !keep[p.Name] {
			delete(fs.applied, p.Name)
			delete(fs.pending, p.Name)
			delete(fs.waiting, p.Name)
			fs.r.log.Warn("pool removed from the fleet file; the ledger keeps its state and leases", "pool", p.Name)
		}
	}
	fs.mu.Unlock()
	fs.applyAll(ctx, true)
}

// sweep sweeps every applied pool once.
func (fs *fleetState) sweep(ctx context.Context) {
	fs.mu.Lock()
	pools := make([]ledger.PoolID, 0, len(fs.applied))
	for p := range fs.applied {
		pools = append(pools, p)
	}
	fs.mu.Unlock()
	for _, p := range pools {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		sw, err := fs.r.ledger.Sweep(cctx, p, 0)
		cancel()
		if err != nil {
			if errors.Is(err, ledger.ErrUnknownPool) {
				fs.kick()
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
func (fs *fleetState) pendingPools() map[ledger.PoolID]string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return maps.Clone(fs.pending)
}

// waitingEngines returns, per configured pool, the engines left out of it
// until their capacity is known.
func (fs *fleetState) waitingEngines() map[ledger.PoolID][]fleet.WaitingEngine {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return maps.Clone(fs.waiting)
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
