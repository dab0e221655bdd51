package ledgertest

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Smoke configures pool "p" with one engine on l, takes its whole capacity,
// checks a second lease is refused, and releases the first: the check that a
// freshly opened ledger of any backend works end to end.
func Smoke(ctx context.Context, t testing.TB, l ledger.Ledger) {
	t.Helper()
	spec := ledger.PoolSpec{
		Name:       "p",
		Engines:    []ledger.EngineSpec{{ID: "e", KVTokens: 100, Slots: 1}},
		Tenants:    []ledger.TenantSpec{{Name: "t", KVShare: 1}},
		Priorities: []ledger.PrioritySpec{{Name: "std", MaxFill: 1}},
	}
	if _, err := l.Configure(ctx, spec); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	if _, err := l.KeepAlive(ctx, "p", "h", 5*time.Second); err != nil {
		t.Fatalf("KeepAlive: %v", err)
	}
	g, err := l.Acquire(ctx, ledger.AcquireRequest{Pool: "p", Candidates: []ledger.EngineID{"e"}, Tenant: "t",
		Priority: "std", KVTokens: 100, Slots: 1, Holder: "h", RequestID: "r", TTL: 5 * time.Second})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if _, err := l.Acquire(ctx, ledger.AcquireRequest{Pool: "p", Candidates: []ledger.EngineID{"e"}, Tenant: "t",
		Priority: "std", KVTokens: 1, Slots: 1, Holder: "h", RequestID: "r2", TTL: 5 * time.Second}); ledger.AsRejection(err) == nil {
		t.Fatalf("second Acquire on a full engine: %v, want a rejection", err)
	}
	if r, err := l.Release(ctx, g.Lease.Ref(), ledger.Usage{}); err != nil || !r.Released {
		t.Fatalf("Release = %+v, %v", r, err)
	}
}
