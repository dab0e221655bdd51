package etcd_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/etcd"
	"github.com/leasehold/leasehold/internal/ledger/ledgertest"
	"github.com/leasehold/leasehold/internal/testutil/etcdserver"
)

var prefixes atomic.Int64

// backend makes ledgers on one etcd member, each under its own prefix.
func backend(t *testing.T) ledgertest.Backend {
	srv := etcdserver.Start(t, t.TempDir())
	cli := srv.Client(t)
	return ledgertest.Backend{
		Name: "etcd",
		New: func(t testing.TB, opts ledger.Options) ledger.Ledger {
			l, err := etcd.New(cli, etcd.Options{
				Options: opts,
				Prefix:  fmt.Sprintf("/conformance/%d/", prefixes.Add(1)),
				// The suite counts what each Sweep call removes; a background
				// sweeper would take that work first.
				NoWatch: true,
				// One etcd lease per deadline: markers end as soon as etcd allows.
				LeaseSlack: -1,
			})
			if err != nil {
				t.Fatalf("etcd.New: %v", err)
			}
			return l
		},
		Lose: func(t testing.TB, l ledger.Ledger) ledger.Ledger {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := cli.Delete(ctx, l.(*etcd.Ledger).Prefix(), clientv3.WithPrefix()); err != nil {
				t.Fatalf("lose: delete prefix: %v", err)
			}
			return l
		},
		// etcd leases count whole seconds.
		MinTTL: time.Second,
	}
}

func TestConformance(t *testing.T) {
	ledgertest.Run(t, backend(t))
}
