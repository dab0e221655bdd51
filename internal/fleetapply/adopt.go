package fleetapply

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
)

// adopt takes pool as the ledger has it, because this principal may not
// configure it: the engines the ledger has configured (not removed) that
// the fleet file lists for the pool, with the ledger's capacity. want is
// the spec this applier would have configured. A pool the ledger does not
// have, or with none of the fleet's engines, is pending (ErrAwaitingOwner)
// and is no longer applied. Called with applyMu held.
func (a *Applier) adopt(ctx context.Context, pool ledger.PoolID, want ledger.PoolSpec, wasApplied bool) error {
	cctx, cancel := context.WithTimeout(ctx, CallTimeout)
	st, err := a.cfg.Ledger.Stats(cctx, pool)
	cancel()
	if err != nil && !errors.Is(err, ledger.ErrUnknownPool) {
		return a.setPending(pool, fmt.Errorf("pool %s: this router may not configure the ledger; reading the pool's configuration: %w", pool, err))
	}
	var spec ledger.PoolSpec
	var missing []fleet.WaitingEngine
	if err == nil {
		spec, missing = AdoptedSpec(a.Fleet(), pool, st)
	}
	if len(spec.Engines) == 0 {
		err = fmt.Errorf("pool %s: %w", pool, ErrAwaitingOwner)
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

// AdoptedSpec is pool's spec as the ledger has it, restricted to the
// engines the fleet file lists for it (in fleet file order), and the fleet
// engines the ledger does not have (removed, or with no KV capacity).
func AdoptedSpec(f *fleet.Fleet, pool ledger.PoolID, st ledger.PoolStats) (ledger.PoolSpec, []fleet.WaitingEngine) {
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
