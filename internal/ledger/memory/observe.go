package memory

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Observe records engine telemetry. An observation whose ObservedAt is not
// after the last applied one's is ignored (compared at full precision, by
// wall clock). An applied one sets the engine's correction to what the
// engine reports beyond what the ledger has reserved on it, and stamps its
// arrival with the ledger clock.
func (l *store) Observe(ctx context.Context, obs ledger.Observation) (ledger.Observed, error) {
	obs.ObservedAt = obs.ObservedAt.Round(0) // drop the monotonic reading
	var r ledger.Observed
	err := l.update(ctx, obs.Pool, ledger.NoHolder, l.opts.SweepBatch, func(o *op) error {
		r.Epoch = o.pool.Epoch
		e, err := o.configuredEngine(obs.Engine)
		if err != nil {
			return err
		}
		if !e.ObservedAt.IsZero() && !obs.ObservedAt.After(e.LastObservation.ObservedAt) {
			return nil
		}
		c := *e
		c.LastObservation = obs
		c.ObservedAt = o.now
		c.CorrectionKV = max(0, obs.KVTokensUsed-e.ReservedKV)
		c.CorrectionSlots = max(0, obs.Running-e.ReservedSlots)
		if !o.now.Before(e.OrphanUntil) {
			c.OrphanKV, c.OrphanSlots, c.OrphanUntil = 0, 0, time.Time{}
		}
		o.insert(tableEngines, &c)
		r.Applied = true
		return nil
	})
	if err != nil {
		return ledger.Observed{}, err
	}
	return r, nil
}
