package memory

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// benchLedger is a ledger with one pool of unbounded capacity and holder
// r1's session; bypass runs its writes on go-memdb's lock alone.
func benchLedger(b *testing.B, bypass bool) *Ledger {
	b.Helper()
	ctx := context.Background()
	l := New(ledger.Options{RecoveryWindow: -1}, nil)
	b.Cleanup(func() { l.Close() })
	l.s.writes.bypass = bypass
	spec := testSpec()
	spec.Engines[0].KVTokens, spec.Engines[0].Slots = ledger.MaxAmount, ledger.MaxAmount
	if _, err := l.Configure(ctx, spec); err != nil {
		b.Fatal(err)
	}
	if _, err := l.KeepAlive(ctx, testPool, "r1", time.Hour); err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkAcquireRelease measures one grant and one release with n other
// leases outstanding: the cost must grow with log n, not n.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprint("outstanding=", n), func(b *testing.B) {
			ctx := context.Background()
			l := benchLedger(b, false)
			req := ledger.AcquireRequest{
				Pool: testPool, Candidates: []ledger.EngineID{"e0"}, Tenant: testTenant, Priority: testPrio,
				KVTokens: 1, Slots: 1, Holder: "r1", TTL: time.Hour,
			}
			for i := range n {
				req.RequestID = ledger.RequestID(fmt.Sprint("fill-", i))
				if _, err := l.Acquire(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				req.RequestID = ledger.RequestID(fmt.Sprint("b-", i))
				g, err := l.Acquire(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := l.Release(ctx, g.Lease.Ref(), ledger.Usage{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAcquireReleaseParallel measures grants and releases from 256
// concurrent callers (a router's streams), through the serializer and,
// as the baseline in the same run, straight on go-memdb's writer lock.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	for _, mode := range []string{"lock", "combine"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			l := benchLedger(b, mode == "lock")
			var seq atomic.Int64
			b.SetParallelism(128)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				req := ledger.AcquireRequest{
					Pool: testPool, Candidates: []ledger.EngineID{"e0"}, Tenant: testTenant, Priority: testPrio,
					KVTokens: 1, Slots: 1, Holder: "r1", TTL: time.Hour,
				}
				for pb.Next() {
					req.RequestID = ledger.RequestID(fmt.Sprint("p-", seq.Add(1)))
					g, err := l.Acquire(ctx, req)
					if err != nil {
						b.Error(err)
						return
					}
					if _, err := l.Release(ctx, g.Lease.Ref(), ledger.Usage{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
