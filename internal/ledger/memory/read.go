package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/leasehold/leasehold/internal/ledger"
)

// The read-only calls run on a go-memdb snapshot: they never wait for a
// writer and never sweep, so they show ended leases until a sweep removes
// them.

// Pools lists the configured pools, sorted.
func (l *store) Pools(ctx context.Context) ([]ledger.PoolID, error) {
	var pools []ledger.PoolID
	err := l.view(ctx, func(txn *memdb.Txn, _ time.Time) error {
		it, err := txn.Get(tablePools, indexID)
		if err != nil {
			return fmt.Errorf("scan pools: %w", err)
		}
		for row := it.Next(); row != nil; row = it.Next() {
			if p, ok := row.(*poolRow); ok { // engines and tenants share the table
				pools = append(pools, p.Name)
			}
		}
		return nil
	})
	return pools, err
}

// List returns the outstanding leases of one pool that f matches (ended
// ones not yet swept included), ordered by fence, at most f.Limit of them.
// A holder's leases come from the holder index (in request id order, sorted
// here); any other filter scans the pool in fence order.
func (l *store) List(ctx context.Context, f ledger.Filter) ([]ledger.Lease, error) {
	var out []ledger.Lease
	err := l.view(ctx, func(txn *memdb.Txn, _ time.Time) error {
		index, args := indexID, []any{f.Pool}
		if f.Holder != "" {
			index, args = indexRequest, []any{f.Pool, f.Holder}
		}
		it, err := txn.Get(tableLeases, index, args...)
		if err != nil {
			return fmt.Errorf("scan leases by %s: %w", index, err)
		}
		for row := it.Next(); row != nil; row = it.Next() {
			if f.Holder == "" && f.Limit > 0 && len(out) == f.Limit {
				break
			}
			if ls := row.(*leaseRow).Lease; f.Match(ls) {
				out = append(out, ls)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if f.Holder != "" {
		out = f.Cap(out)
	}
	return out, nil
}

// Stats returns a pool's configuration, totals, live holders and counters.
// Engines and tenants dropped from the spec that still have leases are
// included, marked Removed.
func (l *store) Stats(ctx context.Context, pool ledger.PoolID) (ledger.PoolStats, error) {
	var s ledger.PoolStats
	err := l.view(ctx, func(txn *memdb.Txn, now time.Time) error {
		row, err := txn.First(tablePools, indexID, pool, kindPool)
		if err != nil {
			return fmt.Errorf("read pool: %w", err)
		}
		if row == nil {
			return ledger.ErrUnknownPool
		}
		p := row.(*poolRow)
		s = ledger.PoolStats{
			Pool:            p.Name,
			Epoch:           p.Epoch,
			Now:             now,
			RecoveringUntil: p.recovering(now),
			CapacityKV:      p.CapacityKV,
			CapacitySlots:   p.CapacitySlots,
			Reserve:         p.Reserve,
			GrowthHeadroom:  p.GrowthHeadroom,
			Priorities:      slices.Clone(p.Priorities),
			Counters:        maps.Clone(p.Counters),
		}
		engines, err := txn.Get(tableEngines, indexID, pool, kindEngine)
		if err != nil {
			return fmt.Errorf("scan engines: %w", err)
		}
		for row := engines.Next(); row != nil; row = engines.Next() {
			e := row.(*engineRow)
			s.Engines = append(s.Engines, e.stats(now, p.Breaker))
			s.Leases += e.Leases
		}
		tenants, err := txn.Get(tableTenants, indexID, pool, kindTenant)
		if err != nil {
			return fmt.Errorf("scan tenants: %w", err)
		}
		for row := tenants.Next(); row != nil; row = tenants.Next() {
			t := row.(*tenantRow)
			qKV, qSlots := ledger.TenantQuota(t.Spec, p.CapacityKV, p.CapacitySlots)
			s.Tenants = append(s.Tenants, ledger.TenantStats{
				Spec:          t.Spec,
				QuotaKV:       qKV,
				QuotaSlots:    qSlots,
				ReservedKV:    t.ReservedKV,
				ReservedSlots: t.ReservedSlots,
				Leases:        t.Leases,
				Removed:       t.Removed,
				Rates:         slices.Clone(ledger.PruneRates(t.Rates, now, p.RateWindow)),
			})
		}
		s.LiveHolders, err = liveHolders(txn, pool, now)
		return err
	})
	if err != nil {
		return ledger.PoolStats{}, err
	}
	return s, nil
}

// CheckTotals compares, on one snapshot, each engine's and tenant's
// reserved totals with the sum of the pool's lease rows
// (ledger.TotalsChecker).
func (l *store) CheckTotals(ctx context.Context, pool ledger.PoolID) ([]ledger.TotalsMismatch, error) {
	var out []ledger.TotalsMismatch
	err := l.view(ctx, func(txn *memdb.Txn, _ time.Time) error {
		row, err := txn.First(tablePools, indexID, pool, kindPool)
		if err != nil {
			return fmt.Errorf("read pool: %w", err)
		}
		if row == nil {
			return ledger.ErrUnknownPool
		}
		engines, tenants := map[ledger.EngineID]ledger.Totals{}, map[ledger.TenantID]ledger.Totals{}
		var rows []ledger.Lease
		for _, scan := range []struct {
			table string
			args  []any
			add   func(any)
		}{
			{tableEngines, []any{pool, kindEngine}, func(r any) {
				e := r.(*engineRow)
				engines[e.Spec.ID] = ledger.Totals{KVTokens: e.ReservedKV, Slots: e.ReservedSlots, Leases: e.Leases}
			}},
			{tableTenants, []any{pool, kindTenant}, func(r any) {
				t := r.(*tenantRow)
				tenants[t.Spec.Name] = ledger.Totals{KVTokens: t.ReservedKV, Slots: t.ReservedSlots, Leases: t.Leases}
			}},
			{tableLeases, []any{pool}, func(r any) { rows = append(rows, r.(*leaseRow).Lease) }},
		} {
			it, err := txn.Get(scan.table, indexID, scan.args...)
			if err != nil {
				return fmt.Errorf("scan %s: %w", scan.table, err)
			}
			for r := it.Next(); r != nil; r = it.Next() {
				scan.add(r)
			}
		}
		out = ledger.CompareTotals(pool, engines, tenants, rows)
		return nil
	})
	return out, err
}
