// Package memdbx holds the go-memdb index the in-process tables share: an
// order-preserving tuple of strings and integers, built by a function
// rather than by reflecting on field names (go-memdb's StringFieldIndex
// looks fields up by name on every write).
package memdbx

import (
	"encoding/binary"
	"fmt"
	"reflect"

	memdb "github.com/hashicorp/go-memdb"
)

// Tuple returns an indexer of rows by of(row): an order-preserving
// encoding of a tuple of strings and integers. A string is its bytes and a
// NUL (identifiers never contain one, see ledger validation), an unsigned
// integer 8 big-endian bytes, a signed one the same with the sign bit
// flipped. Lookups may give any leading part of the tuple: Get then returns
// every row under that prefix, LowerBound seeks to it; since each string
// part is terminated, a prefix ("pool-a") never matches another
// ("pool-ab"). Named string and integer types are accepted as they are.
func Tuple(of func(row any) []any) memdb.Indexer { return tupleIndex{of: of} }

type tupleIndex struct {
	of func(row any) []any
}

var _ memdb.PrefixIndexer = tupleIndex{}
var _ memdb.SingleIndexer = tupleIndex{}

// FromObject implements memdb.SingleIndexer.
func (x tupleIndex) FromObject(row any) (bool, []byte, error) {
	b, err := Encode(x.of(row)...)
	return err == nil, b, err
}

// FromArgs implements memdb.Indexer.
func (x tupleIndex) FromArgs(args ...any) ([]byte, error) { return Encode(args...) }

// PrefixFromArgs implements memdb.PrefixIndexer.
func (x tupleIndex) PrefixFromArgs(args ...any) ([]byte, error) { return Encode(args...) }

// Encode is the tuple encoding of parts (see Tuple).
func Encode(parts ...any) ([]byte, error) {
	b := make([]byte, 0, 64)
	for i, p := range parts {
		switch v := p.(type) {
		case string:
			b = append(append(b, v...), 0)
			continue
		case uint64:
			b = binary.BigEndian.AppendUint64(b, v)
			continue
		case int64:
			b = binary.BigEndian.AppendUint64(b, uint64(v)^(1<<63))
			continue
		}
		v := reflect.ValueOf(p)
		switch v.Kind() {
		case reflect.String:
			b = append(append(b, v.String()...), 0)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			b = binary.BigEndian.AppendUint64(b, v.Uint())
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			b = binary.BigEndian.AppendUint64(b, uint64(v.Int())^(1<<63))
		default:
			return nil, fmt.Errorf("memdbx: index part %d has unsupported type %T", i, p)
		}
	}
	return b, nil
}

// Key is a tuple being encoded, part by part, as Encode encodes the same
// parts: Str for a string (named string types included), Uint for an
// unsigned integer, Int for a signed one.
type Key []byte

// Str appends a string part.
func (k Key) Str(s string) Key { return append(append(k, s...), 0) }

// Uint appends an unsigned integer part.
func (k Key) Uint(v uint64) Key { return binary.BigEndian.AppendUint64(k, v) }

// Int appends a signed integer part.
func (k Key) Int(v int64) Key { return binary.BigEndian.AppendUint64(k, uint64(v)^(1<<63)) }

// TupleKey is Tuple with the row's key built by of, which appends the
// row's parts to k and returns it (k.Str(a).Uint(b)): the same encoding
// without an []any and a boxed value per part on every write. Lookups
// still take the parts as arguments (FromArgs, Encode).
func TupleKey(of func(k Key, row any) Key) memdb.Indexer { return keyIndex{of: of} }

type keyIndex struct {
	of func(k Key, row any) Key
}

var _ memdb.PrefixIndexer = keyIndex{}
var _ memdb.SingleIndexer = keyIndex{}

// FromObject implements memdb.SingleIndexer.
func (x keyIndex) FromObject(row any) (bool, []byte, error) {
	return true, x.of(make(Key, 0, 64), row), nil
}

// FromArgs implements memdb.Indexer.
func (x keyIndex) FromArgs(args ...any) ([]byte, error) { return Encode(args...) }

// PrefixFromArgs implements memdb.PrefixIndexer.
func (x keyIndex) PrefixFromArgs(args ...any) ([]byte, error) { return Encode(args...) }
