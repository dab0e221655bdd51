package redis_test

import (
	"context"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/ledgertest"
	lhredis "github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// TestConformance runs the shared suite against one redis-server; each
// ledger gets its own key prefix, and losing a ledger deletes its keys, as a
// restart without persistence or a FLUSHALL would.
func TestConformance(t *testing.T) {
	conformance(t, "redis", redisserver.Start(t), 0)
}

// TestConformanceWaitReplicas runs the suite again with every change
// acknowledged only once a replica has it (Options.WaitReplicas).
func TestConformanceWaitReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("the suite with WAIT: skipped in -short")
	}
	primary := redisserver.Start(t)
	redisserver.StartReplica(t, primary)
	conformance(t, "redis+wait", primary, 1)
}

func conformance(t *testing.T, name string, srv *redisserver.Server, waitReplicas int) {
	client := srv.Client()
	conformanceOn(t, name, client, waitReplicas, func(ctx context.Context, p string) { deleteKeys(t, ctx, client, p) })
}

// conformanceOn runs the suite on client; lose deletes every key under a
// ledger's prefix.
func conformanceOn(t *testing.T, name string, client goredis.UniversalClient, waitReplicas int, lose func(ctx context.Context, prefix string)) {
	var mu sync.Mutex // guards prefixes
	prefixes := map[ledger.Ledger]string{}
	ledgertest.Run(t, ledgertest.Backend{
		Name: name,
		New: func(t testing.TB, opts ledger.Options) ledger.Ledger {
			p := newPrefix()
			l := lhredis.New(client, lhredis.Options{Options: opts, Prefix: p, WaitReplicas: waitReplicas, WaitTimeout: 2 * time.Second})
			mu.Lock()
			prefixes[l] = p
			mu.Unlock()
			return l
		},
		Lose: func(t testing.TB, l ledger.Ledger) ledger.Ledger {
			mu.Lock()
			p := prefixes[l]
			mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			lose(ctx, p)
			return l
		},
	})
}
