package remote

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/holderkey"
	"github.com/leasehold/leasehold/internal/ledger/memory"
	"github.com/leasehold/leasehold/internal/reserver/rpc"
)

// TestHolderKeySent: the key of Options.HolderKey goes with every
// holder-scoped call and with no other; Dial draws a fresh key when none
// is given.
func TestHolderKeySent(t *testing.T) {
	var mu sync.Mutex // guards seen
	seen := map[string][]string{}
	record := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		seen[info.FullMethod] = md.Get(holderkey.MetadataKey)
		mu.Unlock()
		return h(ctx, req)
	}
	ml := memory.New(ledger.Options{RecoveryWindow: -1}, nil)
	t.Cleanup(func() { _ = ml.Close() })
	g, err := rpc.NewGRPCServer(ml, rpc.Config{Token: "admin"}, grpc.UnaryInterceptor(record))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	doneC := make(chan struct{})
	go func() { defer close(doneC); _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); <-doneC })

	k := holderkey.New()
	l, err := Dial("grpc://"+lis.Addr().String(), Options{Token: "admin", HolderKey: k})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if l.HolderKey() != k {
		t.Fatalf("HolderKey() is not Options.HolderKey")
	}
	ctx := t.Context()
	holder := ledger.HolderID("r/" + k.Suffix())
	spec := ledger.PoolSpec{Name: "p", Engines: []ledger.EngineSpec{{ID: "e", KVTokens: 100, Slots: 2}},
		Tenants: []ledger.TenantSpec{{Name: "t", KVShare: 1}}, Priorities: []ledger.PrioritySpec{{Name: "s", MaxFill: 1}}}
	if _, err := l.Configure(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := l.KeepAlive(ctx, "p", holder, time.Minute); err != nil {
		t.Fatal(err)
	}
	g1, err := l.Acquire(ctx, ledger.AcquireRequest{Pool: "p", Candidates: []ledger.EngineID{"e"}, Tenant: "t", Priority: "s",
		KVTokens: 10, Slots: 1, Holder: holder, RequestID: "q", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		func() error { _, err := l.Renew(ctx, g1.Lease.Ref(), time.Minute); return err }(),
		func() error { _, err := l.Resize(ctx, g1.Lease.Ref(), 10); return err }(),
		func() error { _, err := l.Grow(ctx, g1.Lease.Ref(), 11); return err }(),
		func() error { _, err := l.Reassert(ctx, g1.Lease, time.Minute); return err }(),
		func() error { _, err := l.Release(ctx, g1.Lease.Ref(), ledger.Usage{}); return err }(),
		l.SetDraining(ctx, "p", "e", false),
		func() error {
			_, err := l.Observe(ctx, ledger.Observation{Pool: "p", Engine: "e", ObservedAt: time.Now()})
			return err
		}(),
		func() error { _, err := l.Sweep(ctx, "p", 1); return err }(),
		func() error { _, err := l.Pools(ctx); return err }(),
		func() error { _, err := l.List(ctx, ledger.Filter{}); return err }(),
		func() error { _, err := l.Stats(ctx, "p"); return err }(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 14 {
		t.Errorf("saw %d methods, want all 14: %v", len(seen), seen)
	}
	for m, got := range seen {
		if holderMethods[m] {
			if len(got) != 1 || got[0] != k.Encode() {
				t.Errorf("%s carried %d holder keys (right one: %v); want exactly the Options.HolderKey", m, len(got), len(got) == 1 && got[0] == k.Encode())
			}
		} else if len(got) != 0 {
			t.Errorf("%s carried the holder key; want it only on holder-scoped calls", m)
		}
	}
	if len(holderMethods) != 7 {
		t.Errorf("holderMethods lists %d methods, want 7", len(holderMethods))
	}

	a, err := Dial("grpc://127.0.0.1:1", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Dial("grpc://127.0.0.1:1", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.HolderKey().IsZero() || a.HolderKey() == b.HolderKey() {
		t.Errorf("Dial without a HolderKey: zero %v, same as another Dial's %v; want a fresh key each", a.HolderKey().IsZero(), a.HolderKey() == b.HolderKey())
	}
}
