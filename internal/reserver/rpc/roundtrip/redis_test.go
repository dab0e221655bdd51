package roundtrip

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/ledgertest"
	lhredis "github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/ledger/remote"
	"github.com/leasehold/leasehold/internal/reserver/rpc"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

var prefixSeq atomic.Int64

// newPrefix returns a Redis key prefix no other ledger in this process uses.
func newPrefix() string { return fmt.Sprintf("remote-t%d", prefixSeq.Add(1)) }

// TestConformanceRedis runs the shared suite against a reserver whose
// ledger is the Redis backend on a real redis-server. Subtests run one after
// another, so losing a ledger can flush the whole server.
//
// make test-scenarios runs it (LEASEHOLD_TEST_SCENARIOS_ALL=1): make test
// already runs the suite on the Redis ledger itself (package redis) and on
// a reserver over gRPC (TestConformance), and this crossing of the two
// took some 40 s of a make test at its ten-minute line.
func TestConformanceRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the Redis conformance run")
	}
	if os.Getenv("LEASEHOLD_TEST_SCENARIOS_ALL") == "" {
		t.Skip("set LEASEHOLD_TEST_SCENARIOS_ALL=1 (make test-scenarios) to run the suite through a reserver on Redis")
	}
	srv := redisserver.Start(t)
	client := srv.Client()
	ledgertest.Run(t, ledgertest.Backend{
		Name: "remote(redis)",
		New: func(t testing.TB, opts ledger.Options) ledger.Ledger {
			r := startReserver(t, lhredis.New(client, lhredis.Options{Options: opts, Prefix: newPrefix()}), rpc.Config{Token: testToken})
			return dial(t, r, remote.Options{Token: testToken})
		},
		Lose: func(t testing.TB, l ledger.Ledger) ledger.Ledger {
			srv.FlushAll()
			return l
		},
	})
}

// TestRedisEndToEnd acquires and releases through a reserver on Redis with
// a per-router token, and checks the rejection and the Redis state.
func TestRedisEndToEnd(t *testing.T) {
	srv := redisserver.Start(t)
	back := lhredis.New(srv.Client(), lhredis.Options{Options: ledger.Options{RecoveryWindow: -1}, Prefix: newPrefix()})
	r := startReserver(t, back, rpc.Config{Token: testToken, RouterTokens: map[string]string{"router-a": "tok-a"}})
	admin := dial(t, r, remote.Options{Token: testToken})
	router := dial(t, r, remote.Options{Token: "tok-a"})
	ctx := t.Context()

	spec := ledger.PoolSpec{
		Name:       "llama",
		Engines:    []ledger.EngineSpec{{ID: "gpu-0", KVTokens: 1000, Slots: 4}, {ID: "gpu-1", KVTokens: 1000, Slots: 4}},
		Tenants:    []ledger.TenantSpec{{Name: "acme", KVShare: 1}},
		Priorities: []ledger.PrioritySpec{{Name: "interactive", MaxFill: 1}},
		RetryAfter: 1500 * time.Millisecond,
	}
	epoch, err := admin.Configure(ctx, spec)
	if err != nil {
		t.Fatalf("Configure: %v", err)
	}
	if _, err := router.Configure(ctx, spec); !errors.Is(err, ledger.ErrPermissionDenied) {
		t.Errorf("Configure with a router token error = %v, want ErrPermissionDenied", err)
	}
	// A router's holder ids are derived from the key its connection sends.
	holder := ledger.HolderID("router-a/" + router.HolderKey().Suffix())
	if _, err := router.KeepAlive(ctx, "llama", holder, time.Minute); err != nil {
		t.Fatalf("KeepAlive: %v", err)
	}
	req := ledger.AcquireRequest{
		Pool: "llama", Candidates: []ledger.EngineID{"gpu-0"}, Tenant: "acme", Priority: "interactive",
		KVTokens: 800, Slots: 1, Holder: holder, RequestID: "req-1", TTL: time.Minute,
	}
	g, err := router.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if g.Lease.Engine != "gpu-0" || g.Lease.KVTokens != 800 || g.Epoch != epoch || g.Lease.Fence.Epoch != epoch {
		t.Errorf("Acquire grant = %+v, want 800 KV tokens on gpu-0 in epoch %d", g, epoch)
	}
	again, err := router.Acquire(ctx, req)
	if err != nil || !again.Replayed || again.Lease.ID != g.Lease.ID {
		t.Errorf("Acquire retry = %+v, %v; want the same lease, replayed", again, err)
	}

	req2 := req
	req2.RequestID, req2.KVTokens = "req-2", 300
	_, err = router.Acquire(ctx, req2)
	rej := ledger.AsRejection(err)
	want := ledger.Rejection{Reason: ledger.ReasonEngineKV, Engine: "gpu-0", RetryAfter: 1500 * time.Millisecond, Epoch: epoch}
	if rej == nil || *rej != want {
		t.Fatalf("Acquire over capacity error = %v, want rejection %+v", err, want)
	}

	st, err := admin.Stats(ctx, "llama")
	if err != nil || len(st.Engines) != 2 || st.Engines[0].ReservedKV != 800 {
		t.Fatalf("Stats = %+v, %v; want 800 KV tokens reserved on gpu-0", st, err)
	}
	rel, err := router.Release(ctx, g.Lease.Ref(), ledger.Usage{PromptTokens: 100, CompletionTokens: 50})
	if err != nil || !rel.Released {
		t.Fatalf("Release = %+v, %v; want released", rel, err)
	}
	if rel, err := router.Release(ctx, g.Lease.Ref(), ledger.Usage{}); err != nil || rel.Released {
		t.Errorf("Release again = %+v, %v; want Released=false, no error", rel, err)
	}
	st, err = admin.Stats(ctx, "llama")
	if err != nil || st.Engines[0].ReservedKV != 0 || st.Counters[ledger.CounterActualPrompt] != 100 {
		t.Errorf("Stats after release = %+v, %v; want nothing reserved and 100 actual prompt tokens", st, err)
	}
	if _, err := router.Renew(ctx, g.Lease.Ref(), time.Minute); !errors.Is(err, ledger.ErrLeaseNotFound) {
		t.Errorf("Renew of a released lease error = %v, want ErrLeaseNotFound", err)
	}
}
