package redis_test

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// TestLayoutBeforeReservationModes checks the scripts read what the
// layout before reservation modes wrote (see the package doc): a meta
// without reserve and growth_headroom reads as elastic with no headroom,
// a lease record without overgrown as not overgrown, and a Grow past
// capacity writes the flag into the record, where List finds it.
func TestLayoutBeforeReservationModes(t *testing.T) {
	srv := redisserver.Start(t)
	client := srv.Client()
	ctx := ctxT(t)
	l, p := newLedgerOn(t, client, noWindow)
	spec := basicSpec()
	spec.Reserve = ledger.ReserveWorstCase
	mustConfigure(t, l, spec)
	mustKeepAlive(t, l, "llama", "h1", time.Minute)
	g, err := l.Acquire(ctx, req("h1", "a", 600, 1, "gpu-0"))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	state, leases := p+":{llama}:state", p+":{llama}:leases"
	// Rewrite both as the earlier scripts wrote them.
	meta := client.HGet(ctx, state, "meta").Val()
	if f := strings.Fields(meta); len(f) != 7 || f[5] != "worst_case" || f[6] != "0" {
		t.Fatalf("meta = %q, want 7 fields ending in worst_case 0", meta)
	}
	rec := client.HGet(ctx, leases, string(g.Lease.ID)).Val()
	if f := strings.Fields(rec); len(f) != 15 || f[14] != "0" {
		t.Fatalf("lease record = %q, want 15 fields ending in overgrown 0", rec)
	}
	client.HSet(ctx, state, "meta", strings.Join(strings.Fields(meta)[:5], " "))
	client.HSet(ctx, leases, string(g.Lease.ID), strings.Join(strings.Fields(rec)[:14], " "))

	st, err := l.Stats(ctx, "llama")
	if err != nil || st.Reserve != ledger.ReserveElastic || st.GrowthHeadroom != 0 {
		t.Fatalf("Stats of the old meta = reserve %q headroom %v, %v; want elastic, 0", st.Reserve, st.GrowthHeadroom, err)
	}
	if ls, err := l.List(ctx, ledger.Filter{Pool: "llama"}); err != nil || len(ls) != 1 || ls[0] != g.Lease {
		t.Fatalf("List of the old record = %+v, %v; want %+v", ls, err, g.Lease)
	}
	// Another lease fills gpu-0 to 900 of 1000: growing a by 200 passes it.
	if _, err := l.Acquire(ctx, req("h1", "b", 300, 1, "gpu-0")); err != nil {
		t.Fatalf("Acquire b: %v", err)
	}
	r, err := l.Grow(ctx, g.Lease.Ref(), 800)
	if err != nil || r.Lease.KVTokens != 800 || !r.Lease.Overgrown {
		t.Fatalf("Grow(a to 800 past gpu-0's capacity) = %+v, %v; want 800, overgrown", r.Lease, err)
	}
	if f := strings.Fields(client.HGet(ctx, leases, string(g.Lease.ID)).Val()); len(f) != 15 || f[14] != "1" {
		t.Errorf("lease record after the overgrowth = %q, want overgrown 1 last", f)
	}
	if ls, err := l.List(ctx, ledger.Filter{Pool: "llama", Engine: "gpu-0"}); err != nil || len(ls) != 2 || ls[0] != r.Lease {
		t.Errorf("List after the overgrowth = %+v, %v; want %+v first", ls, err, r.Lease)
	}
	if rn, err := l.Renew(ctx, r.Lease.Ref(), time.Minute); err != nil || !rn.Lease.Overgrown {
		t.Errorf("Renew of the overgrown lease = %+v, %v; want the flag kept", rn.Lease, err)
	}
}
