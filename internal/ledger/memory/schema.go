package memory

import (
	"fmt"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/leasehold/leasehold/internal/memdbx"
)

// The go-memdb schema: every table and index name, and the tuple indexer
// they share (memdbx.TupleKey). Rows are the *Row types in rows.go; a row is never modified
// after insertion (copy, change, insert the copy).

// Table names. Pools, engines and tenants are kinds of row in one table,
// tableRows, under one index: every grant and release writes its pool's,
// engine's and tenant's rows, and a write transaction pays for each radix
// tree it writes (its own transaction and node cache, and an update of the
// database's root at the commit), so one tree costs less than three (~15%
// of a grant's allocations). tablePools, tableEngines and tableTenants
// name that table by the kind of row a call reads or writes.
const (
	tableRows    = "rows"
	tablePools   = tableRows
	tableEngines = tableRows
	tableTenants = tableRows
	tableHolders = "holders"
	tableLeases  = "leases"
)

// Row kinds in tableRows: a row's key is (pool, kind) for the pool's own
// row, (pool, kind, name) for an engine or tenant, so a pool's engines
// (or tenants) are a key prefix, (pool, kind).
const (
	kindPool   = "p"
	kindEngine = "e"
	kindTenant = "t"
)

// Index names. Every index is a tuple (see memdbx.TupleKey); the comment lists its
// parts. A lease write touches every lease index, so there are only three:
// the primary one gives fence order, and List filters the pool's leases by
// engine or tenant in a scan (audit reads are rare; grants and releases are
// not).
const (
	// indexID is each table's primary index:
	// rows: pools (name, kindPool), engines (pool, kindEngine, engine),
	// tenants (pool, kindTenant, tenant);
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
		tableRows: {
			Name: tableRows,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: idx(indexID, func(k memdbx.Key, o any) memdbx.Key {
					switch r := o.(type) {
					case *poolRow:
						return k.Str(string(r.Name)).Str(kindPool)
					case *engineRow:
						return k.Str(string(r.Pool)).Str(kindEngine).Str(string(r.Spec.ID))
					case *tenantRow:
						return k.Str(string(r.Pool)).Str(kindTenant).Str(string(r.Spec.Name))
					}
					panic(fmt.Sprintf("memory: a %T in the rows table", o))
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
