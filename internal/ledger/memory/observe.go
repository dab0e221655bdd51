package memory

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Observe records engine telemetry. An observation whose ObservedAt is not
// after the last applied one's is ignored (compared at full precision, by
// wall clock). An applied one sets the engine's correction to what the
// engine reports beyond what the ledger has reserved on it (during the
// recovery window, all it reports: ledger.CorrectionOf), stamps its
// arrival with the ledger clock and, while the engine may hold
// Unconfirmed leases, confirms those it can (confirm).
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
		c.CorrectionKV, c.CorrectionSlots = ledger.CorrectionOf(obs, e.ReservedKV, e.ReservedSlots, o.now.Before(o.pool.RecoveringUntil))
		if !o.now.Before(e.OrphanUntil) {
			c.OrphanKV, c.OrphanSlots, c.OrphanUntil = 0, 0, time.Time{}
		}
		if c.Unconfirmed {
			c.Unconfirmed = o.confirm(obs, l.opts.ConfirmGrace)
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

// confirm applies an observation of obs.Engine arriving now to the
// engine's Unconfirmed leases (ledger.Confirms): when it shows every lease
// ledger.ExpectedAt now, it confirms those reasserted at least grace ago.
// It scans the pool's leases, which only an engine marked Unconfirmed
// costs, and reports whether any Unconfirmed lease is left.
func (o *op) confirm(obs ledger.Observation, grace time.Duration) bool {
	var expected int64
	var pending []*leaseRow
	for _, row := range o.scan(0, tableLeases, indexID, o.pool.Name) {
		ls := row.(*leaseRow)
		if ls.Engine != obs.Engine {
			continue
		}
		if ledger.ExpectedAt(ls.Lease, o.now, grace) {
			expected += ls.Slots
		}
		if ls.Unconfirmed {
			pending = append(pending, ls)
		}
	}
	if len(pending) == 0 || !ledger.Confirms(obs, expected) {
		return len(pending) > 0
	}
	left := false
	for _, ls := range pending {
		if !ledger.ConfirmedBy(ls.ReassertedAt, o.now, grace) {
			left = true
			continue
		}
		c := *ls
		c.Unconfirmed, c.ReassertedAt = false, time.Time{}
		o.insert(tableLeases, &c)
	}
	return left
}
