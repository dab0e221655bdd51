package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/memory"
)

// BenchmarkAcquireRelease measures what one request's lease costs a router
// on an in-process ledger: Manager.Acquire, then Release, one caller at a
// time and from 64 concurrent callers (a router's streams). The fleet is
// so large that nothing is refused.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, mode := range []struct {
		name        string
		parallelism int // × GOMAXPROCS callers; 0: one
	}{{"serial", 0}, {"parallel", 32}} {
		b.Run(mode.name, func(b *testing.B) {
			ctx := context.Background()
			l := memory.New(ledger.Options{RecoveryWindow: -1}, nil)
			defer l.Close()
			s := spec()
			for i := range s.Engines {
				s.Engines[i].KVTokens, s.Engines[i].Slots = ledger.MaxAmount, ledger.MaxAmount
			}
			if _, err := l.Configure(ctx, s); err != nil {
				b.Fatal(err)
			}
			m, err := lease.New(lease.Config{Ledger: l, Pools: []ledger.PoolID{pool}, HolderName: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close(ctx)
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := m.WaitReady(rctx); err != nil {
				b.Fatal(err)
			}
			one := func() {
				h, err := m.Acquire(ctx, request(64))
				if err != nil {
					b.Fatal(err)
				}
				if err := h.Release(ledger.Usage{PromptTokens: 40, CompletionTokens: 8, Finished: true}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			if mode.parallelism == 0 {
				for b.Loop() {
					one()
				}
				return
			}
			b.SetParallelism(mode.parallelism)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					one()
				}
			})
		})
	}
}
