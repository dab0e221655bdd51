package lease

import (
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/memdbx"
)

// The local lease table: one row per lease this router holds.
const (
	tableLeases = "leases"
	// indexID is (pool, lease id); (pool) alone scans a pool. There is no
	// engine index: per-engine totals are kept apart (totals.go), and an
	// index costs every write.
	indexID = "id"
)

// row is one held lease. Rows are immutable once inserted: a change
// (renewal, re-assertion, fencing) inserts a new row, so snapshot readers
// never see a half-written one.
type row struct {
	Pool   ledger.PoolID
	ID     ledger.LeaseID
	Engine ledger.EngineID

	// Lease is the ledger's latest answer for it (grant, renewal, resize
	// or re-assertion).
	Lease ledger.Lease
	// RenewedAt is the local-clock send time of the call that last set
	// the deadline; TTL is the ttl sent with it. The ledger's deadline is
	// never earlier than RenewedAt+TTL.
	RenewedAt time.Time
	TTL       time.Duration
	// Gen is the holder incarnation of the pool that holds it.
	Gen uint64
	// Fenced is set once Done was closed because the session could not be
	// confirmed; the lease stays listed until its user releases it.
	Fenced bool

	held *Held
}

func (r *row) with(f func(*row)) *row {
	c := *r
	f(&c)
	return &c
}

func schema() *memdb.DBSchema {
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		tableLeases: {
			Name: tableLeases,
			Indexes: map[string]*memdb.IndexSchema{
				// Tuples (memdbx.TupleKey), not go-memdb's field indexes: those
				// look fields up by reflection on every write, and this
				// table takes a write per request.
				indexID: {Name: indexID, Unique: true, Indexer: memdbx.TupleKey(func(k memdbx.Key, o any) memdbx.Key {
					r := o.(*row)
					return k.Str(string(r.Pool)).Str(string(r.ID))
				})},
			},
		},
	}}
}
