package memory

import (
	"encoding/binary"
	"fmt"
	"reflect"

	memdb "github.com/hashicorp/go-memdb"
)

// The go-memdb schema: every table and index name, and the tuple indexer
// they share. Rows are the *Row types in rows.go; a row is never modified
// after insertion (copy, change, insert the copy).

// Table names.
const (
	tablePools   = "pools"
	tableEngines = "engines"
	tableTenants = "tenants"
	tableHolders = "holders"
	tableLeases  = "leases"
)

// Index names. Every index is a tuple (see tupleIndex); the comment lists its
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
	idx := func(name string, of func(any) []any) *memdb.IndexSchema {
		// Every tuple is unique: it ends in the row's primary key.
		return &memdb.IndexSchema{Name: name, Unique: true, Indexer: tupleIndex{of: of}}
	}
	lease := func(of func(*leaseRow) []any) func(any) []any {
		return func(o any) []any { return of(o.(*leaseRow)) }
	}
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		tablePools: {
			Name: tablePools,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: idx(indexID, func(o any) []any { return []any{o.(*poolRow).Name} }),
			},
		},
		tableEngines: {
			Name: tableEngines,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: idx(indexID, func(o any) []any {
					e := o.(*engineRow)
					return []any{e.Pool, e.Spec.ID}
				}),
			},
		},
		tableTenants: {
			Name: tableTenants,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: idx(indexID, func(o any) []any {
					t := o.(*tenantRow)
					return []any{t.Pool, t.Spec.Name}
				}),
			},
		},
		tableHolders: {
			Name: tableHolders,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: idx(indexID, func(o any) []any {
					h := o.(*holderRow)
					return []any{h.Pool, h.Holder}
				}),
				indexExpiry: idx(indexExpiry, func(o any) []any {
					h := o.(*holderRow)
					return []any{h.Pool, h.Expires.UnixMilli(), h.Holder}
				}),
			},
		},
		tableLeases: {
			Name: tableLeases,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: idx(indexID, lease(func(l *leaseRow) []any { return []any{l.Pool, l.Fence.Epoch, l.Fence.Seq} })),
				indexDeadline: idx(indexDeadline, lease(func(l *leaseRow) []any {
					return []any{l.Pool, l.Deadline.UnixMilli(), l.Fence.Epoch, l.Fence.Seq}
				})),
				indexRequest: idx(indexRequest, lease(func(l *leaseRow) []any {
					return []any{l.Pool, l.Holder, l.RequestID, l.Fence.Epoch, l.Fence.Seq}
				})),
			},
		},
	}}
}

// tupleIndex indexes a row by an order-preserving encoding of a tuple of
// strings and integers: a string is its bytes and a NUL (identifiers never
// contain one, see ledger validation), an unsigned integer 8 big-endian
// bytes, a signed one the same with the sign bit flipped. Lookups may give
// any leading part of the tuple: Get then returns every row under that
// prefix, LowerBound seeks to it; since each string part is terminated, a
// prefix ("pool-a") never matches another ("pool-ab").
type tupleIndex struct {
	of func(row any) []any
}

var _ memdb.PrefixIndexer = tupleIndex{}

// FromObject implements memdb.SingleIndexer.
func (x tupleIndex) FromObject(row any) (bool, []byte, error) {
	b, err := encodeTuple(x.of(row))
	return err == nil, b, err
}

// FromArgs implements memdb.Indexer.
func (x tupleIndex) FromArgs(args ...any) ([]byte, error) { return encodeTuple(args) }

// PrefixFromArgs implements memdb.PrefixIndexer.
func (x tupleIndex) PrefixFromArgs(args ...any) ([]byte, error) { return encodeTuple(args) }

func encodeTuple(parts []any) ([]byte, error) {
	var b []byte
	for i, p := range parts {
		v := reflect.ValueOf(p)
		switch v.Kind() {
		case reflect.String:
			b = append(b, v.String()...)
			b = append(b, 0)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			b = binary.BigEndian.AppendUint64(b, v.Uint())
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			b = binary.BigEndian.AppendUint64(b, uint64(v.Int())^(1<<63))
		default:
			return nil, fmt.Errorf("memory: index part %d has unsupported type %T", i, p)
		}
	}
	return b, nil
}
