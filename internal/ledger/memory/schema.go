package memory

import (
	memdb "github.com/hashicorp/go-memdb"

	"github.com/leasehold/leasehold/internal/memdbx"
)

// The go-memdb schema: every table and index name, and the tuple indexer
// they share (memdbx.TupleKey). Rows are the *Row types in rows.go; a row is never modified
// after insertion (copy, change, insert the copy).

// Table names.
const (
	tablePools   = "pools"
	tableEngines = "engines"
	tableTenants = "tenants"
	tableHolders = "holders"
	tableLeases  = "leases"
)

// Index names. Every index is a tuple (see memdbx.TupleKey); the comment lists its
// parts. A lease write touches every lease index, so there are only three:
// the primary one gives fence order, and List filters the pool's leases by
// engine or tenant in a scan (audit reads are rare; grants and releases are
// not).
const (
	// indexID is each table's primary index:
	// pools (name), engines (pool, engine), tenants (pool, tenant),
	// holders (pool, holder), leases (pool, epoch, seq): fence order, the
	// order List returns.
	indexID = "id"
	// indexExpiry orders a pool's holder sessions by expiry:
	// (pool, expires ms, holder).
	indexExpiry = "expiry"
	// indexDeadline orders a pool's leases by deadline:
	// (pool, deadline ms, epoch, seq).
	indexDeadline = "deadline"
	// indexRequest finds a holder's leases (session death, List by holder)
	// and a holder's lease by request id for idempotent Acquire:
	// (pool, holder, request id, epoch, seq).
	indexRequest = "request"
)

// newSchema returns the database schema.
func newSchema() *memdb.DBSchema {
	idx := func(name string, of func(k memdbx.Key, row any) memdbx.Key) *memdb.IndexSchema {
		// Every tuple is unique: it ends in the row's primary key.
		return &memdb.IndexSchema{Name: name, Unique: true, Indexer: memdbx.TupleKey(of)}
	}
	lease := func(of func(k memdbx.Key, l *leaseRow) memdbx.Key) func(memdbx.Key, any) memdbx.Key {
		return func(k memdbx.Key, o any) memdbx.Key { return of(k, o.(*leaseRow)) }
	}
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		tablePools: {
			Name: tablePools,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: idx(indexID, func(k memdbx.Key, o any) memdbx.Key { return k.Str(string(o.(*poolRow).Name)) }),
			},
		},
		tableEngines: {
			Name: tableEngines,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: idx(indexID, func(k memdbx.Key, o any) memdbx.Key {
					e := o.(*engineRow)
					return k.Str(string(e.Pool)).Str(string(e.Spec.ID))
				}),
			},
		},
		tableTenants: {
			Name: tableTenants,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: idx(indexID, func(k memdbx.Key, o any) memdbx.Key {
					t := o.(*tenantRow)
					return k.Str(string(t.Pool)).Str(string(t.Spec.Name))
				}),
			},
		},
		tableHolders: {
			Name: tableHolders,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: idx(indexID, func(k memdbx.Key, o any) memdbx.Key {
					h := o.(*holderRow)
					return k.Str(string(h.Pool)).Str(string(h.Holder))
				}),
				indexExpiry: idx(indexExpiry, func(k memdbx.Key, o any) memdbx.Key {
					h := o.(*holderRow)
					return k.Str(string(h.Pool)).Int(h.Expires.UnixMilli()).Str(string(h.Holder))
				}),
			},
		},
		tableLeases: {
			Name: tableLeases,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: idx(indexID, lease(func(k memdbx.Key, l *leaseRow) memdbx.Key {
					return k.Str(string(l.Pool)).Uint(uint64(l.Fence.Epoch)).Uint(l.Fence.Seq)
				})),
				indexDeadline: idx(indexDeadline, lease(func(k memdbx.Key, l *leaseRow) memdbx.Key {
					return k.Str(string(l.Pool)).Int(l.Deadline.UnixMilli()).Uint(uint64(l.Fence.Epoch)).Uint(l.Fence.Seq)
				})),
				indexRequest: idx(indexRequest, lease(func(k memdbx.Key, l *leaseRow) memdbx.Key {
					return k.Str(string(l.Pool)).Str(string(l.Holder)).Str(string(l.RequestID)).Uint(uint64(l.Fence.Epoch)).Uint(l.Fence.Seq)
				})),
			},
		},
	}}
}
