package redis_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// BenchmarkAcquireRelease measures one Acquire plus one Release against a
// local redis-server with a fixed number of other leases outstanding.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, outstanding := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("outstanding=%d", outstanding), func(b *testing.B) {
			srv := redisserver.Start(b)
			l := newLedger(b, srv, noWindow)
			spec := basicSpec()
			for i := range spec.Engines {
				spec.Engines[i].KVTokens, spec.Engines[i].Slots = ledger.MaxAmount, ledger.MaxAmount
			}
			mustConfigure(b, l, spec)
			mustKeepAlive(b, l, "llama", "h1", time.Hour)
			ctx := ctxT(b)
			for i := range outstanding {
				r := req("h1", fmt.Sprintf("bg-%d", i), 1, 1)
				r.TTL = time.Hour
				if _, err := l.Acquire(ctx, r); err != nil {
					b.Fatalf("Acquire: %v", err)
				}
			}
			for i := 0; b.Loop(); i++ {
				g, err := l.Acquire(ctx, req("h1", fmt.Sprintf("r-%d", i), 10, 1))
				if err != nil {
					b.Fatalf("Acquire: %v", err)
				}
				if _, err := l.Release(ctx, g.Lease.Ref(), ledger.Usage{}); err != nil {
					b.Fatalf("Release: %v", err)
				}
			}
		})
	}
}
