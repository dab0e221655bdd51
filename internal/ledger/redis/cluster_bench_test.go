package redis

// The Redis Cluster throughput figure of BenchmarkReport: grants per second
// with pools spread over three masters against the same pools all on one,
// on one cluster, in alternating rounds of the same run.

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/benchkit"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// clusterShards is how many masters the cluster benchmark spreads over.
const clusterShards = 3

// clusterPools returns perShard pool names on each of the cluster's
// masters: out[i] are pools whose slot master i serves.
func clusterPools(ctx context.Context, tb testing.TB, c *redisserver.Cluster, cc *goredis.ClusterClient, perShard int) [][]ledger.PoolID {
	tb.Helper()
	out := make([][]ledger.PoolID, len(c.Masters))
	left := perShard * len(c.Masters)
	for i := 0; left > 0; i++ {
		if i > 10000 {
			tb.Fatalf("no %d pools per master among 10,000 names", perShard)
		}
		pool := ledger.PoolID(fmt.Sprintf("pool-%d", i))
		keys, _ := keySchema(DefaultPrefix, pool)
		slot, err := cc.ClusterKeySlot(ctx, keys.State).Result()
		if err != nil {
			tb.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		m, err := c.MasterOf(ctx, int(slot))
		if err != nil {
			tb.Fatal(err)
		}
		if len(out[m]) < perShard {
			out[m] = append(out[m], pool)
			left--
		}
	}
	return out
}

// clusterLoad is one phase: callers run Acquire then Release of the same
// lease in a closed loop, caller c on pools[c%len(pools)].
func clusterLoad(ctx context.Context, led *Ledger, pools []ledger.PoolID, callers int, d time.Duration, tag string) benchkit.Result {
	return benchkit.Run(ctx, "", callers, d, func(ctx context.Context, c, seq int) error {
		r := benchkit.BenchRequest(pools[c%len(pools)], c, seq, tag)
		g, err := led.Acquire(ctx, r)
		if err != nil {
			return err
		}
		_, err = led.Release(ctx, g.Lease.Ref(), ledger.Usage{PromptTokens: 500, CompletionTokens: 200})
		return err
	})
}

// clusterThroughput starts a cluster of clusterShards masters and measures
// grants/s (Acquire+Release cycles) from 64 callers over 6 pools: all six
// on master 0, then two on each master, alternating for rounds, and writes
// the table. It returns the spread-over-one-shard ratio.
func clusterThroughput(ctx context.Context, tb testing.TB, out io.Writer, d time.Duration) float64 {
	tb.Helper()
	c := redisserver.StartShardedCluster(tb, clusterShards)
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs(), PoolSize: 64})
	defer cc.Close()
	led := New(cc, Options{Options: ledger.Options{RecoveryWindow: -1}})
	defer led.Close()
	const callers, perShard = 64, 6
	byShard := clusterPools(ctx, tb, c, cc, perShard)
	one := byShard[0]
	var spread []ledger.PoolID
	for i := range perShard / clusterShards * clusterShards {
		spread = append(spread, byShard[i%clusterShards][i/clusterShards])
	}
	for _, pools := range [][]ledger.PoolID{one, spread} {
		for _, p := range pools {
			if _, err := led.Configure(ctx, benchkit.BenchPool(p)); err != nil {
				tb.Fatalf("configure %s: %v", p, err)
			}
			for h := range callers {
				if _, err := led.KeepAlive(ctx, p, benchkit.BenchHolder(h), time.Hour); err != nil {
					tb.Fatalf("keepalive: %v", err)
				}
			}
		}
	}
	const rounds = 4
	var res [2]benchkit.Result
	for round := range rounds {
		for i, pools := range [][]ledger.PoolID{one, spread} {
			r := clusterLoad(ctx, led, pools, callers, d/2, fmt.Sprintf("c%d-%d-", round, i))
			res[i].Ops += r.Ops
			res[i].Errors += r.Errors
			res[i].Elapsed += r.Elapsed
			res[i].P50 += r.P50 / rounds
			res[i].P99 += r.P99 / rounds
		}
	}
	res[0].Name = fmt.Sprintf("%d pools on 1 master", len(one))
	res[1].Name = fmt.Sprintf("%d pools over %d masters", len(spread), clusterShards)
	res[0].Callers, res[1].Callers = callers, callers
	fmt.Fprintf(out, "\n| Redis Cluster, %d masters (grants: Acquire+Release) | callers | grants/s | p50 µs | p99 µs | vs 1 master |\n", clusterShards)
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|")
	for _, r := range res {
		fmt.Fprintln(out, benchkit.Row(r, res[0].Throughput()))
	}
	fmt.Fprintf(out, "\n(%d alternating rounds of %s each on one cluster; p50/p99 are the rounds' means.)\n", rounds, d/2)
	fmt.Fprintf(out, "Target: pools over %d masters ≥ 1.5× the same pools on one.\n", clusterShards)
	return res[1].Throughput() / res[0].Throughput()
}

// BenchmarkCluster prints only the cluster table of BenchmarkReport.
//
//	go test -run '^$' -bench '^BenchmarkCluster$' -benchtime 1x ./internal/ledger/redis/
func BenchmarkCluster(b *testing.B) {
	if testing.Short() {
		b.Skip("report benchmark: skipped in -short")
	}
	out := &strings.Builder{}
	clusterThroughput(context.Background(), b, out, benchkit.Phase())
	fmt.Print(out.String())
}
