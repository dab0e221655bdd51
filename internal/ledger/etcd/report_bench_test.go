package etcd_test

// BenchmarkReport measures the etcd ledger against a baseline taken in the
// same run on the same member: a raw single-key guarded Txn put through a
// bare clientv3 client. Run through `make bench`; it ignores b.N and runs
// each phase for a fixed duration (LEASEHOLD_BENCH_PHASE, default 2s).

import (
	"context"
	"fmt"
	"math"
	"os"
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

func benchDuration() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("LEASEHOLD_BENCH_PHASE")); err == nil && d > 0 {
		return d
	}
	return 2 * time.Second
}

func benchSpec() ledger.PoolSpec {
	s := ledger.PoolSpec{
		Name:       benchPool,
		Tenants:    []ledger.TenantSpec{{Name: "acme", KVShare: 1}},
		Priorities: []ledger.PrioritySpec{{Name: "standard", MaxFill: 1}},
	}
	for i := 0; i < 4; i++ {
		s.Engines = append(s.Engines, ledger.EngineSpec{ID: ledger.EngineID(fmt.Sprintf("gpu-%d", i)), KVTokens: ledger.MaxAmount, Slots: ledger.MaxAmount})
	}
	return s
}

func holder(c int) ledger.HolderID { return ledger.HolderID("h" + strconv.Itoa(c)) }

func benchReq(c, seq int, tag string) ledger.AcquireRequest {
	return ledger.AcquireRequest{
		Pool: benchPool, Candidates: []ledger.EngineID{"gpu-0", "gpu-1", "gpu-2", "gpu-3"},
		Tenant: "acme", Priority: "standard", KVTokens: 1000 + int64(seq%3000), Slots: 1,
		Holder: holder(c), RequestID: ledger.RequestID(tag + strconv.Itoa(seq)), TTL: time.Hour,
	}
}

func BenchmarkReport(b *testing.B) {
	if testing.Short() {
		b.Skip("report benchmark: skipped in -short")
	}
	ctx := context.Background()
	srv := etcdserver.Start(b, b.TempDir())
	cli := srv.Client(b)
	d := benchDuration()
	run := 0
	fresh := func(callers int) *etcd.Ledger {
		run++
		l, err := etcd.New(cli, etcd.Options{Options: ledger.Options{RecoveryWindow: -1}, Prefix: fmt.Sprintf("/bench/%d/", run)})
		if err != nil {
			b.Fatalf("etcd.New: %v", err)
		}
		b.Cleanup(func() { l.Close() })
		if _, err := l.Configure(ctx, benchSpec()); err != nil {
			b.Fatalf("configure: %v", err)
		}
		for h := 0; h < callers; h++ {
			if _, err := l.KeepAlive(ctx, benchPool, holder(h), time.Hour); err != nil {
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
			g, err := l.Acquire(ctx, benchReq(c, seq, "acq"))
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
			g, err := l.Acquire(ctx, benchReq(c, seq, "ar"))
			if err != nil {
				return err
			}
			_, err = l.Release(ctx, g.Lease.Ref(), ledger.Usage{})
			return err
		})
		base := rawR.Throughput()
		for _, r := range []benchkit.Result{rawR, acqR, relR, arR} {
			errs := ""
			if r.Errors > 0 {
				errs = fmt.Sprintf(" (%d errors)", r.Errors)
			}
			fmt.Fprintf(out, "| %s | %d | %.0f%s | %s | %s | %s |\n", r.Name, r.Callers, r.Throughput(), errs,
				benchkit.Micros(r.P50), benchkit.Micros(r.P99), benchkit.Ratio(r.Throughput(), base))
		}
	}
	fmt.Print(out.String())
}
