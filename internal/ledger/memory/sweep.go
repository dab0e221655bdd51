package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Sweeping: a lease ends at its deadline or when its holder's session dies.
// Ended leases are removed lazily, oldest deadline first and then dead
// sessions in expiry order, each call handling at most a fixed number of
// items (a lease removed or a dead session removed). Both scans start at the
// pool's earliest entry of an ordered index, so a sweep costs
// O(k log n) for k items, never a scan of all leases. A dead session's row
// stays until all its leases are gone, so KeepAlive can tell the holder its
// session died.

// Sweep removes up to max ended leases and dead sessions in pool; max 0
// means Options.SweepBatch.
func (l *store) Sweep(ctx context.Context, pool ledger.PoolID, max int) (ledger.Swept, error) {
	if max == 0 {
		max = l.opts.SweepBatch
	}
	var s ledger.Swept
	err := l.update(ctx, pool, ledger.NoHolder, 0, func(o *op) error {
		s = o.sweep(max)
		return nil
	})
	if err != nil {
		return ledger.Swept{}, err
	}
	return s, nil
}

// never is the SweepFrom of a pool with no lease and no session: far
// beyond any end a row can have.
var never = time.UnixMilli(1 << 60).UTC()

// sweep removes up to max ended leases and dead sessions, and sets the
// pool's SweepFrom: the next end its scans found when it removed all that
// was due, else zero (unknown).
func (o *op) sweep(max int) ledger.Swept {
	var s ledger.Swept
	name := o.pool.Name
	budget := max
	o.pool.SweepFrom = time.Time{}

	// Leases past their deadline, earliest first.
	due, nextLease, err := overdue(o, tableLeases, indexDeadline, budget, func(ls *leaseRow) (bool, time.Time) {
		return ls.Pool == name, ls.Deadline
	})
	if err != nil {
		o.err = err
		return s
	}
	for _, ls := range due {
		o.removeLease(ls, ledger.CounterExpired)
		s.Expired++
		budget--
	}

	// Dead sessions, earliest expiry first: revoke their leases, then drop
	// the session.
	dead, nextHolder, err := overdue(o, tableHolders, indexExpiry, budget, func(h *holderRow) (bool, time.Time) {
		return h.Pool == name, h.Expires // dead once now reaches it (holderRow.live)
	})
	if err != nil {
		o.err = err
		return s
	}
	done := !nextLease.IsZero() && !nextHolder.IsZero() // both scans reached a row not due, or the end
	for _, h := range dead {
		if budget <= 0 {
			done = false
			break
		}
		for _, row := range o.scan(budget, tableLeases, indexRequest, name, h.Holder) {
			o.removeLease(row.(*leaseRow), ledger.CounterRevoked)
			s.Revoked++
			budget--
		}
		if budget <= 0 || o.first(tableLeases, indexRequest, name, h.Holder) != nil {
			done = false
			break
		}
		o.delete(tableHolders, h)
		s.Holders++
		budget--
	}
	if done {
		o.pool.SweepFrom = nextLease
		if nextHolder.Before(nextLease) {
			o.pool.SweepFrom = nextHolder
		}
	}
	return s
}

// overdue returns up to budget rows of the pool from the start of table's
// index (ordered by when they end) that have ended by o.now; of reports
// whether a row is the pool's, and when it ends. next is when the first
// row not ended ends (never when the pool has no more rows), or zero when
// the scan stopped at budget.
func overdue[R any](o *op, table, index string, budget int, of func(R) (bool, time.Time)) (out []R, next time.Time, err error) {
	if budget <= 0 {
		return nil, time.Time{}, nil
	}
	it, err := o.txn.LowerBound(table, index, o.pool.Name)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("scan %s by %s: %w", table, index, err)
	}
	for row := it.Next(); ; row = it.Next() {
		if row == nil {
			return out, never, nil
		}
		r := row.(R)
		mine, end := of(r)
		switch {
		case !mine: // the index runs on into the next pool's rows
			return out, never, nil
		case end.After(never):
			return out, never, nil
		case end.After(o.now):
			return out, end, nil
		case len(out) == budget:
			return out, time.Time{}, nil
		}
		out = append(out, r)
	}
}

// ended returns the counter a lease's end is counted under
// (ledger.CounterExpired or ledger.CounterRevoked), or "" while it is live.
func (o *op) ended(ls *leaseRow) string {
	if !o.now.Before(ls.Deadline) {
		return ledger.CounterExpired
	}
	if h := o.holder(ls.Holder); h == nil || !h.live(o.now) {
		return ledger.CounterRevoked
	}
	return ""
}

// removeLease deletes a lease, returns its capacity to its engine and tenant
// (dropping a removed engine or tenant with its last lease) and counts the
// end under counter. A probe lease the ledger ends (expired, revoked)
// frees its slot of the engine's probe budget (ledger.Breaker.Unprobe).
func (o *op) removeLease(ls *leaseRow, counter string) {
	o.dropLease(ls, counter, ledger.OutcomeNone)
}

// dropLease is removeLease; a lease its holder releases (counter
// releases) reports outcome to the engine's breaker when it carries one
// or is a probe (the writes every backend makes: ledger.Breaker.Advance).
func (o *op) dropLease(ls *leaseRow, counter string, outcome ledger.Outcome) {
	// Both rows are read before either is written: a read of a table this
	// transaction wrote clones go-memdb's index and drops its cache of the
	// nodes the transaction copied, so the next write copies them again.
	e, t := o.engine(ls.Engine), o.tenant(ls.Tenant)
	o.delete(tableLeases, ls)
	if e != nil {
		c := *e
		switch {
		case counter == ledger.CounterReleases && (outcome != ledger.OutcomeNone || ls.Probe):
			var t ledger.BreakerTransition
			c.Breaker, t = o.advance(c.Breaker).Report(o.now, o.pool.Breaker, ls.Created, ls.Probe, outcome)
			o.countTransition(t)
		case ls.Probe && ledger.EndedByLedger(counter):
			c.Breaker = o.advance(c.Breaker).Unprobe()
		}
		c.ReservedKV -= ls.KVTokens
		c.ReservedSlots -= ls.Slots
		c.Leases--
		if ledger.EndedByLedger(counter) && !c.ObservedAt.IsZero() {
			// The engine may still run it: charged until observed, and
			// observed no sooner than the hold.
			c.OrphanKV += ls.KVTokens
			c.OrphanSlots += ls.Slots
			if until := plus(o.now, o.orphanHold); until.After(c.OrphanUntil) {
				c.OrphanUntil = until
			}
		}
		if c.Removed && c.Leases <= 0 {
			o.delete(tableEngines, e)
		} else {
			o.insert(tableEngines, &c)
		}
	}
	if t != nil {
		c := *t
		c.ReservedKV -= ls.KVTokens
		c.ReservedSlots -= ls.Slots
		c.Leases--
		if c.Removed && c.Leases <= 0 {
			o.delete(tableTenants, t)
		} else {
			o.insert(tableTenants, &c)
		}
	}
	o.count(counter, 1)
}

// addLease inserts a lease and charges its engine and tenant.
func (o *op) addLease(ls *leaseRow, e *engineRow, t *tenantRow) {
	o.insert(tableLeases, ls)
	ec := *e
	ec.ReservedKV += ls.KVTokens
	ec.ReservedSlots += ls.Slots
	ec.Leases++
	o.insert(tableEngines, &ec)
	tc := *t
	tc.ReservedKV += ls.KVTokens
	tc.ReservedSlots += ls.Slots
	tc.Leases++
	o.insert(tableTenants, &tc)
}

// advance reads a breaker about to be stored at now (ledger.Breaker.Advance)
// and counts the transition the reading made.
func (o *op) advance(b ledger.Breaker) ledger.Breaker {
	b, t := b.Advance(o.now, o.pool.Breaker)
	o.countTransition(t)
	return b
}

// countTransition counts a breaker transition, if any.
func (o *op) countTransition(t ledger.BreakerTransition) {
	if t != ledger.TransitionNone {
		o.count(ledger.BreakerCounter(t), 1)
	}
}
