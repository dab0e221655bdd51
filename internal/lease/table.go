package lease

import (
	"cmp"
	"slices"
	"sync"

	"github.com/leasehold/leasehold/internal/ledger"
)

// table is the local lease table: a row per lease this router holds, by
// pool and id, and what the rows hold per pool and engine (the totals
// ranking reads on every request, HeldByEngine).
//
// Why a map under a mutex and not go-memdb: every request writes the table
// twice (Acquire, Release), and a go-memdb write transaction (radix path
// copies, a writable-node cache per index and per root, the commit) cost
// ~65 allocations and ~4-5% of a router's CPU each. Nothing on the request
// path reads more than one row; the readers of every row (renewal and
// re-assertion scans, fencing, Stats, Close) run in the background, so a
// snapshot is a sorted copy of the rows taken under the lock: consistent,
// and never changed after. Rows are immutable (a change writes a new row),
// so a row read under the lock stays valid after it is released.
type table struct {
	mu   sync.Mutex // guards rows and tot
	rows map[rowKey]*row
	tot  map[ledger.PoolID]map[ledger.EngineID]Reserved
}

// rowKey is a row's key: its pool and lease id.
type rowKey struct {
	pool ledger.PoolID
	id   ledger.LeaseID
}

func newTable() *table {
	return &table{rows: map[rowKey]*row{}, tot: map[ledger.PoolID]map[ledger.EngineID]Reserved{}}
}

// write runs f with the table locked: f reads and writes rows through w,
// all at once to any reader.
func (t *table) write(f func(w tableWrite)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(tableWrite{t})
}

// tableWrite is the table as a write sees it, the lock held.
type tableWrite struct{ t *table }

// get returns the row of pool's lease id, or nil.
func (w tableWrite) get(pool ledger.PoolID, id ledger.LeaseID) *row {
	return w.t.rows[rowKey{pool, id}]
}

// put writes r in place of the row of its key, if any.
func (w tableWrite) put(r *row) {
	k := rowKey{r.Pool, r.ID}
	if old := w.t.rows[k]; old != nil {
		w.t.add(old, -1)
	}
	w.t.rows[k] = r
	w.t.add(r, +1)
}

// del deletes r, if it is the row of its key.
func (w tableWrite) del(r *row) {
	k := rowKey{r.Pool, r.ID}
	if w.t.rows[k] != r {
		return
	}
	delete(w.t.rows, k)
	w.t.add(r, -1)
}

// pool returns pool's rows, in id order.
func (w tableWrite) pool(pool ledger.PoolID) []*row { return w.t.sorted(pool) }

// add adds r's holding to the totals with sign. t.mu is held.
func (t *table) add(r *row, sign int64) {
	pool := t.tot[r.Pool]
	if pool == nil {
		pool = map[ledger.EngineID]Reserved{}
		t.tot[r.Pool] = pool
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

// sorted returns the rows of pool (every pool: "") in (pool, id) order.
// t.mu is held.
func (t *table) sorted(pool ledger.PoolID) []*row {
	out := make([]*row, 0, len(t.rows))
	for _, r := range t.rows {
		if pool == "" || r.Pool == pool {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *row) int {
		return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// snapshot returns every row, in (pool, id) order.
func (t *table) snapshot() []*row {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sorted("")
}

// totals returns a copy of pool's totals.
func (t *table) totals(pool ledger.PoolID) map[ledger.EngineID]Reserved {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[ledger.EngineID]Reserved, len(t.tot[pool]))
	for e, r := range t.tot[pool] {
		out[e] = r
	}
	return out
}

// heldOn returns pool's totals on engine.
func (t *table) heldOn(pool ledger.PoolID, engine ledger.EngineID) Reserved {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tot[pool][engine]
}

// HeldOn is HeldByEngine(pool)[engine] without the copy of the map: the
// ranking reads it for each candidate of every request.
func (m *Manager) HeldOn(pool ledger.PoolID, engine ledger.EngineID) Reserved {
	return m.tab.heldOn(pool, engine)
}

// HeldByEngine returns what this router holds per engine of pool: the
// same figures as Snapshot().Engines(pool), kept up to date as leases are
// taken, changed and given back, and read without a scan.
func (m *Manager) HeldByEngine(pool ledger.PoolID) map[ledger.EngineID]Reserved {
	return m.tab.totals(pool)
}
