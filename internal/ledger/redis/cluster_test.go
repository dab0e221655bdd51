package redis_test

import (
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// TestCluster runs every script on a one-node Redis Cluster, which refuses
// a script whose KEYS span two hash slots (CROSSSLOT): each pool's keys,
// the holder-set prefix included, must share the pool's slot (keys.go).
// Two pools land in two slots; every operation must succeed on each. A
// node that serves every slot does not check keys a script builds itself
// (the holder sets, from KEYS[8]); those are kept in the slot by
// construction.
func TestCluster(t *testing.T) {
	srv := redisserver.StartCluster(t)
	client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{srv.Addr()}})
	defer client.Close()
	l, _ := newLedgerOn(t, client, noWindow)
	ctx := ctxT(t)
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s on Redis Cluster: %v", what, err)
		}
	}
	for _, pool := range []ledger.PoolID{"llama", "mistral"} {
		spec := basicSpec()
		spec.Name, spec.GrowthHeadroom = pool, 0.1
		mustConfigure(t, l, spec)
		must("SetDraining", l.SetDraining(ctx, pool, "gpu-1", true))
		must("SetDraining off", l.SetDraining(ctx, pool, "gpu-1", false))
		_, err := l.Observe(ctx, ledger.Observation{Pool: pool, Engine: "gpu-0", KVTokensUsed: 10, KVTokensTotal: 900, ObservedAt: time.Now()})
		must("Observe", err)
		mustKeepAlive(t, l, pool, "h1", time.Minute)
		mustKeepAlive(t, l, pool, "h2", 50*time.Millisecond)
		r := req("h1", "a", 400, 1, "gpu-0")
		r.Pool = pool
		g, err := l.Acquire(ctx, r)
		must("Acquire", err)
		_, err = l.Renew(ctx, g.Lease.Ref(), time.Minute)
		must("Renew", err)
		_, err = l.Resize(ctx, g.Lease.Ref(), 500)
		must("Resize", err)
		rn, err := l.Grow(ctx, g.Lease.Ref(), 900)
		must("Grow", err)
		if !rn.Lease.Overgrown {
			t.Errorf("Grow(%s to 900 of gpu-0's reported 900, with 10 in use) = %+v, want overgrown", pool, rn.Lease)
		}
		x := g.Lease
		x.Fence = ledger.Fence{Epoch: g.Epoch, Seq: 99}
		x.ID, x.Holder, x.RequestID = ledger.MakeLeaseID(x.Fence), "h2", "b"
		_, err = l.Reassert(ctx, x, time.Minute)
		must("Reassert", err)
		ls, err := l.List(ctx, ledger.Filter{Pool: pool, Holder: "h1"})
		must("List", err)
		if len(ls) != 1 || ls[0] != rn.Lease {
			t.Errorf("List(%s, h1) = %+v, want %+v", pool, ls, rn.Lease)
		}
		_, err = l.Release(ctx, g.Lease.Ref(), ledger.Usage{PromptTokens: 5, CompletionTokens: 70, Finished: true})
		must("Release", err)
		time.Sleep(60 * time.Millisecond) // h2's session dies
		sw, err := l.Sweep(ctx, pool, 0)
		must("Sweep", err)
		if sw.Revoked != 1 {
			t.Errorf("Sweep(%s) = %+v, want h2's lease revoked", pool, sw)
		}
		st, err := l.Stats(ctx, pool)
		must("Stats", err)
		for _, name := range ledger.CompletionCounters(ledger.Usage{CompletionTokens: 70, Finished: true}, "acme") {
			if st.Counters[name] != 1 {
				t.Errorf("Stats(%s) counter %s = %d, want 1", pool, name, st.Counters[name])
			}
		}
	}
	pools, err := l.Pools(ctx)
	must("Pools", err)
	if !slices.Equal(pools, []ledger.PoolID{"llama", "mistral"}) {
		t.Errorf("Pools = %v, want [llama mistral]", pools)
	}
}
