package lease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/memory"
)

// A router leases before it dispatches, stops using the lease when Done
// closes, and releases it with the actual usage.
func Example() {
	ctx := context.Background()
	l := memory.New(ledger.Options{RecoveryWindow: -1}, nil)
	defer l.Close()
	if _, err := l.Configure(ctx, ledger.PoolSpec{
		Name:       "llama-3-70b",
		Engines:    []ledger.EngineSpec{{ID: "gpu-0", KVTokens: 400000, Slots: 256}},
		Tenants:    []ledger.TenantSpec{{Name: "acme", KVShare: 0.5}},
		Priorities: []ledger.PrioritySpec{{Name: "interactive", MaxFill: 0.95}},
	}); err != nil {
		fmt.Println(err)
		return
	}

	m, err := lease.New(lease.Config{
		Ledger:     l,
		Pools:      []ledger.PoolID{"llama-3-70b"},
		HolderName: "router-a",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close(ctx)
	readyCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := m.WaitReady(readyCtx); err != nil {
		fmt.Println(err)
		return
	}

	h, err := m.Acquire(ctx, ledger.AcquireRequest{
		Pool: "llama-3-70b", Candidates: []ledger.EngineID{"gpu-0"},
		Tenant: "acme", Priority: "interactive", KVTokens: 4096, Slots: 1,
		RequestID: "req-1",
	})
	if err != nil {
		fmt.Println(err) // a *ledger.Rejection maps to 503/429 with Retry-After
		return
	}
	fmt.Println("reserved on", h.Lease().Engine, m.Snapshot().Engine("llama-3-70b", "gpu-0").KVTokens)

	select {
	case <-h.Done(): // fenced or lost: cancel the upstream request
		fmt.Println("stop:", h.Err())
	case <-time.After(10 * time.Millisecond): // the upstream request finished
	}
	if err := h.Release(ledger.Usage{PromptTokens: 1000, CompletionTokens: 200}); err != nil {
		fmt.Println(err)
	}
	fmt.Println("held after release:", m.Stats().Held)
	// Output:
	// reserved on gpu-0 4096
	// held after release: 0
}
