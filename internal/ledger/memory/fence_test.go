package memory

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// setSeq writes a pool's fencing sequence directly, as no call can.
func (f *fixture) setSeq(seq uint64) {
	f.t.Helper()
	txn := f.l.s.db.Txn(true)
	defer txn.Abort()
	row, err := txn.First(tablePools, indexID, testPool, kindPool)
	if err != nil || row == nil {
		f.t.Fatalf("read pool: %v", err)
	}
	p := row.(*poolRow).clone()
	p.Seq = seq
	if err := txn.Insert(tablePools, p); err != nil {
		f.t.Fatal(err)
	}
	txn.Commit()
}

// TestFenceNeverWrapsNorOverwrites: with the pool's sequence at
// MaxFenceSeq (where a uint64 counter would go on to 2^53 and, at 2^64-1,
// wrap to 0) or behind a held lease, Acquire fails with ErrFenceExhausted
// and changes nothing; before the fix the first wrapped and the second
// overwrote the held lease's row while its engine kept counting it.
func TestFenceNeverWrapsNorOverwrites(t *testing.T) {
	f := newFixture(t, ledger.Options{})
	f.keepAlive("r1", time.Hour)
	held := f.acquire("r1", "held", 100, time.Hour)
	for _, seq := range []uint64{ledger.MaxFenceSeq, 1<<64 - 1, 0} {
		t.Run(fmt.Sprint("seq=", seq), func(t *testing.T) {
			f.t = t
			f.setSeq(seq)
			before := fmt.Sprintf("%+v", f.stats().Engines)
			_, err := f.l.Acquire(f.ctx, f.request("r1", ledger.RequestID(fmt.Sprint("next-", seq)), 10, time.Hour))
			wantErr(t, "Acquire past the sequence's end or onto a held id", err, ledger.ErrFenceExhausted)
			if after := fmt.Sprintf("%+v", f.stats().Engines); after != before {
				t.Errorf("refused Acquire changed the engines:\n got %s\nwant %s", after, before)
			}
			ls, err := f.l.List(f.ctx, ledger.Filter{Pool: testPool})
			if err != nil || len(ls) != 1 || ls[0] != held {
				t.Errorf("List = %+v, %v; want only %+v, intact", ls, err, held)
			}
			if ms, err := f.l.CheckTotals(f.ctx, testPool); err != nil || len(ms) != 0 {
				t.Errorf("CheckTotals = %v, %v; want none", ms, err)
			}
		})
	}
}
