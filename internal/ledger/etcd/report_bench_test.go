package etcd_test

// BenchmarkReport measures the etcd ledger against a baseline taken in the
// same run on the same member: a raw single-key guarded Txn put through a
// bare clientv3 client. Run through `make bench`; it ignores b.N and runs
// each phase for a fixed duration (LEASEHOLD_BENCH_PHASE, default 2s).

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/internal/benchkit"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/etcd"
	"github.com/leasehold/leasehold/internal/testutil/etcdserver"
)

const benchPool = ledger.PoolID("bench")

func BenchmarkReport(b *testing.B) {
	if testing.Short() {
		b.Skip("report benchmark: skipped in -short")
	}
	ctx := context.Background()
	srv := etcdserver.Start(b, b.TempDir())
	cli := srv.Client(b)
	d := benchkit.Phase()
	run := 0
	fresh := func(callers int) *etcd.Ledger {
		run++
		l, err := etcd.New(cli, etcd.Options{Options: ledger.Options{RecoveryWindow: -1}, Prefix: fmt.Sprintf("/bench/%d/", run)})
		if err != nil {
			b.Fatalf("etcd.New: %v", err)
		}
		b.Cleanup(func() { l.Close() })
		if _, err := l.Configure(ctx, benchkit.BenchPool(benchPool)); err != nil {
			b.Fatalf("configure: %v", err)
		}
		for h := 0; h < callers; h++ {
			if _, err := l.KeepAlive(ctx, benchPool, benchkit.BenchHolder(h), time.Hour); err != nil {
				b.Fatalf("keepalive: %v", err)
			}
		}
		return l
	}
	out := &strings.Builder{}
	fmt.Fprintf(out, "\n### etcd ledger (embedded etcd server, one member, %s per phase)\n\n", d)
	fmt.Fprintln(out, "| operation | callers | ops/s | p50 µs | p99 µs | vs raw Txn put |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|")
	for _, callers := range []int{1, 16, 64} {
		run++
		rawPrefix := fmt.Sprintf("/raw/%d/", run)
		rawR := benchkit.Run(ctx, "raw single-key Txn put (baseline)", callers, d, func(ctx context.Context, c, seq int) error {
			k := rawPrefix + strconv.Itoa(c)
			_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "<", math.MaxInt64)).
				Then(clientv3.OpPut(k, strconv.Itoa(seq))).Commit()
			return err
		})
		l := fresh(callers)
		held := make([][]ledger.LeaseRef, callers)
		acqR := benchkit.Run(ctx, "ledger Acquire", callers, d, func(ctx context.Context, c, seq int) error {
			g, err := l.Acquire(ctx, benchkit.BenchRequest(benchPool, c, seq, "acq"))
			if err == nil {
				held[c] = append(held[c], g.Lease.Ref())
			}
			return err
		})
		relR := benchkit.Run(ctx, "ledger Release", callers, 10*d, func(ctx context.Context, c, seq int) error {
			if seq >= len(held[c]) {
				return benchkit.ErrStop
			}
			_, err := l.Release(ctx, held[c][seq], ledger.Usage{PromptTokens: 500, CompletionTokens: 200})
			return err
		})
		arR := benchkit.Run(ctx, "ledger Acquire+Release", callers, d, func(ctx context.Context, c, seq int) error {
			g, err := l.Acquire(ctx, benchkit.BenchRequest(benchPool, c, seq, "ar"))
			if err != nil {
				return err
			}
			_, err = l.Release(ctx, g.Lease.Ref(), ledger.Usage{})
			return err
		})
		base := rawR.Throughput()
		for _, r := range []benchkit.Result{rawR, acqR, relR, arR} {
			fmt.Fprintln(out, benchkit.Row(r, base))
		}
	}
	membersAndPools(ctx, b, out, d, cli)
	fmt.Print(out.String())
}

// membersAndPools measures Acquire+Release from 64 callers on one pool and
// spread over 8 pools, on the embedded member (cli) and on a three-member
// cluster of processes, in alternating rounds: what a grant costs on a
// replicated etcd, and how much of one pool's limit is the pool's
// serialization (its guarded transactions conflict) rather than etcd's.
func membersAndPools(ctx context.Context, b *testing.B, out io.Writer, d time.Duration, one *clientv3.Client) {
	three := etcdserver.StartCluster(b, 3).Client(b)
	const callers, rounds = 64, 2
	fmt.Fprintln(out, "\n| etcd | pools | callers | Acquire+Release ops/s | p50 µs | p99 µs | vs 1 member, 1 pool |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|")
	type variant struct {
		name  string
		cli   *clientv3.Client
		pools int
	}
	vs := []variant{{"1 member (embedded)", one, 1}, {"1 member (embedded)", one, 8}, {"3 members (processes)", three, 1}, {"3 members (processes)", three, 8}}
	res := make([]benchkit.Result, len(vs))
	for round := range rounds {
		for i, v := range vs {
			l, err := etcd.New(v.cli, etcd.Options{Options: ledger.Options{RecoveryWindow: -1}, Prefix: fmt.Sprintf("/members/%d/%d/", round, i)})
			if err != nil {
				b.Fatalf("etcd.New: %v", err)
			}
			pools := make([]ledger.PoolID, v.pools)
			for p := range pools {
				pools[p] = ledger.PoolID(fmt.Sprintf("bench-%d", p))
				if _, err := l.Configure(ctx, benchkit.BenchPool(pools[p])); err != nil {
					b.Fatalf("configure: %v", err)
				}
				for h := range callers {
					if _, err := l.KeepAlive(ctx, pools[p], benchkit.BenchHolder(h), time.Hour); err != nil {
						b.Fatalf("keepalive: %v", err)
					}
				}
			}
			r := benchkit.Run(ctx, "", callers, d/2, func(ctx context.Context, c, seq int) error {
				g, err := l.Acquire(ctx, benchkit.BenchRequest(pools[c%len(pools)], c, seq, "m"))
				if err != nil {
					return err
				}
				_, err = l.Release(ctx, g.Lease.Ref(), ledger.Usage{})
				return err
			})
			_ = l.Close()
			res[i].Ops += r.Ops
			res[i].Errors += r.Errors
			res[i].Elapsed += r.Elapsed
			res[i].P50 += r.P50 / rounds
			res[i].P99 += r.P99 / rounds
		}
	}
	for i, v := range vs {
		r := res[i]
		r.Name = fmt.Sprintf("%s | %d", v.name, v.pools)
		r.Callers = callers
		fmt.Fprintln(out, benchkit.Row(r, res[0].Throughput()))
	}
	fmt.Fprintf(out, "\n(%d alternating rounds of %s per variant; p50/p99 are the rounds' means.)\n", rounds, d/2)
}
