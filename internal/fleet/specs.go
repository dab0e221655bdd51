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

// PoolSpec returns one pool's ledger configuration; see PoolSpecs.
func (f *Fleet) PoolSpec(name ledger.PoolID, discovered map[telemetry.EngineKey]int64) (ledger.PoolSpec, error) {
	p, ok := f.Pool(name)
	if !ok {
		return ledger.PoolSpec{}, fmt.Errorf("fleet: pool %q is not in the fleet file", name)
	}
	spec := ledger.PoolSpec{Name: p.Name, RetryAfter: p.RetryAfter}
	var errs []error
	for _, e := range p.Engines {
		kv := e.KVTokens
		if e.KVFromMetrics {
			total := discovered[telemetry.EngineKey{Pool: p.Name, Engine: e.ID}]
			if total <= 0 {
				errs = append(errs, fmt.Errorf("%w: pool %s engine %s: kv_tokens is not configured and its %s metrics at %s have not reported a capacity yet",
					ErrCapacityUnknown, p.Name, e.ID, e.Format, e.MetricsURL))
				continue
			}
			kv = min(int64(math.Floor(float64(total)*e.Headroom)), ledger.MaxAmount)
			if kv < 1 {
				errs = append(errs, fmt.Errorf("%w: pool %s engine %s: discovered capacity %d × headroom %v is less than one token",
					ErrCapacityUnknown, p.Name, e.ID, total, e.Headroom))
				continue
			}
		}
		spec.Engines = append(spec.Engines, ledger.EngineSpec{
			ID: e.ID, URL: e.URL, KVTokens: kv, Slots: e.Slots,
			StaleAfter: e.StaleAfter, StalePolicy: e.StalePolicy,
		})
	}
	if len(errs) > 0 {
		return ledger.PoolSpec{}, errors.Join(errs...)
	}
	for _, t := range f.Tenants {
		if t.InPool(p.Name) {
			spec.Tenants = append(spec.Tenants, ledger.TenantSpec{Name: t.Name, KVShare: t.KVShare, SlotShare: t.SlotShare})
		}
	}
	spec.Priorities = append([]ledger.PrioritySpec(nil), f.Priorities...)
	if err := ledger.ValidatePoolSpec(spec); err != nil {
		return ledger.PoolSpec{}, fmt.Errorf("fleet: pool %s: %w", p.Name, err)
	}
	return spec, nil
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
