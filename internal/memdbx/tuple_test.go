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
