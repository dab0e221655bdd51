package redis_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/ledgertest"
	lhredis "github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// TestConformance runs the shared suite against one redis-server; each
// ledger gets its own key prefix, and losing a ledger deletes its keys, as a
// restart without persistence or a FLUSHALL would.
func TestConformance(t *testing.T) {
	srv := redisserver.Start(t)
	client := srv.Client()
	var mu sync.Mutex // guards prefixes
	prefixes := map[ledger.Ledger]string{}
	ledgertest.Run(t, ledgertest.Backend{
		Name: "redis",
		New: func(t testing.TB, opts ledger.Options) ledger.Ledger {
			p := newPrefix()
			l := lhredis.New(client, lhredis.Options{Options: opts, Prefix: p})
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
			deleteKeys(t, ctx, client, p)
			return l
		},
	})
}
