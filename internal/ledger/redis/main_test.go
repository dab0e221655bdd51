package redis_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/ledger"
	lhredis "github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var prefixSeq atomic.Int64

// newPrefix returns a key prefix no other ledger in this process uses.
func newPrefix() string { return fmt.Sprintf("t%d", prefixSeq.Add(1)) }

// newLedger returns a ledger with its own prefix on srv, closed at cleanup.
func newLedger(t testing.TB, srv *redisserver.Server, opts ledger.Options) *lhredis.Ledger {
	t.Helper()
	l, _ := newLedgerOn(t, srv.Client(), opts)
	return l
}

// newLedgerOn returns a ledger with its own prefix on client, closed at
// cleanup, and that prefix.
func newLedgerOn(t testing.TB, client goredis.UniversalClient, opts ledger.Options) (*lhredis.Ledger, string) {
	t.Helper()
	p := newPrefix()
	l := lhredis.New(client, lhredis.Options{Options: opts, Prefix: p})
	t.Cleanup(func() { _ = l.Close() })
	return l, p
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// noWindow disables the recovery window.
var noWindow = ledger.Options{RecoveryWindow: -1}

func basicSpec() ledger.PoolSpec {
	return ledger.PoolSpec{
		Name: "llama",
		Engines: []ledger.EngineSpec{
			{ID: "gpu-0", URL: "http://127.0.0.1:9001", KVTokens: 1000, Slots: 4},
			{ID: "gpu-1", URL: "http://127.0.0.1:9002", KVTokens: 1000, Slots: 4},
		},
		Tenants: []ledger.TenantSpec{
			{Name: "acme", KVShare: 1},
			{Name: "small", KVShare: 0.1, SlotShare: 0.25},
		},
		Priorities: []ledger.PrioritySpec{
			{Name: "interactive", MaxFill: 1},
			{Name: "batch", MaxFill: 0.7},
		},
		RetryAfter: 2 * time.Second,
	}
}

func mustConfigure(t testing.TB, l ledger.Ledger, spec ledger.PoolSpec) ledger.Epoch {
	t.Helper()
	ep, err := l.Configure(ctxT(t), spec)
	if err != nil {
		t.Fatalf("Configure(%s): %v", spec.Name, err)
	}
	return ep
}

func mustKeepAlive(t testing.TB, l ledger.Ledger, pool ledger.PoolID, h ledger.HolderID, ttl time.Duration) ledger.Session {
	t.Helper()
	s, err := l.KeepAlive(ctxT(t), pool, h, ttl)
	if err != nil {
		t.Fatalf("KeepAlive(%s, %s): %v", pool, h, err)
	}
	return s
}

func req(holder, id string, kv, slots int64, cands ...ledger.EngineID) ledger.AcquireRequest {
	if len(cands) == 0 {
		cands = []ledger.EngineID{"gpu-0", "gpu-1"}
	}
	return ledger.AcquireRequest{
		Pool: "llama", Candidates: cands, Tenant: "acme", Priority: "interactive",
		KVTokens: kv, Slots: slots, Holder: ledger.HolderID(holder), RequestID: ledger.RequestID(id),
		TTL: time.Minute,
	}
}
