package lease

import (
	"cmp"
	"slices"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Entry is one held lease as a snapshot sees it.
type Entry struct {
	Lease ledger.Lease
	// RenewedAt is the local-clock time the current deadline was requested.
	RenewedAt time.Time
	// Fenced is set once the lease's Done closed for fencing; it is still
	// reserved in the ledger until its user releases it.
	Fenced bool
}

// Reserved is what this router holds on one engine.
type Reserved struct {
	KVTokens int64
	Slots    int64
	Leases   int
}

// Snapshot is a consistent read view of the local lease table, for
// metrics, the audit and the background scans. It never changes; take a
// new one to see later changes. It is safe for concurrent use.
type Snapshot struct {
	all []*row // in (pool, id) order
}

// Snapshot returns the current read view: a copy of the table's rows,
// taken under its lock (O(n log n) in leases held; nothing on a request's
// path takes one).
func (m *Manager) Snapshot() Snapshot { return Snapshot{all: m.tab.snapshot()} }

// Held returns every lease this router holds, in all pools.
func (m *Manager) Held() []Entry { return m.Snapshot().Leases("") }

// Leases returns the held leases of pool, or of every pool when pool is "".
func (s Snapshot) Leases(pool ledger.PoolID) []Entry {
	var out []Entry
	s.each(pool, func(r *row) { out = append(out, entryOf(r)) })
	return out
}

// Len counts the held leases of pool, or of every pool when pool is "".
func (s Snapshot) Len(pool ledger.PoolID) int {
	n := 0
	s.each(pool, func(*row) { n++ })
	return n
}

// Get returns the held lease id in pool.
func (s Snapshot) Get(pool ledger.PoolID, id ledger.LeaseID) (Entry, bool) {
	i, ok := slices.BinarySearchFunc(s.all, rowKey{pool, id}, func(r *row, k rowKey) int {
		return cmp.Or(cmp.Compare(r.Pool, k.pool), cmp.Compare(r.ID, k.id))
	})
	if !ok {
		return Entry{}, false
	}
	return entryOf(s.all[i]), true
}

// Engine returns what this router holds on one engine.
func (s Snapshot) Engine(pool ledger.PoolID, engine ledger.EngineID) Reserved {
	var res Reserved
	s.each(pool, func(r *row) {
		if r.Engine == engine {
			add(&res, r)
		}
	})
	return res
}

// Engines returns what this router holds per engine of pool.
func (s Snapshot) Engines(pool ledger.PoolID) map[ledger.EngineID]Reserved {
	out := make(map[ledger.EngineID]Reserved)
	s.each(pool, func(r *row) {
		res := out[r.Engine]
		add(&res, r)
		out[r.Engine] = res
	})
	return out
}

func add(res *Reserved, r *row) {
	res.KVTokens += r.Lease.KVTokens
	res.Slots += r.Lease.Slots
	res.Leases++
}

func (s Snapshot) each(pool ledger.PoolID, f func(*row)) {
	for _, r := range s.all {
		if pool == "" || r.Pool == pool {
			f(r)
		}
	}
}

func entryOf(r *row) Entry {
	return Entry{Lease: r.Lease, RenewedAt: r.RenewedAt, Fenced: r.Fenced}
}

// rows returns the table's rows of pool.
func (s Snapshot) rows(pool ledger.PoolID) []*row {
	var out []*row
	s.each(pool, func(r *row) { out = append(out, r) })
	return out
}
