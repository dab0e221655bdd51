package memdbx

import (
	"testing"

	memdb "github.com/hashicorp/go-memdb"
)

type (
	name  string
	epoch uint64
)

func TestEncodeOrder(t *testing.T) {
	// Each tuple must encode below the next one: strings are terminated,
	// signed integers order across zero, named types encode as their kind.
	ordered := [][]any{
		{name("a"), int64(-5)},
		{name("a"), int64(0)},
		{"a", int64(1)},
		{name("a"), 1 << 50},
		{name("a-"), int64(-1 << 60)},
		{name("ab"), int64(0)},
		{"b", uint64(9)},
		{name("b"), uint64(16)},
		{"b", uint32(1<<32 - 1), "x"},
		{name("b"), epoch(1 << 40)},
		{"b", uint64(1 << 41)},
	}
	var prev []byte
	for i, tuple := range ordered {
		b, err := Encode(tuple...)
		if err != nil {
			t.Fatalf("Encode(%v): %v", tuple, err)
		}
		if i > 0 && string(prev) >= string(b) {
			t.Errorf("Encode(%v) does not sort after Encode(%v)", tuple, ordered[i-1])
		}
		prev = b
	}
	if _, err := Encode(1.5); err == nil {
		t.Errorf("Encode(float) succeeded, want an error")
	}
}

func TestTuplePrefixLookups(t *testing.T) {
	type row struct {
		pool, id string
		seq      uint64
	}
	db, err := memdb.NewMemDB(&memdb.DBSchema{Tables: map[string]*memdb.TableSchema{"t": {
		Name: "t",
		Indexes: map[string]*memdb.IndexSchema{
			"id": {Name: "id", Unique: true, Indexer: Tuple(func(o any) []any { r := o.(*row); return []any{r.pool, r.seq, r.id} })},
		},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	txn := db.Txn(true)
	for _, r := range []*row{{"p", "x", 2}, {"p", "y", 1}, {"pa", "z", 0}, {"q", "w", 5}} {
		if err := txn.Insert("t", r); err != nil {
			t.Fatal(err)
		}
	}
	txn.Commit()
	it, err := db.Txn(false).Get("t", "id", "p")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for o := it.Next(); o != nil; o = it.Next() {
		got = append(got, o.(*row).id)
	}
	if len(got) != 2 || got[0] != "y" || got[1] != "x" {
		t.Errorf(`Get(prefix "p") = %v, want [y x]: pool "pa" excluded, in seq order`, got)
	}
}

// TestKeyEncodesAsEncode: a Key built part by part is Encode of the same
// parts, so rows indexed by TupleKey are found by lookups that give the
// parts (FromArgs).
func TestKeyEncodesAsEncode(t *testing.T) {
	tests := []struct {
		name  string
		key   Key
		parts []any
	}{
		{"strings", Key(nil).Str("pool").Str(""), []any{name("pool"), ""}},
		{"unsigned", Key(nil).Str("p").Uint(1 << 40).Uint(0), []any{"p", epoch(1 << 40), uint64(0)}},
		{"signed", Key(nil).Int(-5).Int(1 << 50).Str("h"), []any{int64(-5), 1 << 50, name("h")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, err := Encode(tc.parts...)
			if err != nil {
				t.Fatal(err)
			}
			if string(tc.key) != string(want) {
				t.Errorf("Key = %x, want Encode(%v) = %x", tc.key, tc.parts, want)
			}
		})
	}
	x := TupleKey(func(k Key, o any) Key { return k.Str(o.(string)).Uint(7) })
	ok, got, err := x.(memdb.SingleIndexer).FromObject("r")
	want, _ := x.FromArgs("r", uint64(7))
	if !ok || err != nil || string(got) != string(want) {
		t.Errorf("FromObject = %x, %v, %v; want FromArgs' %x", got, ok, err, want)
	}
}
