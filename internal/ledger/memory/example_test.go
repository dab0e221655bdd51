package memory_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/memory"
)

// fixedClock is a ledger clock stopped at one instant.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

// A reserver configures its pool, a router starts a holder session, reserves
// capacity before dispatching, and releases it with the actual usage.
func Example() {
	ctx := context.Background()
	l := memory.New(ledger.Options{RecoveryWindow: -1}, fixedClock{time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)})
	defer l.Close()

	_, err := l.Configure(ctx, ledger.PoolSpec{
		Name:       "llama-3-70b",
		Engines:    []ledger.EngineSpec{{ID: "gpu-0", KVTokens: 4000, Slots: 8}},
		Tenants:    []ledger.TenantSpec{{Name: "acme", KVShare: 1}},
		Priorities: []ledger.PrioritySpec{{Name: "interactive", MaxFill: 0.95}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := l.KeepAlive(ctx, "llama-3-70b", "router-a", 10*time.Second); err != nil {
		fmt.Println(err)
		return
	}
	req := ledger.AcquireRequest{
		Pool: "llama-3-70b", Candidates: []ledger.EngineID{"gpu-0"}, Tenant: "acme", Priority: "interactive",
		KVTokens: 3000, Slots: 1, Holder: "router-a", RequestID: "req-1", TTL: 30 * time.Second,
	}
	g, err := l.Acquire(ctx, req)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("granted on", g.Lease.Engine, "fence seq", g.Lease.Fence.Seq)

	req.RequestID, req.KVTokens = "req-2", 900 // 3900 fits 4000, not the 95% fill
	_, err = l.Acquire(ctx, req)
	if rej := ledger.AsRejection(err); errors.Is(err, ledger.ErrRejected) {
		fmt.Println("rejected:", rej.Reason, "retry after", rej.RetryAfter)
	}

	r, err := l.Release(ctx, g.Lease.Ref(), ledger.Usage{PromptTokens: 812, CompletionTokens: 1400})
	fmt.Println("released:", r.Released, err)
	// Output:
	// granted on gpu-0 fence seq 1
	// rejected: priority_headroom retry after 1s
	// released: true <nil>
}
