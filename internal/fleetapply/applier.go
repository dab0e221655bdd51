package fleetapply

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// CallTimeout bounds one ledger call of the applier (Stats, Configure).
const CallTimeout = 5 * time.Second

// Results passed to Config.Counted.
const (
	ResultOK      = "ok"      // the pool was configured
	ResultPending = "pending" // no engine capacity known yet
	ResultError   = "error"   // Configure failed
)

// ErrAwaitingOwner: this principal may not configure the ledger and the
// ledger does not have the pool (or none of its fleet engines) yet.
var ErrAwaitingOwner = errors.New("fleetapply: this router may not configure the ledger (the reserver owns configuration) and the ledger does not have the pool or any of its fleet engines yet")

// Config configures an Applier. Fleet and Ledger are required; the rest
// is optional.
type Config struct {
	Fleet  *fleet.Fleet
	Ledger ledger.Ledger
	Log    *slog.Logger // default: discard
	// Discover, when set, is the pulled discovery source: called at the
	// start of each pool's round with the capacities known so far, it
	// returns newly discovered ones (it may ask engines, and do other
	// per-round work). A pushed source calls Learn instead.
	Discover DiscoverFunc
	// MayNotConfigure reports whether a Configure error means this
	// principal may not configure the ledger, so pools are adopted. Nil:
	// never (every Configure error is an error).
	MayNotConfigure func(error) bool
	// Epoch returns the pool's epoch as its holder session saw it, or
	// ledger.NoEpoch. Nil: an unchanged pool is checked with Stats, which
	// also re-applies a pool the ledger no longer knows.
	Epoch func(ledger.PoolID) ledger.Epoch
	// Publish, when set, receives every applied spec after each change.
	Publish func([]ledger.PoolSpec)
	// Counted, when set, counts each Configure attempt by result.
	Counted func(pool ledger.PoolID, result string)
	// WaitingNote ends the log line naming waiting engines: when they join.
	WaitingNote string

	// Loop settings (Start): Recheck is the pause after a round that
	// succeeded (default 1s); BackoffMin/BackoffMax bound the pause after
	// a failed one (default 100ms/5s); after ReadyTimeout of pools still
	// pending one error is logged. Clock defaults to the real
	// clock.
	Recheck, BackoffMin, BackoffMax, ReadyTimeout time.Duration
	Clock                                         clockwork.Clock
}

// DiscoverFunc is a pulled discovery source: given the fleet, a pool and
// the capacities known so far, it returns newly discovered ones.
type DiscoverFunc func(ctx context.Context, fl *fleet.Fleet, pool ledger.PoolID, known map[telemetry.EngineKey]int64) map[telemetry.EngineKey]int64

type appliedPool struct {
	spec  ledger.PoolSpec
	epoch ledger.Epoch
	// want is the spec this applier would configure (spec itself unless
	// adopted).
	want ledger.PoolSpec
	// adopted: the pool is the ledger's configuration, read because
	// Configure was refused; missing counts the fleet engines of the pool
	// the ledger did not have.
	adopted bool
	missing int
}

// Applier owns the ledger configuration of a fleet's pools: what it
// applied, what is pending and which engines wait for their capacity.
type Applier struct {
	cfg Config
	log *slog.Logger

	kickC chan struct{} // cap 1: run a round now
	// forceNext makes the next loop round configure every pool.
	forceNext atomic.Bool
	// denied: the ledger refused Configure (MayNotConfigure), so pools are
	// adopted. ownerLogged: that was logged.
	denied, ownerLogged atomic.Bool
	stopOnce            sync.Once
	stopC               chan struct{} // closed by Stop
	doneC               chan struct{} // closed when the loop returns (or by Stop without Start)
	started             atomic.Bool
	// ctx is cancelled by Stop, aborting loop calls in flight.
	ctx    context.Context
	cancel context.CancelFunc

	// applyMu serialises rounds (ApplyPool, ApplyAll, Replace).
	applyMu sync.Mutex
	// lastErr is each pool's last logged round error; guarded by applyMu.
	lastErr map[ledger.PoolID]string

	// mu guards the fields below.
	mu         sync.Mutex
	fleet      *fleet.Fleet
	discovered map[telemetry.EngineKey]int64
	applied    map[ledger.PoolID]appliedPool
	waiting    map[ledger.PoolID][]fleet.WaitingEngine // of applied pools
	pending    map[ledger.PoolID]string                // pool -> why it is not configured
}

// New returns an Applier with every pool pending; it calls the ledger only
// in rounds.
func New(cfg Config) *Applier {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Recheck <= 0 {
		cfg.Recheck = time.Second
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = 100 * time.Millisecond
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 5 * time.Second
	}
	a := &Applier{
		cfg: cfg, log: cfg.Log, fleet: cfg.Fleet,
		kickC: make(chan struct{}, 1), stopC: make(chan struct{}), doneC: make(chan struct{}),
		lastErr:    map[ledger.PoolID]string{},
		discovered: map[telemetry.EngineKey]int64{}, applied: map[ledger.PoolID]appliedPool{},
		waiting: map[ledger.PoolID][]fleet.WaitingEngine{}, pending: map[ledger.PoolID]string{},
	}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	for _, p := range cfg.Fleet.Pools {
		a.pending[p.Name] = "not configured yet"
	}
	return a
}

// Fleet is the fleet being applied (Replace changes it).
func (a *Applier) Fleet() *fleet.Fleet {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fleet
}

// Learn merges pushed discovered capacities and reports whether any
// changed (the caller then kicks a round).
func (a *Applier) Learn(disc map[telemetry.EngineKey]int64) (changed bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, v := range disc {
		if a.discovered[k] != v {
			a.discovered[k] = v
			changed = true
		}
	}
	return changed
}

// Applied returns the spec last applied to pool.
func (a *Applier) Applied(pool ledger.PoolID) (ledger.PoolSpec, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ap, ok := a.applied[pool]
	return ap.spec, ok
}

// AppliedPools lists the applied pools, sorted.
func (a *Applier) AppliedPools() []ledger.PoolID {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Sorted(maps.Keys(a.applied))
}

// Pending returns the pools not configured, with why.
func (a *Applier) Pending() map[ledger.PoolID]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.pending)
}

// Waiting returns, per applied pool, the engines left out of it.
func (a *Applier) Waiting() map[ledger.PoolID][]fleet.WaitingEngine {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.waiting)
}

// Configured reports whether every pool has been applied.
func (a *Applier) Configured() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pending) == 0
}

// Describe lists pending pools and waiting engines, for /readyz.
func (a *Applier) Describe() string {
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

// Replace installs a reloaded fleet: new pools become pending, pools no
// longer in it are forgotten (the ledger keeps their state and leases).
// The caller then runs ApplyAll(ctx, true).
func (a *Applier) Replace(fl *fleet.Fleet) {
	a.applyMu.Lock()
	defer a.applyMu.Unlock()
	a.mu.Lock()
	old := a.fleet
	a.fleet = fl
	keep := map[ledger.PoolID]bool{}
	for _, p := range fl.Pools {
		keep[p.Name] = true
		if _, ok := a.applied[p.Name]; !ok {
			if _, ok := a.pending[p.Name]; !ok {
				a.pending[p.Name] = "not configured yet"
			}
		}
	}
	var removed []ledger.PoolID
	for _, p := range old.Pools {
		if !keep[p.Name] {
			delete(a.applied, p.Name)
			delete(a.pending, p.Name)
			delete(a.waiting, p.Name)
			delete(a.lastErr, p.Name)
			removed = append(removed, p.Name)
		}
	}
	a.mu.Unlock()
	for _, p := range removed {
		a.log.Warn("pool removed from the fleet file; the ledger keeps its state and leases", "pool", p)
	}
	if len(removed) > 0 {
		a.publish()
	}
}

// ApplyAll runs one round over every pool of the fleet, logging a pool's
// error when it changes, and reports whether some pool failed.
func (a *Applier) ApplyAll(ctx context.Context, force bool) (failed bool) {
	for _, p := range a.Fleet().Pools {
		err := a.ApplyPool(ctx, p.Name, force)
		msg := ""
		if err != nil {
			failed = true
			msg = strings.ReplaceAll(err.Error(), "\n", "; ")
		}
		a.applyMu.Lock()
		changed := msg != a.lastErr[p.Name] && ctx.Err() == nil
		if changed {
			a.lastErr[p.Name] = msg
		}
		a.applyMu.Unlock()
		if !changed {
			continue
		}
		switch {
		case msg == "":
		case errors.Is(err, ErrAwaitingOwner):
			a.log.Warn("pool not in the ledger yet and this router may not configure it; waiting for the reserver (not ready meanwhile)", "pool", p.Name)
		case errors.Is(err, fleet.ErrCapacityUnknown):
			a.log.Warn("pool not configured: no engine capacity known yet; retrying", "pool", p.Name, "why", msg)
		default:
			a.log.Error("configuring pool in the ledger failed; retrying (not ready meanwhile)", "pool", p.Name, "err", msg)
		}
	}
	return failed
}

// ApplyPool configures pool with the engines known now, unless (force
// unset) the spec and the epoch are those already applied. It returns why
// the pool is not configured. The lease Manager's Reconfigure hook calls
// it with force set.
func (a *Applier) ApplyPool(ctx context.Context, pool ledger.PoolID, force bool) error {
	a.applyMu.Lock()
	defer a.applyMu.Unlock()
	a.discover(ctx, pool)
	a.mu.Lock()
	fl, disc := a.fleet, maps.Clone(a.discovered)
	prev, wasApplied := a.applied[pool]
	a.mu.Unlock()

	spec, waiting, err := fl.PartialPoolSpec(pool, disc)
	if err != nil {
		if a.denied.Load() {
			// No capacity known here, but the owner configures the
			// pool: its capacities are the ledger's anyway.
			if !force && wasApplied && prev.adopted && prev.missing == 0 && !a.sessionEpochChanged(pool, prev) {
				return nil
			}
			return a.adopt(ctx, pool, ledger.PoolSpec{}, wasApplied)
		}
		a.count(pool, ResultPending)
		return a.setPending(pool, err)
	}
	if len(waiting) > 0 {
		cctx, cancel := context.WithTimeout(ctx, CallTimeout)
		st, serr := a.cfg.Ledger.Stats(cctx, pool)
		cancel()
		switch {
		case serr == nil:
			spec, waiting = fl.KeepConfigured(pool, spec, waiting, st)
		case !errors.Is(serr, ledger.ErrUnknownPool):
			return a.setPending(pool, fmt.Errorf("pool %s: reading its configuration before a partial configure: %w", pool, serr))
		}
	}
	if !force && wasApplied && reflect.DeepEqual(prev.want, spec) {
		changed, err := a.epochChanged(ctx, pool, prev)
		if err != nil {
			a.log.Warn("pool epoch check failed", "pool", pool, "err", err)
			return nil
		}
		switch {
		case changed:
		case !prev.adopted:
			a.setWaiting(pool, waiting)
			return nil
		case prev.missing == 0:
			return nil
		default:
			// Some fleet engines are not in the ledger: see whether the
			// owner configured them since.
			return a.adopt(ctx, pool, spec, wasApplied)
		}
	} else if wasApplied {
		a.sessionEpochChanged(pool, prev) // logs a new epoch
	}
	cctx, cancel := context.WithTimeout(ctx, CallTimeout)
	ep, err := a.cfg.Ledger.Configure(cctx, spec)
	cancel()
	if err != nil && a.cfg.MayNotConfigure != nil && a.cfg.MayNotConfigure(err) {
		a.denied.Store(true)
		return a.adopt(ctx, pool, spec, wasApplied)
	}
	if err != nil {
		a.count(pool, ResultError)
		return a.setPending(pool, fmt.Errorf("configure pool %s in the ledger: %w", pool, err))
	}
	a.denied.Store(false)
	a.count(pool, ResultOK)
	a.mu.Lock()
	a.applied[pool] = appliedPool{spec: spec, epoch: ep, want: spec}
	delete(a.pending, pool)
	a.mu.Unlock()
	a.publish()
	if !wasApplied || prev.epoch != ep || !reflect.DeepEqual(prev.spec, spec) {
		a.log.Info("pool configured", "pool", pool, "epoch", ep, "engines", len(spec.Engines),
			"waiting_engines", len(waiting), "tenants", len(spec.Tenants))
	}
	a.setWaiting(pool, waiting)
	return nil
}

// epochChanged reports whether the ledger has another epoch for an applied
// pool: from Config.Epoch, else from Stats (a pool the ledger no longer
// knows counts as changed). An error means the check itself failed.
func (a *Applier) epochChanged(ctx context.Context, pool ledger.PoolID, prev appliedPool) (bool, error) {
	if a.cfg.Epoch != nil {
		return a.sessionEpochChanged(pool, prev), nil
	}
	cctx, cancel := context.WithTimeout(ctx, CallTimeout)
	st, err := a.cfg.Ledger.Stats(cctx, pool)
	cancel()
	switch {
	case err == nil && st.Epoch == prev.epoch:
		return false, nil
	case err == nil:
		a.log.Warn("the ledger has a new epoch for the pool; re-applying the fleet", "pool", pool, "applied_epoch", prev.epoch, "epoch", st.Epoch)
		return true, nil
	case errors.Is(err, ledger.ErrUnknownPool):
		a.log.Warn("the ledger no longer knows the pool (store wiped?); re-applying the fleet", "pool", pool)
		return true, nil
	default:
		return false, err
	}
}

// sessionEpochChanged reports (and logs) whether Config.Epoch shows
// another epoch than the one applied; false without Config.Epoch.
func (a *Applier) sessionEpochChanged(pool ledger.PoolID, prev appliedPool) bool {
	if a.cfg.Epoch == nil {
		return false
	}
	seen := a.cfg.Epoch(pool)
	if seen == ledger.NoEpoch || seen == prev.epoch {
		return false
	}
	a.log.Warn("the ledger has a new epoch for the pool; re-applying the fleet", "pool", pool, "applied_epoch", prev.epoch, "epoch", seen)
	return true
}

// discover merges what the pulled discovery source finds for pool.
func (a *Applier) discover(ctx context.Context, pool ledger.PoolID) {
	if a.cfg.Discover == nil {
		return
	}
	a.mu.Lock()
	fl, known := a.fleet, maps.Clone(a.discovered)
	a.mu.Unlock()
	a.Learn(a.cfg.Discover(ctx, fl, pool, known))
}

func (a *Applier) count(pool ledger.PoolID, result string) {
	if a.cfg.Counted != nil {
		a.cfg.Counted(pool, result)
	}
}

// publish hands every applied spec to Config.Publish.
func (a *Applier) publish() {
	if a.cfg.Publish == nil {
		return
	}
	a.mu.Lock()
	specs := make([]ledger.PoolSpec, 0, len(a.applied))
	for _, p := range slices.Sorted(maps.Keys(a.applied)) {
		specs = append(specs, a.applied[p].spec)
	}
	a.mu.Unlock()
	a.cfg.Publish(specs)
}

// setPending records why pool is not configured and returns it. An
// applied pool keeps its spec: the ledger still has it unless it says
// otherwise (a new epoch or ErrUnknownPool starts a round).
func (a *Applier) setPending(pool ledger.PoolID, err error) error {
	a.mu.Lock()
	if _, ok := a.applied[pool]; !ok {
		a.pending[pool] = strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	a.mu.Unlock()
	return err
}

// setWaiting records the engines an applied pool's spec leaves out,
// logging when the set changes.
func (a *Applier) setWaiting(pool ledger.PoolID, waiting []fleet.WaitingEngine) {
	a.mu.Lock()
	changed := fleet.UpdateWaiting(a.waiting, pool, waiting)
	a.mu.Unlock()
	if changed {
		fleet.LogWaiting(a.log, pool, waiting, a.cfg.WaitingNote)
	}
}
