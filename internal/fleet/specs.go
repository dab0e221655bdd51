package fleet

import (
	"errors"
	"fmt"
	"math"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// ErrCapacityUnknown: an engine has no configured kv_tokens and no capacity
// discovered from its metrics yet.
var ErrCapacityUnknown = errors.New("fleet: engine KV capacity unknown")

// Pool returns the pool named name.
func (f *Fleet) Pool(name ledger.PoolID) (Pool, bool) {
	for _, p := range f.Pools {
		if p.Name == name {
			return p, true
		}
	}
	return Pool{}, false
}

// PoolSpecs returns the ledger configuration of every pool, in file order.
// discovered maps engines to the KV capacity their metrics report
// (telemetry.Reconciler.Discovered); it is used, times the engine's
// headroom, only for engines whose kv_tokens the file omits. Tenants are
// fleet-wide: each appears, with its shares, in every pool it is not
// restricted from. Priorities are copied into each pool. The error names
// every engine whose capacity is unknown (errors.Is ErrCapacityUnknown).
func (f *Fleet) PoolSpecs(discovered map[telemetry.EngineKey]int64) ([]ledger.PoolSpec, error) {
	specs := make([]ledger.PoolSpec, 0, len(f.Pools))
	var errs []error
	for _, p := range f.Pools {
		s, err := f.PoolSpec(p.Name, discovered)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		specs = append(specs, s)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return specs, nil
}

// PoolSpec returns one pool's ledger configuration; see PoolSpecs. It is
// all or nothing: while any engine's capacity is unknown it returns an
// error naming every such engine (errors.Is ErrCapacityUnknown) and no
// spec. PartialPoolSpec configures the engines that are known instead.
func (f *Fleet) PoolSpec(name ledger.PoolID, discovered map[telemetry.EngineKey]int64) (ledger.PoolSpec, error) {
	spec, waiting, err := f.poolSpec(name, discovered)
	if err != nil {
		return ledger.PoolSpec{}, err
	}
	if len(waiting) > 0 {
		return ledger.PoolSpec{}, waitingErr(waiting)
	}
	return spec, nil
}

// WaitingEngine is an engine a partial pool configuration leaves out
// because its capacity is not known yet.
type WaitingEngine struct {
	ID ledger.EngineID
	// Err names the engine and says why (no capacity reported yet, or the
	// discovered capacity times headroom is under one token); it matches
	// ErrCapacityUnknown.
	Err error
}

// PartialPoolSpec returns one pool's ledger configuration with only the
// engines whose capacity is known — configured kv_tokens, or discovered
// from their metrics — and, in file order, the engines it left out. One
// engine whose metrics are not up yet then does not keep the whole pool
// unconfigured; configure the pool again once it reports (the spec then
// includes it: Configure is idempotent and keeps leases).
//
// A pool with no known engine is not configured: the error names every
// engine and matches ErrCapacityUnknown, and waiting lists them too. An
// unknown pool or an invalid spec is an error as in PoolSpec.
//
// Tenant quotas are kv_share (and slot_share) of the configured engines'
// capacity, so a tenant's quota grows when a waiting engine is added. That
// is safe — a quota never exceeds the capacity actually configured, and
// each engine is still limited by its own capacity — but a tenant may get
// less than its share of the whole pool until every engine has reported.
func (f *Fleet) PartialPoolSpec(name ledger.PoolID, discovered map[telemetry.EngineKey]int64) (spec ledger.PoolSpec, waiting []WaitingEngine, err error) {
	return f.poolSpec(name, discovered)
}

// poolSpec builds the pool's spec from the engines whose capacity is known
// and lists the others. With no engine known it returns the waiting
// engines' errors; otherwise the spec is valid.
func (f *Fleet) poolSpec(name ledger.PoolID, discovered map[telemetry.EngineKey]int64) (ledger.PoolSpec, []WaitingEngine, error) {
	p, ok := f.Pool(name)
	if !ok {
		return ledger.PoolSpec{}, nil, fmt.Errorf("fleet: pool %q is not in the fleet file", name)
	}
	spec := ledger.PoolSpec{Name: p.Name, RetryAfter: p.RetryAfter, Reserve: p.Reserve, GrowthHeadroom: p.GrowthHeadroom,
		Breaker: p.Breaker}
	var waiting []WaitingEngine
	for _, e := range p.Engines {
		kv := e.KVTokens
		if e.KVFromMetrics {
			total := discovered[telemetry.EngineKey{Pool: p.Name, Engine: e.ID}]
			if total <= 0 {
				waiting = append(waiting, WaitingEngine{ID: e.ID, Err: fmt.Errorf("%w: pool %s engine %s: kv_tokens is not configured and its %s metrics at %s have not reported a capacity yet",
					ErrCapacityUnknown, p.Name, e.ID, e.Format, e.MetricsURL)})
				continue
			}
			kv = min(int64(math.Floor(float64(total)*e.Headroom)), ledger.MaxAmount)
			if kv < 1 {
				waiting = append(waiting, WaitingEngine{ID: e.ID, Err: fmt.Errorf("%w: pool %s engine %s: discovered capacity %d × headroom %v is less than one token",
					ErrCapacityUnknown, p.Name, e.ID, total, e.Headroom)})
				continue
			}
		}
		spec.Engines = append(spec.Engines, ledger.EngineSpec{
			ID: e.ID, URL: e.URL, KVTokens: kv, Slots: e.Slots,
			StaleAfter: e.StaleAfter, StalePolicy: e.StalePolicy,
		})
	}
	if len(spec.Engines) == 0 && len(waiting) > 0 {
		return ledger.PoolSpec{}, waiting, waitingErr(waiting)
	}
	for _, t := range f.Tenants {
		if t.InPool(p.Name) {
			ts := ledger.TenantSpec{Name: t.Name, KVShare: t.KVShare, SlotShare: t.SlotShare}
			ts.TokensPerMinute, ts.RequestsPerMinute = t.TokensPerMinute, t.RequestsPerMinute
			spec.Tenants = append(spec.Tenants, ts)
		}
	}
	spec.Priorities = append([]ledger.PrioritySpec(nil), f.Priorities...)
	if err := ledger.ValidatePoolSpec(spec); err != nil {
		return ledger.PoolSpec{}, waiting, fmt.Errorf("fleet: pool %s: %w", p.Name, err)
	}
	return spec, waiting, nil
}

// waitingErr joins the waiting engines' errors.
func waitingErr(waiting []WaitingEngine) error {
	errs := make([]error, len(waiting))
	for i, w := range waiting {
		errs[i] = w.Err
	}
	return errors.Join(errs...)
}

// Targets returns the engines the reconciler scrapes: every engine whose
// stale_after is not 0, in file order.
func (f *Fleet) Targets() []telemetry.Target {
	var out []telemetry.Target
	for _, p := range f.Pools {
		for _, e := range p.Engines {
			if e.StaleAfter == 0 {
				continue
			}
			out = append(out, telemetry.Target{
				Pool: p.Name, Engine: e.ID, MetricsURL: e.MetricsURL, Format: e.Format,
				StaleAfter: e.StaleAfter, Policy: e.StalePolicy,
			})
		}
	}
	return out
}

// KeepConfigured adds to a partial spec the waiting engines the ledger
// already has configured (not removed, with a capacity), with the ledger's
// engine spec, and returns the spec and the engines still waiting. A
// process that cannot scrape an engine yet therefore never removes it from
// a pool that another reserver or router sharing the store has configured.
// Engines stay in fleet file order. st is the pool's Stats.
func (f *Fleet) KeepConfigured(pool ledger.PoolID, spec ledger.PoolSpec, waiting []WaitingEngine,
	st ledger.PoolStats) (ledger.PoolSpec, []WaitingEngine) {
	inLedger := map[ledger.EngineID]ledger.EngineSpec{}
	for _, e := range st.Engines {
		if !e.Removed && e.Spec.KVTokens > 0 {
			inLedger[e.Spec.ID] = e.Spec
		}
	}
	byID := map[ledger.EngineID]ledger.EngineSpec{}
	for _, e := range spec.Engines {
		byID[e.ID] = e
	}
	var still []WaitingEngine
	for _, w := range waiting {
		if e, ok := inLedger[w.ID]; ok {
			byID[w.ID] = e
		} else {
			still = append(still, w)
		}
	}
	if len(still) == len(waiting) {
		return spec, waiting
	}
	p, _ := f.Pool(pool)
	spec.Engines = spec.Engines[:0:0]
	for _, e := range p.Engines {
		if es, ok := byID[e.ID]; ok {
			spec.Engines = append(spec.Engines, es)
		}
	}
	return spec, still
}
