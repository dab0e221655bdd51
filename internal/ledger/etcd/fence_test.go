package etcd_test

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/etcd"
	"github.com/leasehold/leasehold/internal/testutil/etcdserver"
)

// TestFenceNeverWrapsNorOverwrites writes a pool's sequence key where no
// grant can take it: at MaxFenceSeq, and behind a held lease (the next id
// is that lease's). Acquire fails with ErrFenceExhausted, nothing changes,
// and the held lease is intact (a grant never overwrites a lease record).
func TestFenceNeverWrapsNorOverwrites(t *testing.T) {
	srv := etcdserver.Start(t, t.TempDir())
	cli := srv.Client(t)
	l := newLedger(t, srv, etcd.Options{Options: ledger.Options{RecoveryWindow: -1}, Prefix: "/fence/"})
	ctx := t.Context()
	must[ledger.Epoch](t, "Configure")(l.Configure(ctx, spec(1000, 10)))
	must[ledger.Session](t, "KeepAlive")(l.KeepAlive(ctx, "p", "h", time.Minute))
	held := must[ledger.Grant](t, "Acquire")(l.Acquire(ctx, req("h", "held", 100, time.Minute))).Lease
	for _, seq := range []uint64{ledger.MaxFenceSeq, 0} {
		t.Run(fmt.Sprint("seq=", seq), func(t *testing.T) {
			if _, err := cli.Put(ctx, "/fence/pool/p/seq", strconv.FormatUint(seq, 10)); err != nil {
				t.Fatal(err)
			}
			kv, slots, leases := reserved(t, l)
			_, err := l.Acquire(ctx, req("h", fmt.Sprint("next-", seq), 10, time.Minute))
			if !errors.Is(err, ledger.ErrFenceExhausted) {
				t.Errorf("Acquire with the sequence at %d error = %v, want ErrFenceExhausted", seq, err)
			}
			if k, s, n := reserved(t, l); k != kv || s != slots || n != leases {
				t.Errorf("refused Acquire changed the reservations to %d/%d/%d, want %d/%d/%d", k, s, n, kv, slots, leases)
			}
			ls := must[[]ledger.Lease](t, "List")(l.List(ctx, ledger.Filter{Pool: "p"}))
			if len(ls) != 1 || ls[0] != held {
				t.Errorf("List = %+v, want only %+v, intact", ls, held)
			}
			if ms := must[[]ledger.TotalsMismatch](t, "CheckTotals")(l.CheckTotals(ctx, "p")); len(ms) != 0 {
				t.Errorf("CheckTotals = %v, want none", ms)
			}
		})
	}
}
