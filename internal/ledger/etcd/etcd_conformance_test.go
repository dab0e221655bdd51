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

// backend makes ledgers on one etcd member, each under its own prefix, in
// the production configuration: the watch-driven sweeper on and the default
// LeaseSlack. A deadline marker then ends at most about 1.1s after its
// deadline (TTL rounded up to whole seconds, or a shared etcd lease up to
// LeaseSlack plus one 100ms bucket late) plus etcd's 500ms expiry tick,
// inside the suite's 2*MinTTL allowance.
func backend(t *testing.T) ledgertest.Backend {
	srv := etcdserver.Start(t, t.TempDir())
	return backendOn(srv.Client(t), "etcd", "/conformance")
}

// backendOn is backend's ledgers on cli (one member or a cluster), named
// name, each under its own prefix below root.
func backendOn(cli *clientv3.Client, name, root string) ledgertest.Backend {
	return ledgertest.Backend{
		Name: name,
		New: func(t testing.TB, opts ledger.Options) ledger.Ledger {
			l, err := etcd.New(cli, etcd.Options{
				Options: opts,
				Prefix:  fmt.Sprintf("%s/%d/", root, prefixes.Add(1)),
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
		// The watcher ends expired leases and dead sessions between calls.
		BackgroundSweep: true,
	}
}

func TestConformance(t *testing.T) {
	ledgertest.Run(t, backend(t))
}
