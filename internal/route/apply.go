package route

// The fleet applier (ledger admission) keeps the ledger configured with
// this router's fleet file, so that a router can start and keep serving on
// its own, without waiting for the ledger or for every engine.
//
// Each pool's spec is fleet.PartialPoolSpec: the engines whose capacity is
// configured or was discovered from their metrics. Engines still waiting
// are scraped again every applyRecheck and join (the pool is configured
// again) once they report. A waiting engine the ledger already has
// configured (a reserver or another router discovered it) is kept, with the
// ledger's capacity, so a narrower view never removes it. A pool with no
// engine known here is pending: not configured by this router.
//
// A pool's candidates are exactly the engines of the spec this router last
// applied successfully, published after Configure returned, so every
// candidate is configured in the ledger and a waiting engine never is one.
// A grant is always on a configured engine (the ledger refuses unknown
// candidates), so the router never dispatches to one the ledger does not
// have; an Acquire refused with ErrUnknownEngine or ErrUnknownPool (the
// ledger changed under the router) forces a round that configures again.
//
// Start does not wait for the ledger: a failed round (the ledger briefly
// unreachable) is retried with a jittered exponential backoff while the
// router serves, not ready. Re-applying: a pool whose holder session
// reports another epoch than the one applied (the store restarted, failed
// over or was configured by someone else) is configured again, and a pool
// the ledger no longer knows (wiped store) is configured again from the
// lease Manager's Reconfigure hook (applyPool). Configure is idempotent and
// keeps leases.
//
// A router may not be allowed to configure the ledger: through a reserver
// (--ledger grpc://) only the shared and admin principals may call
// Configure, and a router with its own token or certificate identity is
// refused with PermissionDenied. The reserver then owns the configuration
// and the router adopts each pool as the ledger has it (adopt): its
// candidates are the engines the ledger has configured that the fleet file
// also lists for the pool, with the ledger's capacity. A pool the ledger
// does not have yet stays pending (not ready) and is retried with the
// backoff until the reserver configures it. Adopted pools are re-read on
// the same triggers (a new epoch, a refused candidate, a wiped store) and,
// while some of the fleet's engines are missing from the ledger, every
// round.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/remote"
	"github.com/leasehold/leasehold/internal/telemetry"
)

const (
	// applyRecheck is the pause between rounds when the last one
	// succeeded: waiting engines are scraped and epochs compared.
	applyRecheck = time.Second
	// applyBackoffMin and applyBackoffMax bound the pause after a failed
	// round, doubling per failure, jittered ±20%.
	applyBackoffMin = 100 * time.Millisecond
	applyBackoffMax = 5 * time.Second
	// applyCallTimeout bounds one ledger call of the applier.
	applyCallTimeout = 5 * time.Second
	// applyScrapeTimeout bounds one capacity scrape of a waiting engine.
	applyScrapeTimeout = 2 * time.Second
)

// ErrPoolNotConfigured: this router has not configured the pool in the
// ledger yet (no engine capacity known, or the ledger not reachable).
var ErrPoolNotConfigured = errors.New("route: pool not configured in the ledger yet")

// errAwaitingReserver: this router may not configure the ledger and the
// ledger does not have the pool (or none of its fleet engines) yet.
var errAwaitingReserver = errors.New("this router may not configure the ledger (the reserver owns configuration) and the ledger does not have the pool or any of its fleet engines yet")

type appliedPool struct {
	spec  ledger.PoolSpec
	epoch ledger.Epoch
	// want is the spec this router would configure (spec itself unless
	// adopted).
	want ledger.PoolSpec
	// adopted: the pool is the ledger's configuration, read because
	// Configure was refused; missing counts the fleet engines of the pool
	// the ledger did not have.
	adopted bool
	missing int
}

// applier owns the ledger configuration of the fleet's pools and the
// candidate engines derived from it. Start it with start, stop it with
// stop; applyPool is also called by the lease Manager's Reconfigure hook.
type applier struct {
	fleet   *fleet.Fleet
	ledger  ledger.Ledger
	scraper telemetry.Scraper
	// lens, when set (before start), learns the pools' context lengths
	// from their engines, asked in each round before the pool is
	// configured.
	lens *contextLens
	log  *slog.Logger
	// readyTimeout is how long the pools may stay unconfigured before an
	// error is logged (once); the applier keeps retrying.
	readyTimeout time.Duration
	clock        clockwork.Clock
	// sessions is the lease Manager whose holder sessions report each
	// pool's epoch; set once it exists (the Reconfigure hook may run
	// before).
	sessions atomic.Pointer[lease.Manager]

	kickC chan struct{} // cap 1: run a round now
	// forceNext makes the next round configure every pool even if its
	// spec and epoch are unchanged (the ledger refused a candidate).
	forceNext atomic.Bool
	// denied: the ledger refused Configure (PermissionDenied), so pools
	// are adopted as the ledger has them. ownerLogged: that was logged.
	denied, ownerLogged atomic.Bool
	stopC               chan struct{} // closed by stop
	doneC               chan struct{} // closed when the loop returns
	// ctx is cancelled by stop, aborting calls in flight.
	ctx    context.Context
	cancel context.CancelFunc

	// cands is each applied pool's candidates with their configured
	// capacity; replaced whole (copy on write), read lock-free.
	cands atomic.Pointer[map[ledger.PoolID][]engineView]

	// applyMu serialises applyPool (the loop and the Reconfigure hook).
	applyMu sync.Mutex

	// mu guards the fields below.
	mu         sync.Mutex
	discovered map[telemetry.EngineKey]int64
	applied    map[ledger.PoolID]appliedPool
	waiting    map[ledger.PoolID][]fleet.WaitingEngine // of applied pools
	pending    map[ledger.PoolID]string                // pool -> why it is not configured
}

func newApplier(f *fleet.Fleet, l ledger.Ledger, scraper telemetry.Scraper, readyTimeout time.Duration, clock clockwork.Clock, log *slog.Logger) *applier {
	a := &applier{
		fleet: f, ledger: l, scraper: scraper, log: log, readyTimeout: readyTimeout, clock: clock,
		kickC: make(chan struct{}, 1), stopC: make(chan struct{}), doneC: make(chan struct{}),
		discovered: map[telemetry.EngineKey]int64{}, applied: map[ledger.PoolID]appliedPool{},
		waiting: map[ledger.PoolID][]fleet.WaitingEngine{}, pending: map[ledger.PoolID]string{},
	}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	empty := map[ledger.PoolID][]engineView{}
	a.cands.Store(&empty)
	for _, p := range f.Pools {
		a.pending[p.Name] = "not configured yet"
	}
	return a
}

// start runs the loop with m's holder sessions as the epoch source.
func (a *applier) start(m *lease.Manager) {
	a.sessions.Store(m)
	go a.loop()
}

// sessionEpoch is pool's epoch as its holder session last saw it, or
// NoEpoch.
func (a *applier) sessionEpoch(pool ledger.PoolID) ledger.Epoch {
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

// stop ends the loop and waits for it; idempotent.
func (a *applier) stop() {
	select {
	case <-a.stopC:
	default:
		close(a.stopC)
	}
	a.cancel()
	<-a.doneC
}

// reapply asks for a round that configures every pool again: the ledger
// refused a candidate or the pool, so its configuration changed under the
// router without a new epoch.
func (a *applier) reapply() {
	a.forceNext.Store(true)
	a.kick()
}

func (a *applier) kick() {
	select {
	case a.kickC <- struct{}{}:
	default:
	}
}

// candidates returns pool's candidate engines (nil while not applied).
// The slice is shared: copy before changing it.
func (a *applier) candidates(pool ledger.PoolID) []engineView { return (*a.cands.Load())[pool] }

// configured reports whether every pool has been applied.
func (a *applier) configured() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pending) == 0
}

// describe lists pending pools and waiting engines, for /readyz.
func (a *applier) describe() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var b strings.Builder
	for _, p := range slices.Sorted(maps.Keys(a.pending)) {
		fmt.Fprintf(&b, "pool %s not configured: %s\n", p, a.pending[p])
	}
	for _, p := range slices.Sorted(maps.Keys(a.waiting)) {
		for _, w := range a.waiting[p] {
			fmt.Fprintf(&b, "pool %s engine %s waiting (not a candidate): %s\n", p, w.ID, w.Err)
		}
	}
	return b.String()
}

func (a *applier) loop() {
	defer close(a.doneC)
	failures := 0
	lastErr := map[ledger.PoolID]string{}
	warnAt := a.clock.Now().Add(a.readyTimeout)
	for {
		failed, force := false, a.forceNext.Swap(false)
		for _, p := range a.fleet.Pools {
			err := a.applyPool(a.ctx, p.Name, force)
			msg := ""
			if err != nil {
				failed = true
				msg = strings.ReplaceAll(err.Error(), "\n", "; ")
			}
			if msg != lastErr[p.Name] && a.ctx.Err() == nil {
				switch {
				case msg == "":
				case errors.Is(err, errAwaitingReserver):
					a.log.Warn("pool not in the ledger yet and this router may not configure it; waiting for the reserver (not ready meanwhile)", "pool", p.Name)
				case errors.Is(err, fleet.ErrCapacityUnknown):
					a.log.Warn("pool not configured: no engine capacity known yet; retrying", "pool", p.Name, "why", msg)
				default:
					a.log.Error("configuring pool in the ledger failed; retrying (not ready meanwhile)", "pool", p.Name, "err", msg)
				}
				lastErr[p.Name] = msg
			}
		}
		if failed && !warnAt.IsZero() && a.clock.Now().After(warnAt) && !a.configured() {
			a.log.Error("pools still not configured after --ready-timeout; serving unready and retrying", "waited", a.readyTimeout)
			warnAt = time.Time{}
		}
		wait := applyRecheck
		if failed {
			wait = min(applyBackoffMin<<min(failures, 16), applyBackoffMax)
			wait = time.Duration(float64(wait) * (0.8 + 0.4*rand.Float64()))
			failures++
		} else {
			failures = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-a.stopC:
			t.Stop()
			return
		case <-a.kickC:
			t.Stop()
		case <-t.C:
		}
	}
}

// applyPool configures pool with the engines known now, unless (force
// unset) the spec and the epoch are those already applied. It returns why
// the pool is not configured.
func (a *applier) applyPool(ctx context.Context, pool ledger.PoolID, force bool) error {
	a.applyMu.Lock()
	defer a.applyMu.Unlock()
	a.discover(ctx, pool)
	if a.lens != nil {
		a.lens.discover(ctx, pool)
	}
	a.mu.Lock()
	disc := maps.Clone(a.discovered)
	prev, wasApplied := a.applied[pool]
	a.mu.Unlock()

	seen := a.sessionEpoch(pool)
	unchanged := !force && wasApplied && (seen == ledger.NoEpoch || seen == prev.epoch)
	spec, waiting, err := a.fleet.PartialPoolSpec(pool, disc)
	if err != nil {
		if a.denied.Load() {
			// No capacity known here, but the reserver configures the
			// pool: its capacities are the ledger's anyway.
			if unchanged && prev.adopted && prev.missing == 0 {
				return nil
			}
			return a.adopt(ctx, pool, ledger.PoolSpec{}, wasApplied)
		}
		return a.setPending(pool, err)
	}
	if len(waiting) > 0 {
		cctx, cancel := context.WithTimeout(ctx, applyCallTimeout)
		st, serr := a.ledger.Stats(cctx, pool)
		cancel()
		switch {
		case serr == nil:
			spec, waiting = a.fleet.KeepConfigured(pool, spec, waiting, st)
		case !errors.Is(serr, ledger.ErrUnknownPool):
			return a.setPending(pool, fmt.Errorf("pool %s: reading its configuration before a partial configure: %w", pool, serr))
		}
	}
	if unchanged && reflect.DeepEqual(prev.want, spec) {
		if !prev.adopted {
			a.setWaiting(pool, waiting)
			return nil
		}
		if prev.missing == 0 {
			return nil
		}
		// Some fleet engines are not in the ledger: see whether the
		// reserver configured them since.
		return a.adopt(ctx, pool, spec, wasApplied)
	}
	if wasApplied && seen != ledger.NoEpoch && seen != prev.epoch {
		a.log.Warn("the ledger has a new epoch for the pool; re-applying the fleet", "pool", pool, "applied_epoch", prev.epoch, "epoch", seen)
	}
	cctx, cancel := context.WithTimeout(ctx, applyCallTimeout)
	ep, err := a.ledger.Configure(cctx, spec)
	cancel()
	if errors.Is(err, remote.ErrPermissionDenied) {
		a.denied.Store(true)
		return a.adopt(ctx, pool, spec, wasApplied)
	}
	if err != nil {
		return a.setPending(pool, fmt.Errorf("configure pool %s in the ledger: %w", pool, err))
	}
	a.denied.Store(false)
	a.mu.Lock()
	a.applied[pool] = appliedPool{spec: spec, epoch: ep, want: spec}
	delete(a.pending, pool)
	a.mu.Unlock()
	a.publish()
	if !wasApplied || prev.epoch != ep || !reflect.DeepEqual(prev.spec, spec) {
		a.log.Info("pool configured", "pool", pool, "epoch", ep, "engines", len(spec.Engines), "waiting_engines", len(waiting))
	}
	a.setWaiting(pool, waiting)
	return nil
}

// adopt takes pool as the ledger has it, because this router may not
// configure it: the candidates are the engines the ledger has configured
// (not removed) that the fleet file lists for the pool, with the ledger's
// capacity. want is the spec this router would have configured. A pool
// the ledger does not have, or with none of the fleet's engines, is
// pending (errAwaitingReserver) and loses its candidates. Called with
// applyMu held.
func (a *applier) adopt(ctx context.Context, pool ledger.PoolID, want ledger.PoolSpec, wasApplied bool) error {
	cctx, cancel := context.WithTimeout(ctx, applyCallTimeout)
	st, err := a.ledger.Stats(cctx, pool)
	cancel()
	if err != nil && !errors.Is(err, ledger.ErrUnknownPool) {
		return a.setPending(pool, fmt.Errorf("pool %s: this router may not configure the ledger; reading the pool's configuration: %w", pool, err))
	}
	var spec ledger.PoolSpec
	var missing []fleet.WaitingEngine
	if err == nil {
		spec, missing = adoptedSpec(a.fleet, pool, st)
	}
	if len(spec.Engines) == 0 {
		err = fmt.Errorf("pool %s: %w", pool, errAwaitingReserver)
		a.mu.Lock()
		delete(a.applied, pool)
		delete(a.waiting, pool)
		a.pending[pool] = err.Error()
		a.mu.Unlock()
		if wasApplied {
			a.publish()
		}
		return err
	}
	a.mu.Lock()
	prev, had := a.applied[pool]
	a.applied[pool] = appliedPool{spec: spec, epoch: st.Epoch, want: want, adopted: true, missing: len(missing)}
	delete(a.pending, pool)
	if len(missing) == 0 {
		delete(a.waiting, pool)
	} else {
		a.waiting[pool] = missing
	}
	a.mu.Unlock()
	a.publish()
	if !a.ownerLogged.Swap(true) {
		a.log.Info("this router may not configure the ledger: the reserver owns configuration; adopting pools as the ledger has them",
			"pool", pool, "epoch", st.Epoch, "engines", len(spec.Engines), "fleet_engines_not_in_ledger", len(missing))
	} else if !had || prev.epoch != st.Epoch || !reflect.DeepEqual(prev.spec, spec) {
		a.log.Debug("pool adopted from the ledger", "pool", pool, "epoch", st.Epoch, "engines", len(spec.Engines), "fleet_engines_not_in_ledger", len(missing))
	}
	return nil
}

// adoptedSpec is pool's spec as the ledger has it, restricted to the
// engines the fleet file lists for it (in fleet file order), and the fleet
// engines the ledger does not have.
func adoptedSpec(f *fleet.Fleet, pool ledger.PoolID, st ledger.PoolStats) (ledger.PoolSpec, []fleet.WaitingEngine) {
	inLedger := map[ledger.EngineID]ledger.EngineSpec{}
	for _, e := range st.Engines {
		if !e.Removed && e.Spec.KVTokens > 0 {
			inLedger[e.Spec.ID] = e.Spec
		}
	}
	spec := ledger.PoolSpec{Name: pool}
	var missing []fleet.WaitingEngine
	p, _ := f.Pool(pool)
	for _, e := range p.Engines {
		if es, ok := inLedger[e.ID]; ok {
			spec.Engines = append(spec.Engines, es)
		} else {
			missing = append(missing, fleet.WaitingEngine{ID: e.ID,
				Err: fmt.Errorf("engine %s: not configured in the ledger (the reserver owns configuration)", e.ID)})
		}
	}
	return spec, missing
}

// discover scrapes the capacity of pool's engines that must report it and
// have not yet.
func (a *applier) discover(ctx context.Context, pool ledger.PoolID) {
	p, _ := a.fleet.Pool(pool)
	for _, e := range p.Engines {
		key := telemetry.EngineKey{Pool: pool, Engine: e.ID}
		a.mu.Lock()
		_, known := a.discovered[key]
		a.mu.Unlock()
		if !e.KVFromMetrics || known {
			continue
		}
		s, _, err := a.scraper.Scrape(ctx, e.MetricsURL, e.Format)
		if err != nil || !s.Known.Has(telemetry.KnownKVTotal) || s.KVTokensTotal <= 0 {
			continue
		}
		a.mu.Lock()
		a.discovered[key] = s.KVTokensTotal
		a.mu.Unlock()
	}
}

// publish rebuilds the candidates from the applied specs.
func (a *applier) publish() {
	a.mu.Lock()
	specs := make([]ledger.PoolSpec, 0, len(a.applied))
	for _, ap := range a.applied {
		specs = append(specs, ap.spec)
	}
	a.mu.Unlock()
	c := capacities(specs)
	a.cands.Store(&c)
}

// setPending records why pool is not configured and returns it. An
// applied pool keeps its candidates: the ledger still has them unless it
// says otherwise (ErrUnknownEngine/ErrUnknownPool kick a round).
func (a *applier) setPending(pool ledger.PoolID, err error) error {
	a.mu.Lock()
	if _, ok := a.applied[pool]; !ok {
		a.pending[pool] = strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	a.mu.Unlock()
	return err
}

// setWaiting records the engines an applied pool's spec leaves out,
// logging when the set changes.
func (a *applier) setWaiting(pool ledger.PoolID, waiting []fleet.WaitingEngine) {
	a.mu.Lock()
	changed := fleet.UpdateWaiting(a.waiting, pool, waiting)
	a.mu.Unlock()
	if changed {
		fleet.LogWaiting(a.log, pool, waiting, "they are not candidates until their metrics report one")
	}
}
