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
func (l *Ledger) Pools(ctx context.Context) ([]ledger.PoolID, error) {
	var pools []ledger.PoolID
	err := l.view(ctx, func(txn *memdb.Txn, _ time.Time) error {
		it, err := txn.Get(tablePools, indexID)
		if err != nil {
			return fmt.Errorf("memory: scan pools: %w", err)
		}
		for row := it.Next(); row != nil; row = it.Next() {
			pools = append(pools, row.(*poolRow).Name)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	return pools, nil
}

// List returns the outstanding leases f matches (ended ones not yet swept
// included), ordered by pool then fence, at most f.Limit of them. A
// holder's leases come from the holder index; other filters scan each pool
// in fence order.
func (l *Ledger) List(ctx context.Context, f ledger.Filter) ([]ledger.Lease, error) {
	if err := ledger.ValidateFilter(f); err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	var out []ledger.Lease
	err := l.view(ctx, func(txn *memdb.Txn, _ time.Time) error {
		pools := []ledger.PoolID{f.Pool}
		if f.Pool == "" {
			pools = nil
			it, err := txn.Get(tablePools, indexID)
			if err != nil {
				return fmt.Errorf("memory: scan pools: %w", err)
			}
			for row := it.Next(); row != nil; row = it.Next() {
				pools = append(pools, row.(*poolRow).Name)
			}
		}
		for _, pool := range pools {
			// A holder's leases come from its index (in request id order,
			// sorted below); any other filter scans the pool in fence order.
			index, args := indexID, []any{pool}
			if f.Holder != "" {
				index, args = indexRequest, []any{pool, f.Holder}
			}
			it, err := txn.Get(tableLeases, index, args...)
			if err != nil {
				return fmt.Errorf("memory: scan leases by %s: %w", index, err)
			}
			var got []ledger.Lease
			for row := it.Next(); row != nil; row = it.Next() {
				if ls := row.(*leaseRow).Lease; f.Match(ls) {
					got = append(got, ls)
				}
			}
			if f.Holder != "" {
				slices.SortFunc(got, func(a, b ledger.Lease) int {
					if a.Fence.Less(b.Fence) {
						return -1
					}
					return 1
				})
			}
			for _, ls := range got {
				if f.Limit > 0 && len(out) == f.Limit {
					return nil
				}
				out = append(out, ls)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	return out, nil
}

// Stats returns a pool's configuration, totals, live holders and counters.
// Engines and tenants dropped from the spec that still have leases are
// included, marked Removed.
func (l *Ledger) Stats(ctx context.Context, pool ledger.PoolID) (ledger.PoolStats, error) {
	if err := ledger.ValidatePool(pool); err != nil {
		return ledger.PoolStats{}, fmt.Errorf("stats of pool %s: %w", pool, err)
	}
	var s ledger.PoolStats
	err := l.view(ctx, func(txn *memdb.Txn, now time.Time) error {
		row, err := txn.First(tablePools, indexID, pool)
		if err != nil {
			return fmt.Errorf("memory: read pool: %w", err)
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
			Priorities:      slices.Clone(p.Priorities),
			Counters:        maps.Clone(p.Counters),
		}
		engines, err := txn.Get(tableEngines, indexID, pool)
		if err != nil {
			return fmt.Errorf("memory: scan engines: %w", err)
		}
		for row := engines.Next(); row != nil; row = engines.Next() {
			e := row.(*engineRow)
			s.Engines = append(s.Engines, e.stats(now))
			s.Leases += e.Leases
		}
		tenants, err := txn.Get(tableTenants, indexID, pool)
		if err != nil {
			return fmt.Errorf("memory: scan tenants: %w", err)
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
			})
		}
		s.LiveHolders, err = liveHolders(txn, pool, now)
		return err
	})
	if err != nil {
		return ledger.PoolStats{}, fmt.Errorf("stats of pool %s: %w", pool, err)
	}
	return s, nil
}
