package lease

import (
	"sync"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/leasehold/leasehold/internal/ledger"
)

// totals is what the local table holds per pool and engine, kept up to
// date from each committed write transaction's writes, so that ranking
// (Manager.HeldByEngine, on every request) costs O(engines) rather than a
// scan of every held lease. The deltas are additive, so commits applying
// them in another order than they committed still sum right.
type totals struct {
	mu sync.Mutex
	by map[ledger.PoolID]map[ledger.EngineID]Reserved
}

func (t *totals) apply(changes []rowChange) {
	if len(changes) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.by == nil {
		t.by = map[ledger.PoolID]map[ledger.EngineID]Reserved{}
	}
	add := func(r *row, sign int64) {
		pool := t.by[r.Pool]
		if pool == nil {
			pool = map[ledger.EngineID]Reserved{}
			t.by[r.Pool] = pool
		}
		res := pool[r.Engine]
		res.KVTokens += sign * r.Lease.KVTokens
		res.Slots += sign * r.Lease.Slots
		res.Leases += int(sign)
		if res == (Reserved{}) {
			delete(pool, r.Engine)
			return
		}
		pool[r.Engine] = res
	}
	for _, c := range changes {
		if c.before != nil {
			add(c.before, -1)
		}
		if c.after != nil {
			add(c.after, +1)
		}
	}
}

// pool returns a copy of pool's totals.
func (t *totals) pool(pool ledger.PoolID) map[ledger.EngineID]Reserved {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[ledger.EngineID]Reserved, len(t.by[pool]))
	for e, r := range t.by[pool] {
		out[e] = r
	}
	return out
}

// tableTxn is a write transaction on the local table that keeps what its
// writes change (put, del), for the totals. Write rows only through put
// and del; Manager.commit commits it and applies its changes.
type tableTxn struct {
	*memdb.Txn
	changes []rowChange
}

// rowChange is one write: before is the row it replaced or deleted (nil
// for a new one), after the row it wrote (nil for a deletion).
type rowChange struct{ before, after *row }

// writeTxn opens a write transaction on the local table whose commit
// (Manager.commit) updates the totals.
func (m *Manager) writeTxn() *tableTxn {
	return &tableTxn{Txn: m.db.Txn(true), changes: make([]rowChange, 0, 1)}
}

// put inserts after in place of before (nil: a new row, whose id no row
// has).
func (t *tableTxn) put(before, after *row) error {
	if err := t.Insert(tableLeases, after); err != nil {
		return err
	}
	t.changes = append(t.changes, rowChange{before: before, after: after})
	return nil
}

// del deletes r.
func (t *tableTxn) del(r *row) error {
	if err := t.Delete(tableLeases, r); err != nil {
		return err
	}
	t.changes = append(t.changes, rowChange{before: r})
	return nil
}

// commit commits txn and applies its changes to the totals.
func (m *Manager) commit(txn *tableTxn) {
	txn.Commit()
	m.tot.apply(txn.changes)
}

// HeldByEngine returns what this router holds per engine of pool: the
// same figures as Snapshot().Engines(pool), kept up to date as leases are
// taken, changed and given back, and read without a scan.
func (m *Manager) HeldByEngine(pool ledger.PoolID) map[ledger.EngineID]Reserved {
	return m.tot.pool(pool)
}
