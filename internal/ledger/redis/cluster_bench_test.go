package redis

// The Redis Cluster throughput figures of BenchmarkReport: grants per
// second with pools spread over three masters against the same number of
// pools all on one master, on one cluster, in alternating rounds of the
// same run, with where the CPU went: the Redis servers' and this process's
// (the load generator's) CPU time per grant.

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
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
		m := poolMaster(ctx, tb, c, cc, DefaultPrefix, pool)
		if len(out[m]) < perShard {
			out[m] = append(out[m], pool)
			left--
		}
	}
	return out
}

// poolMaster returns the index in c.Masters of the master serving pool's
// slot, under key prefix.
func poolMaster(ctx context.Context, tb testing.TB, c *redisserver.Cluster, cc *goredis.ClusterClient, prefix string, pool ledger.PoolID) int {
	tb.Helper()
	keys, _ := keySchema(prefix, pool)
	slot, err := cc.ClusterKeySlot(ctx, keys.State).Result()
	if err != nil {
		tb.Fatalf("CLUSTER KEYSLOT: %v", err)
	}
	m, err := c.MasterOf(ctx, int(slot))
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// clusterPool is a pool of 10 engines (the capacity model's: 10,000
// engines in 1,000 pools) so large that no grant is refused.
func clusterPool(name ledger.PoolID) ledger.PoolSpec {
	s := benchkit.BenchPool(name)
	s.Engines = nil
	for i := range 10 {
		s.Engines = append(s.Engines, ledger.EngineSpec{ID: ledger.EngineID(fmt.Sprintf("gpu-%d", i)), KVTokens: ledger.MaxAmount, Slots: ledger.MaxAmount})
	}
	return s
}

// clusterCandidates[k] lists a clusterPool's 10 engines starting at gpu-k:
// the candidate lists clusterRequest rotates through, built once (callers
// only read them).
var clusterCandidates = func() (out [10][]ledger.EngineID) {
	for k := range out {
		for i := range 10 {
			out[k] = append(out[k], ledger.EngineID(fmt.Sprintf("gpu-%d", (k+i)%10)))
		}
	}
	return out
}()

// clusterRequest is benchkit.BenchRequest on a clusterPool, every engine a
// candidate, the first one rotating.
func clusterRequest(pool ledger.PoolID, c, seq int, tag string) ledger.AcquireRequest {
	r := benchkit.BenchRequest(pool, c, seq, tag)
	r.Candidates = clusterCandidates[seq%10]
	return r
}

// clusterAPILoad is one phase through the ledger API: callers run Acquire
// then Release of the same lease in a closed loop, caller c on
// pools[c%len(pools)]. One op is one grant.
func clusterAPILoad(led *Ledger, pools []ledger.PoolID, tag string) benchkit.Op {
	return func(ctx context.Context, c, seq int) error {
		r := clusterRequest(pools[c%len(pools)], c, seq, tag)
		g, err := led.Acquire(ctx, r)
		if err != nil {
			return err
		}
		_, err = led.Release(ctx, g.Lease.Ref(), ledger.Usage{PromptTokens: 500, CompletionTokens: 200})
		return err
	}
}

// clusterBatch is how many grants a pipelined caller sends per round trip.
const clusterBatch = 64

// clusterRawLoad is one phase of the same scripts sent the way a load
// generator finds a server's capacity (as redis-benchmark -P does, on
// GOMAXPROCS 1): caller c, on its own connection to the master of
// pools[c%len(pools)], pipelines clusterBatch acquire calls, then the
// release calls of the leases they granted (respConn: no client library
// between the generator and the wire). One op is clusterBatch grants.
type clusterRawLoad struct {
	led   *Ledger
	pools []ledger.PoolID
	conns []*respConn
}

func newClusterRawLoad(ctx context.Context, tb testing.TB, led *Ledger, c *redisserver.Cluster, cc *goredis.ClusterClient, pools []ledger.PoolID, callers int) *clusterRawLoad {
	tb.Helper()
	l := &clusterRawLoad{led: led, pools: pools}
	for i := range callers {
		m := poolMaster(ctx, tb, c, cc, led.s.opts.Prefix, pools[i%len(pools)])
		rc, err := dialRESP(c.Masters[m].Addr())
		if err != nil {
			tb.Fatalf("dial master %d: %v", m, err)
		}
		tb.Cleanup(func() { rc.Close() })
		l.conns = append(l.conns, rc)
	}
	return l
}

func (l *clusterRawLoad) op(tag string) benchkit.Op {
	s := l.led.s
	argv1 := s.argv1(s.opts.SweepBatch)
	return func(ctx context.Context, c, seq int) error {
		pool, rc := l.pools[c%len(l.pools)], l.conns[c]
		acq := s.heads.get(s.opts.Prefix, s.scripts.acquire, pool).head
		rel := s.heads.get(s.opts.Prefix, s.scripts.release, pool).head
		var reqs [clusterBatch]ledger.AcquireRequest
		for i := range clusterBatch {
			reqs[i] = clusterRequest(pool, c, seq*clusterBatch+i, tag)
			if err := rc.add(acq, append([]any{argv1}, acquireArgv(reqs[i])...)...); err != nil {
				return err
			}
		}
		i := 0
		if err := rc.exchange(clusterBatch, func(r reply) error {
			g, err := decodeAcquire(reqs[i], r)
			i++
			if err != nil {
				return err
			}
			return rc.add(rel, argv1, string(g.Lease.ID), string(g.Lease.Holder), "500", "200", "", "")
		}); err != nil {
			return err
		}
		return rc.exchange(clusterBatch, func(reply) error { return nil })
	}
}

// cpuSpent is CPU time used: the Redis masters' (INFO cpu, every master)
// and this process's (getrusage).
type cpuSpent struct{ redis, self time.Duration }

func (a cpuSpent) minus(b cpuSpent) cpuSpent { return cpuSpent{a.redis - b.redis, a.self - b.self} }

func readCPU(ctx context.Context, tb testing.TB, c *redisserver.Cluster) cpuSpent {
	tb.Helper()
	var out cpuSpent
	for _, m := range c.Masters {
		info, err := m.Client().Info(ctx, "cpu").Result()
		if err != nil {
			tb.Fatalf("INFO cpu: %v", err)
		}
		for _, line := range strings.Split(info, "\n") {
			name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
				f, _ := strconv.ParseFloat(v, 64)
				out.redis += time.Duration(f * float64(time.Second))
			}
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	out.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return out
}

// clusterRow is one layout's sums over the rounds.
type clusterRow struct {
	benchkit.Result
	cpu    cpuSpent
	grants int
}

// ClusterFigures are what clusterThroughput measured: spread-over-one
// ratios of grants/s through the API and pipelined.
type ClusterFigures struct{ API, Pipelined float64 }

// clusterThroughput starts a cluster of clusterShards masters and, for
// each load generator (the ledger API, 64 callers; pipelined scripts, 12
// callers), measures grants/s over 6 pools of 10 engines all on master 0,
// then 2 on each master, alternating for 8 rounds, and writes the table.
func clusterThroughput(ctx context.Context, tb testing.TB, out io.Writer, d time.Duration) ClusterFigures {
	tb.Helper()
	c := redisserver.StartShardedCluster(tb, clusterShards)
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs(), PoolSize: 64})
	defer cc.Close()
	led := New(cc, Options{Options: ledger.Options{RecoveryWindow: -1}})
	defer led.Close()
	const apiCallers, pipeCallers, perShard = 64, 12, 6
	byShard := clusterPools(ctx, tb, c, cc, perShard)
	layouts := [2][]ledger.PoolID{byShard[0]}
	for i := range perShard {
		layouts[1] = append(layouts[1], byShard[i%clusterShards][i/clusterShards])
	}
	for _, pools := range layouts {
		for _, p := range pools {
			if _, err := led.Configure(ctx, clusterPool(p)); err != nil {
				tb.Fatalf("configure %s: %v", p, err)
			}
			for h := range apiCallers {
				if _, err := led.KeepAlive(ctx, p, benchkit.BenchHolder(h), time.Hour); err != nil {
					tb.Fatalf("keepalive: %v", err)
				}
			}
		}
	}
	// Load the library on every master before the first timed phase.
	if err := loadLibrary(ctx, cc, led.s.scripts.lib); err != nil {
		tb.Fatalf("function load: %v", err)
	}
	fmt.Fprintf(out, "\n| Redis Cluster, %d masters: 6 pools | load | callers | grants/s | p50 µs per op | Redis CPU µs/grant | load generator CPU µs/grant | vs 1 master |\n", clusterShards)
	fmt.Fprintln(out, "|---|---|---:|---:|---:|---:|---:|---:|")
	var figs ClusterFigures
	var raw [2]*clusterRawLoad
	for i, pools := range layouts {
		raw[i] = newClusterRawLoad(ctx, tb, led, c, cc, pools, pipeCallers)
	}
	const rounds = 8
	medians := map[string]float64{}
	for _, mode := range []string{"API", "pipelined"} {
		if mode == "pipelined" {
			// The generator of server capacity keeps to one core's worth of
			// threads, leaving the other to the masters.
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		}
		var rows [2]clusterRow
		var ratios []float64
		for round := range rounds {
			var tput [2]float64
			for i, pools := range layouts {
				tag := fmt.Sprintf("%s%d-%d-", mode[:1], round, i)
				op, callers, per := clusterAPILoad(led, pools, tag), apiCallers, 1
				if mode == "pipelined" {
					op, callers, per = raw[i].op(tag), pipeCallers, clusterBatch
				}
				before := readCPU(ctx, tb, c)
				r := benchkit.Run(ctx, "", callers, d/4, op)
				tput[i] = float64(r.Ops*per) / r.Elapsed.Seconds()
				rows[i].cpu = rows[i].cpu.add(readCPU(ctx, tb, c).minus(before))
				rows[i].Ops += r.Ops
				rows[i].grants += r.Ops * per
				rows[i].Errors += r.Errors
				rows[i].Elapsed += r.Elapsed
				rows[i].P50 += r.P50 / rounds
				rows[i].Callers = callers
			}
			if tput[0] > 0 {
				ratios = append(ratios, tput[1]/tput[0])
			}
		}
		slices.Sort(ratios)
		medians[mode] = ratios[len(ratios)/2]
		base := float64(rows[0].grants) / rows[0].Elapsed.Seconds()
		for i, r := range rows {
			name := "all on 1 master"
			if i == 1 {
				name = fmt.Sprintf("2 on each of %d masters", clusterShards)
			}
			load := "ledger API: Acquire, Release"
			if mode == "pipelined" {
				load = fmt.Sprintf("pipelined (raw RESP): %d acquire calls (FCALL), then their releases", clusterBatch)
			}
			tput := float64(r.grants) / r.Elapsed.Seconds()
			errs := ""
			if r.Errors > 0 {
				errs = fmt.Sprintf(" (%d errors)", r.Errors)
			}
			fmt.Fprintf(out, "| %s | %s | %d | %.0f%s | %s | %s | %s | %s |\n", name, load, r.Callers, tput, errs, benchkit.Micros(r.P50),
				benchkit.Micros(r.cpu.redis/time.Duration(max(1, r.grants))), benchkit.Micros(r.cpu.self/time.Duration(max(1, r.grants))),
				benchkit.Ratio(tput, base))
			if i == 1 {
				if mode == "API" {
					figs.API = tput / base
				} else {
					figs.Pipelined = tput / base
				}
			}
		}
	}
	fmt.Fprintf(out, "\n(%d alternating rounds of %s per layout and load on one cluster; p50 is the rounds' mean. Median of the rounds' own ratios: API %.2f×, pipelined %.2f×.)\n",
		rounds, d/4, medians["API"], medians["pipelined"])
	fmt.Fprintf(out, "Target: pools over %d masters ≥ 1.5× the same pools on one master.\n", clusterShards)
	return figs
}

func (a cpuSpent) add(b cpuSpent) cpuSpent { return cpuSpent{a.redis + b.redis, a.self + b.self} }

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
