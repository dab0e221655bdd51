package capacity

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// calibrationCallers is how many goroutines call at once while a cost is
// measured: enough that the store is busy, so its CPU per call is what it
// is under load (one caller would add an idle wake-up to every call).
const calibrationCallers = 16

// Calibrate measures what one call of each Op costs the store, as probe
// reads its CPU, on a pool shaped like cfg's (PoolSpec), configured on l
// under the name "calibration": n calls of each Op from
// calibrationCallers goroutines, the probe's CPU over them divided by n
// (its engines large enough that no call is refused).
// Reassert and the rare calls (OpOther) are not measured (0).
func Calibrate(ctx context.Context, l ledger.Ledger, probe Probe, cfg Config, n int) (Costs, error) {
	if err := cfg.Validate(); err != nil {
		return Costs{}, err
	}
	if probe == nil || n < calibrationCallers {
		return Costs{}, fmt.Errorf("capacity: calibrate: a probe and n >= %d are required", calibrationCallers)
	}
	spec := cfg.withDefaults().PoolSpec(0)
	spec.Name = "calibration"
	for i := range spec.Engines { // room for every call's lease
		spec.Engines[i].KVTokens, spec.Engines[i].Slots = ledger.MaxAmount, ledger.MaxAmount
	}
	if _, err := l.Configure(ctx, spec); err != nil {
		return Costs{}, fmt.Errorf("calibrate: configure: %w", err)
	}
	holders := make([]ledger.HolderID, calibrationCallers)
	for c := range holders {
		holders[c] = ledger.HolderID(fmt.Sprintf("cal-%d", c))
		if _, err := l.KeepAlive(ctx, spec.Name, holders[c], time.Hour); err != nil {
			return Costs{}, fmt.Errorf("calibrate: keepalive: %w", err)
		}
	}
	per := n / calibrationCallers
	leases := make([][]ledger.Lease, calibrationCallers)
	kv := cfg.PromptKV + cfg.OutputKV
	cands := make([]ledger.EngineID, len(spec.Engines))
	for i, e := range spec.Engines {
		cands[i] = e.ID
	}
	var costs Costs
	measure := func(op Op, call func(c, i int) error) error {
		before, err := probe(ctx)
		if err != nil {
			return err
		}
		var wg sync.WaitGroup
		errs := make([]error, calibrationCallers)
		for c := range calibrationCallers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range per {
					if err := call(c, i); err != nil {
						errs[c] = fmt.Errorf("calibrate %s: %w", op, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		after, err := probe(ctx)
		if err != nil {
			return err
		}
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		costs[op] = (after - before) / time.Duration(per*calibrationCallers)
		return nil
	}
	steps := []struct {
		op   Op
		call func(c, i int) error
	}{
		{OpKeepAlive, func(c, i int) error { _, err := l.KeepAlive(ctx, spec.Name, holders[c], time.Hour); return err }},
		{OpAcquire, func(c, i int) error {
			g, err := l.Acquire(ctx, ledger.AcquireRequest{Pool: spec.Name, Candidates: cands[i%len(cands):], Tenant: "t", Priority: "std",
				KVTokens: kv, Slots: 1, Holder: holders[c], RequestID: ledger.RequestID(fmt.Sprintf("cal-%d-%d", c, i)), TTL: time.Hour})
			leases[c] = append(leases[c], g.Lease)
			return err
		}},
		{OpGrow, func(c, i int) error { _, err := l.Grow(ctx, leases[c][i].Ref(), kv+cfg.OutputKV/2); return err }},
		{OpRenew, func(c, i int) error { _, err := l.Renew(ctx, leases[c][i].Ref(), time.Hour); return err }},
		{OpRelease, func(c, i int) error {
			_, err := l.Release(ctx, leases[c][i].Ref(), ledger.Usage{PromptTokens: cfg.PromptKV, CompletionTokens: cfg.OutputKV, Finished: true})
			return err
		}},
		{OpStats, func(c, i int) error { _, err := l.Stats(ctx, spec.Name); return err }},
		{OpObserve, func(c, i int) error {
			_, err := l.Observe(ctx, ledger.Observation{Pool: spec.Name, Engine: cands[(c+i)%len(cands)], KVTokensUsed: int64(i), ObservedAt: time.Now()})
			return err
		}},
		{OpSweep, func(c, i int) error { _, err := l.Sweep(ctx, spec.Name, 0); return err }},
		{OpConfigure, func(c, i int) error { _, err := l.Configure(ctx, spec); return err }},
	}
	for _, s := range steps {
		if err := measure(s.op, s.call); err != nil {
			return Costs{}, err
		}
	}
	costs[OpReassert] = costs[OpAcquire] // about an acquire's work; rare
	return costs, nil
}
