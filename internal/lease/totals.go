package lease

import (
	"sync"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/leasehold/leasehold/internal/ledger"
)

// totals is what the local table holds per pool and engine, kept up to
// date from each committed write transaction's changes, so that ranking
// (Manager.HeldByEngine, on every request) costs O(engines) rather than a
// scan of every held lease. The deltas are additive, so commits applying
// them in another order than they committed still sum right.
type totals struct {
	mu sync.Mutex
	by map[ledger.PoolID]map[ledger.EngineID]Reserved
}

func (t *totals) apply(changes memdb.Changes) {
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
		if c.Table != tableLeases {
			continue
		}
		if b, ok := c.Before.(*row); ok && b != nil {
			add(b, -1)
		}
		if a, ok := c.After.(*row); ok && a != nil {
			add(a, +1)
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

// writeTxn opens a write transaction on the local table whose commit
// (Manager.commit) updates the totals.
func (m *Manager) writeTxn() *memdb.Txn {
	txn := m.db.Txn(true)
	txn.TrackChanges()
	return txn
}

// commit commits txn and applies its changes to the totals.
func (m *Manager) commit(txn *memdb.Txn) {
	changes := txn.Changes()
	txn.Commit()
	m.tot.apply(changes)
}

// HeldByEngine returns what this router holds per engine of pool: the
// same figures as Snapshot().Engines(pool), kept up to date as leases are
// taken, changed and given back, and read without a scan.
func (m *Manager) HeldByEngine(pool ledger.PoolID) map[ledger.EngineID]Reserved {
	return m.tot.pool(pool)
}
