package memory

import (
	"context"
	"slices"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Configure applies a pool's spec idempotently and returns its epoch. The
// first Configure of a pool in this ledger creates its state: a new epoch
// (the ledger clock in microseconds) and, unless disabled, a recovery
// window. Later calls replace engines, tenants and priorities and keep drain
// flags, breakers, telemetry, leases and counters; an engine or tenant dropped from
// the spec while it has leases stays, marked removed, until they end.
func (l *store) Configure(ctx context.Context, spec ledger.PoolSpec) (epoch ledger.Epoch, err error) {
	l.writes.do(func() { epoch, err = l.configureNow(ctx, spec) })
	return epoch, err
}

// configureNow is Configure's transaction, run by l.writes.
func (l *store) configureNow(ctx context.Context, spec ledger.PoolSpec) (ledger.Epoch, error) {
	if err := ctx.Err(); err != nil {
		return ledger.NoEpoch, err
	}
	txn := l.db.Txn(true)
	defer txn.Abort()
	clock := l.clock.Now()
	o := &op{txn: txn, now: toMillis(clock), orphanHold: l.opts.OrphanHold}
	if row := o.first(tablePools, indexID, spec.Name, kindPool); row != nil {
		o.pool = row.(*poolRow).clone()
		o.sweep(l.opts.SweepBatch)
	} else {
		o.pool = &poolRow{
			Name:     spec.Name,
			Epoch:    ledger.Epoch(max(1, clock.UnixMicro())),
			Counters: newCounters(),
		}
		if l.opts.RecoveryWindow > 0 {
			o.pool.RecoveringUntil = plus(o.now, l.opts.RecoveryWindow)
			o.pool.ObservedSince = ledger.RecoverySince(o.now, l.opts.ConfirmGrace)
		}
	}
	p := o.pool
	p.Priorities = slices.Clone(spec.Priorities)
	p.RetryAfter = spec.RetryAfter
	p.Reserve, p.GrowthHeadroom = spec.Mode(), spec.GrowthHeadroom
	p.Breaker = spec.Breaker
	p.RateWindow = spec.RateWindow
	p.CapacityKV, p.CapacitySlots = 0, 0

	inSpec := map[ledger.EngineID]bool{}
	for _, es := range spec.Engines {
		inSpec[es.ID] = true
		p.CapacityKV += es.KVTokens
		p.CapacitySlots += es.Slots
		row := &engineRow{Pool: p.Name}
		if old := o.engine(es.ID); old != nil {
			c := *old
			row = &c
		}
		row.Spec, row.Removed = es, false
		o.insert(tableEngines, row)
	}
	for _, raw := range o.scan(0, tableEngines, indexID, p.Name, kindEngine) {
		e := raw.(*engineRow)
		c := *e
		o.reconfigure(tableEngines, e, &c, ledger.RowFateOf(inSpec[e.Spec.ID], e.Leases), &c.Removed)
	}

	tenantInSpec := map[ledger.TenantID]bool{}
	for _, ts := range spec.Tenants {
		tenantInSpec[ts.Name] = true
		row := &tenantRow{Pool: p.Name}
		if old := o.tenant(ts.Name); old != nil {
			c := *old
			row = &c
		}
		row.Spec, row.Removed = ts, false
		o.insert(tableTenants, row)
	}
	for _, raw := range o.scan(0, tableTenants, indexID, p.Name, kindTenant) {
		t := raw.(*tenantRow)
		c := *t
		o.reconfigure(tableTenants, t, &c, ledger.RowFateOf(tenantInSpec[t.Spec.Name], t.Leases), &c.Removed)
	}

	o.insert(tablePools, p)
	if o.err != nil {
		return ledger.NoEpoch, o.err
	}
	txn.Commit()
	return p.Epoch, nil
}

// reconfigure applies the configure rule's fate to a row Configure found:
// row is the stored row, cp a copy of it whose removed flag is removed. A
// row in the spec was written above; a removed one is marked (once), a
// dropped one deleted.
func (o *op) reconfigure(table string, row, cp any, fate ledger.RowFate, removed *bool) {
	switch fate {
	case ledger.RowRemoved:
		if !*removed {
			*removed = true
			o.insert(table, cp)
		}
	case ledger.RowDropped:
		o.delete(table, row)
	}
}

// SetDraining drains an engine (no new grants; its leases continue) or
// undrains it. The flag survives Configure.
func (l *store) SetDraining(ctx context.Context, pool ledger.PoolID, engine ledger.EngineID, draining bool) error {
	return l.update(ctx, pool, ledger.NoHolder, l.opts.SweepBatch, func(o *op) error {
		e, err := o.configuredEngine(engine)
		if err != nil {
			return err
		}
		if e.Draining != draining {
			c := *e
			c.Draining = draining
			o.insert(tableEngines, &c)
		}
		return nil
	})
}
