package redis

// BenchmarkReport measures the Redis ledger against a baseline taken in the
// same run: the raw FCALL of the same acquire function from a bare go-redis
// client, with the arguments built once outside the timed loop. It prints
// the tables recorded in docs/benchmarks.md. Run it through `make bench`;
// it ignores b.N and runs each phase for a fixed duration.

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/benchkit"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

const benchPool = ledger.PoolID("bench")

type benchEnv struct {
	b      *testing.B
	ctx    context.Context
	srv    *redisserver.Server
	client *goredis.Client
	led    *Ledger
	pool   ledger.PoolID // the pool the ops act on
}

// fresh flushes Redis and returns a configured ledger with one live holder
// per caller ("h0".."h<n-1>").
func (e *benchEnv) fresh(callers int) {
	e.b.Helper()
	if err := e.client.FlushAll(e.ctx).Err(); err != nil {
		e.b.Fatalf("flushall: %v", err)
	}
	e.led = New(e.client, Options{Options: ledger.Options{RecoveryWindow: -1}})
	e.addPool(benchPool, callers)
}

// addPool configures pool next to what Redis holds, with one live holder per
// caller, and makes it the pool the ops act on.
func (e *benchEnv) addPool(pool ledger.PoolID, callers int) {
	e.b.Helper()
	e.pool = pool
	if _, err := e.led.Configure(e.ctx, benchkit.BenchPool(pool)); err != nil {
		e.b.Fatalf("configure: %v", err)
	}
	for h := 0; h < callers; h++ {
		if _, err := e.led.KeepAlive(e.ctx, pool, benchkit.BenchHolder(h), time.Hour); err != nil {
			e.b.Fatalf("keepalive: %v", err)
		}
	}
}

// observeAll gives each engine of the bench pool an observation, as a
// router's first scrape does: acquire then reads and parses each
// candidate's telemetry correction and last observation (e:<id>:c,
// e:<id>:obs) as it does in a running fleet. They are taken at a fixed
// time in 2020, before the script-time table's observe row's.
func (e *benchEnv) observeAll() {
	e.b.Helper()
	for _, id := range benchkit.BenchRequest(e.pool, 0, 0, "").Candidates {
		if _, err := e.led.Observe(e.ctx, ledger.Observation{Pool: e.pool, Engine: id, KVTokensUsed: 1000,
			KVTokensTotal: ledger.MaxAmount, Running: 1, ObservedAt: time.Unix(1600000000, 0)}); err != nil {
			e.b.Fatalf("observe %s: %v", id, err)
		}
	}
}

// raw returns an op that calls the acquire function with FCALL directly:
// keys and arguments are built before the timed loop; only the request id
// changes per call.
func (e *benchEnv) raw(callers int, tag string) benchkit.Op {
	keys, _ := keySchema(e.led.s.opts.Prefix, e.pool)
	k := keys.scriptKeys()
	name := e.led.s.scripts.acquire.name
	if err := loadLibrary(e.ctx, e.client, e.led.s.scripts.lib); err != nil {
		e.b.Fatalf("function load: %v", err)
	}
	argv := make([][]any, callers)
	for c := range argv {
		argv[c] = append([]any{e.led.s.argv1(e.led.s.opts.SweepBatch)}, acquireArgv(benchkit.BenchRequest(e.pool, c, 0, tag))...)
	}
	const reqArg = 6 // index of the request id in argv (argv1 first)
	return func(ctx context.Context, c, seq int) error {
		a := argv[c]
		a[reqArg] = tag + strconv.Itoa(seq)
		return e.client.FCall(ctx, name, k, a...).Err()
	}
}

func (e *benchEnv) acquire(held [][]ledger.LeaseRef, tag string) benchkit.Op {
	return func(ctx context.Context, c, seq int) error {
		g, err := e.led.Acquire(ctx, benchkit.BenchRequest(e.pool, c, seq, tag))
		if err == nil && held != nil {
			held[c] = append(held[c], g.Lease.Ref())
		}
		return err
	}
}

func (e *benchEnv) release(held [][]ledger.LeaseRef) benchkit.Op {
	return func(ctx context.Context, c, seq int) error {
		if seq >= len(held[c]) {
			return benchkit.ErrStop
		}
		_, err := e.led.Release(ctx, held[c][seq], ledger.Usage{PromptTokens: 500, CompletionTokens: 200})
		return err
	}
}

func (e *benchEnv) acquireRelease(tag string) benchkit.Op {
	return func(ctx context.Context, c, seq int) error {
		g, err := e.led.Acquire(ctx, benchkit.BenchRequest(e.pool, c, seq, tag))
		if err != nil {
			return err
		}
		_, err = e.led.Release(ctx, g.Lease.Ref(), ledger.Usage{PromptTokens: 500, CompletionTokens: 200})
		return err
	}
}

// preload fills the pool with n outstanding leases through pipelined raw
// script calls, spread over holders h0..h15.
func (e *benchEnv) preload(n int) {
	e.b.Helper()
	keys, _ := keySchema(e.led.s.opts.Prefix, e.pool)
	k := keys.scriptKeys()
	name := e.led.s.scripts.acquire.name
	if err := loadLibrary(e.ctx, e.client, e.led.s.scripts.lib); err != nil {
		e.b.Fatalf("function load: %v", err)
	}
	const batch = 2000
	for done := 0; done < n; {
		p := e.client.Pipeline()
		for i := 0; i < batch && done < n; i, done = i+1, done+1 {
			argv := append([]any{e.led.s.argv1(e.led.s.opts.SweepBatch)}, acquireArgv(benchkit.BenchRequest(e.pool, done%16, done, "pre"))...)
			p.FCall(e.ctx, name, k, argv...)
		}
		if _, err := p.Exec(e.ctx); err != nil {
			e.b.Fatalf("preload at %d leases: %v", done, err)
		}
	}
	st, err := e.led.Stats(e.ctx, e.pool)
	if err != nil || st.Leases != int64(n) {
		e.b.Fatalf("preload: stats says %d leases (err %v), want %d", st.Leases, err, n)
	}
}

// serverTime resets INFO commandstats, runs f, and returns the Redis server
// time per FCALL (or EVALSHA/EVAL) call f made.
func (e *benchEnv) serverTime(f func()) (time.Duration, int64) {
	e.b.Helper()
	if err := e.client.ConfigResetStat(e.ctx).Err(); err != nil {
		e.b.Fatalf("config resetstat: %v", err)
	}
	f()
	info, err := e.client.Info(e.ctx, "commandstats").Result()
	if err != nil {
		e.b.Fatalf("info commandstats: %v", err)
	}
	var calls, usec int64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "cmdstat_fcall:") && !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		_, fields, _ := strings.Cut(line, ":")
		for _, kv := range strings.Split(fields, ",") {
			name, val, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(val, 10, 64)
			switch name {
			case "calls":
				calls += n
			case "usec":
				usec += n
			}
		}
	}
	if calls == 0 {
		return 0, 0
	}
	return time.Duration(usec) * time.Microsecond / time.Duration(calls), calls
}

func BenchmarkReport(b *testing.B) {
	if testing.Short() {
		b.Skip("report benchmark: skipped in -short")
	}
	ctx := context.Background()
	srv := redisserver.Start(b)
	client := srv.Client()
	e := &benchEnv{b: b, ctx: ctx, srv: srv, client: client}
	d := benchkit.Phase()
	out := &strings.Builder{}
	fmt.Fprintf(out, "\n### Redis ledger (redis-server %s, %s per phase)\n\n", redisVersion(ctx, client), d)
	fmt.Fprintln(out, "| operation | callers | ops/s | p50 µs | p99 µs | vs raw FCALL acquire |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|")
	var acq64, raw64 float64
	for _, callers := range []int{1, 16, 64} {
		e.fresh(callers)
		rawR := benchkit.Run(ctx, "raw FCALL acquire (baseline)", callers, d, e.raw(callers, "raw"))
		e.fresh(callers)
		held := make([][]ledger.LeaseRef, callers)
		acqR := benchkit.Run(ctx, "ledger Acquire", callers, d, e.acquire(held, "acq"))
		relR := benchkit.Run(ctx, "ledger Release", callers, 10*d, e.release(held))
		e.fresh(callers)
		arR := benchkit.Run(ctx, "ledger Acquire+Release", callers, d, e.acquireRelease("ar"))
		base := rawR.Throughput()
		for _, r := range []benchkit.Result{rawR, acqR, relR, arR} {
			fmt.Fprintln(out, benchkit.Row(r, base))
		}
		if callers == 64 {
			acq64, raw64 = acqR.Throughput(), base
		}
	}
	fmt.Fprintf(out, "\nLedger Acquire at 64 callers: %s of the raw-FCALL baseline (target ≥ 0.90×).\n", benchkit.Ratio(acq64, raw64))

	fmt.Fprintln(out, "\n| outstanding leases | callers | Acquire+Release ops/s | p50 µs | p99 µs | vs 1,000 |")
	fmt.Fprintln(out, "|---:|---:|---:|---:|---:|---:|")
	// Both pools live on one Redis and their phases alternate, so load from
	// anything else on the machine falls on both alike.
	e.fresh(16)
	e.addPool("bench-1k", 16)
	e.preload(1000)
	e.addPool("bench-1m", 16)
	e.preload(1000000)
	const rounds = 4
	var sizes [2]struct {
		ops      int
		elapsed  time.Duration
		p50, p99 time.Duration
	}
	for round := 0; round < rounds; round++ {
		for i, pool := range []ledger.PoolID{"bench-1k", "bench-1m"} {
			e.pool = pool
			r := benchkit.Run(ctx, "", 16, d/2, e.acquireRelease(fmt.Sprintf("sz%d-", round)))
			sizes[i].ops += r.Ops
			sizes[i].elapsed += r.Elapsed
			sizes[i].p50 += r.P50 / rounds
			sizes[i].p99 += r.P99 / rounds
		}
	}
	base1k := float64(sizes[0].ops) / sizes[0].elapsed.Seconds()
	for i, n := range []int{1000, 1000000} {
		tput := float64(sizes[i].ops) / sizes[i].elapsed.Seconds()
		fmt.Fprintf(out, "| %d | %d | %.0f | %s | %s | %s |\n", n, 16, tput,
			benchkit.Micros(sizes[i].p50), benchkit.Micros(sizes[i].p99), benchkit.Ratio(tput, base1k))
	}
	fmt.Fprintf(out, "\n(%d alternating rounds of %s per size; p50/p99 are the rounds' means.)\n", rounds, d/2)
	fmt.Fprintln(out, "\nTarget: the 1,000,000-lease figure ≥ 0.80× the 1,000-lease figure (no scans).")

	printScriptTimes(out, e.scriptTimes())
	e.waitReplicas(out, d)
	clusterThroughput(ctx, b, out, d)
	fmt.Print(out.String())
}

// waitReplicas attaches a replica to the server and measures Acquire+Release
// with WaitReplicas 0 (asynchronous replication, the baseline) and 1 (every
// change acknowledged once the replica has it), in alternating rounds.
func (e *benchEnv) waitReplicas(out io.Writer, d time.Duration) {
	redisserver.StartReplica(e.b, e.srv)
	fmt.Fprintln(out, "\n| replication (one replica attached) | callers | Acquire+Release ops/s | p50 µs | p99 µs | vs async |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|")
	for _, callers := range []int{1, 16} {
		var res [2]benchkit.Result
		for round := 0; round < 2; round++ {
			for i, wait := range []int{0, 1} {
				e.fresh(callers)
				e.led = New(e.client, Options{Options: ledger.Options{RecoveryWindow: -1}, WaitReplicas: wait})
				e.addPool(benchPool, callers)
				r := benchkit.Run(e.ctx, "", callers, d/2, e.acquireRelease(fmt.Sprintf("w%d-%d-", wait, round)))
				res[i].Ops += r.Ops
				res[i].Errors += r.Errors
				res[i].Elapsed += r.Elapsed
				res[i].P50 += r.P50 / 2
				res[i].P99 += r.P99 / 2
			}
		}
		res[0].Name, res[1].Name = "async (default)", "wait_replicas=1"
		res[0].Callers, res[1].Callers = callers, callers
		for _, r := range res {
			fmt.Fprintln(out, benchkit.Row(r, res[0].Throughput()))
		}
	}
	fmt.Fprintln(out, "\n(2 alternating rounds of", d/2, "each; p50/p99 are the rounds' means.)")
}

func redisVersion(ctx context.Context, c *goredis.Client) string {
	info, _ := c.Info(ctx, "server").Result()
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}

type scriptTime struct {
	name  string
	calls int64
	per   time.Duration
}

// scriptRow is one operation's row of scriptTimes: its calls and server
// time per call, the empty function's in the slices interleaved with them,
// and the lowest and highest ratio of one of the row's slices to the empty
// slice just before it.
type scriptRow struct {
	scriptTime
	floor  time.Duration
	lo, hi float64
}

// ratio is the row's server time per call against the empty function's in
// its own slices.
func (r scriptRow) ratio() float64 { return float64(r.per) / float64(r.floor) }

// scriptTimesReport is scriptTimes' result: each operation's row, and
// every slice of the empty function.
type scriptTimesReport struct {
	rows  []scriptRow
	floor []scriptTime
}

// routerUsage is what a router's release reports for an answer that
// finished (route's dispatch): the usage, the completion-length counters
// (Finished) and the dispatch's outcome for the engine's breaker. The
// benchmarks' "release" rows release with it.
var routerUsage = ledger.Usage{PromptTokens: 10, CompletionTokens: 10, Finished: true, Outcome: ledger.OutcomeOK}

// emptyLibrary registers the calibration's functions: the empty one, and
// lh_calibration_acquire_calls, which makes the Redis calls a grant by
// acquire makes (scripts/lua/acquire.lua, its common path: no sweep, no
// replay, one candidate tried, the specs kept from an earlier call of the
// configuration), with acquire's KEYS and ARGV, the same fields read and
// written and replies of the same shape, and none of the
// admission rule: the floor those calls set under acquire's cost. Run it
// on copies of a pool's keys (calibrationKeys): it writes a lease-shaped
// record, a request index entry, a deadline and a holder set member for
// each request id, and the pool's seq, reservations and grants counter.
const emptyLibrary = "#!lua name=leasehold_calibration\n" +
	"redis.register_function('lh_calibration_empty', function() return 1 end)\n" + acquireCallsFunction + releaseCallsFunction

const acquireCallsFunction = `
redis.register_function('lh_calibration_acquire_calls', function(KEYS, ARGV)
  local call = redis.call
  local t, e = ARGV[2], ARGV[10]
  local f = {'meta', 'sweep_at', 'seq', 'repl', 't:' .. t .. ':r', 'e:' .. e .. ':r', 'e:' .. e .. ':c',
    'e:' .. e .. ':o', 'e:' .. e .. ':b', 'e:' .. e .. ':obs'}
  local v = call('HMGET', KEYS[1], unpack(f))
  call('INFO', 'replication')
  local now = call('TIME')
  call('ZRANK', KEYS[5], ARGV[6])
  local rkey = ARGV[6] .. ' ' .. ARGV[7]
  call('HGET', KEYS[6], rkey)
  local id = 'c-' .. ARGV[7]
  call('HSETNX', KEYS[6], rkey, id)
  local ms = now[1] .. '000'
  local rec = id .. ' ' .. e .. ' ' .. t .. ' ' .. ARGV[3] .. ' ' .. ARGV[4] .. ' ' .. ARGV[5] .. ' ' ..
    ARGV[6] .. ' ' .. ARGV[7] .. ' ' .. ms .. ' ' .. ms .. ' 1700000000000000 ' .. now[2] .. ' 0 1 0 0 0'
  call('HSETNX', KEYS[7], id, rec)
  call('ZADD', KEYS[4], ms, id)
  call('SADD', KEYS[8] .. ARGV[6], id)
  call('HSET', KEYS[1], 'seq', now[2], 'e:' .. e .. ':r', v[6] or '0 0 0', 't:' .. t .. ':r', v[5] or '0 0 0')
  call('HINCRBY', KEYS[1], 'c:grants', '1')
  return {'ok', '1700000000000000', rec}
end)
`

// releaseCallsFunction registers lh_calibration_release_calls, which
// makes the Redis calls the router's release makes (scripts/lua/release.lua
// with routerUsage: the holder's release of a live lease, no sweep, the
// outcome ok and a breaker that hears nothing of it, the completion-length
// counter added) with release's KEYS and ARGV, on a lease
// lh_calibration_acquire_calls wrote: it reads the lease, the pool's
// fields the charge reads, the clock, removes the lease from the holder's
// set, the request index, the deadlines and the leases, writes the
// charge back unchanged and adds to the counter. Of the record it parses
// only the engine, tenant and request id, to name the fields.
const releaseCallsFunction = `
redis.register_function('lh_calibration_release_calls', function(KEYS, ARGV)
  local call = redis.call
  local id, holder = ARGV[2], ARGV[3]
  local rec = call('HGET', KEYS[7], id)
  local e, t, req = string.match(rec, '^%S+ (%S+) (%S+) %S+ %S+ %S+ %S+ (%S+)')
  local er, tr = 'e:' .. e .. ':r', 't:' .. t .. ':r'
  local v = call('HMGET', KEYS[1], 'meta', 'sweep_at', er, tr, 'g:release', 'e:' .. e .. ':b')
  call('TIME')
  call('SREM', KEYS[8] .. holder, id)
  call('HDEL', KEYS[6], holder .. ' ' .. req)
  call('ZREM', KEYS[4], id)
  call('HDEL', KEYS[7], id)
  call('HSET', KEYS[1], er, v[3] or '0 0 0', tr, v[4] or '0 0 0', 'g:release', v[5] or '0 0 0 0')
  call('HINCRBY', KEYS[1], 'n:' .. ARGV[6] .. '/' .. t, '1')
  return {'ok', '1700000000000000', 1}
end)
`

// calibrationKeys copies the bench pool's keys, and the 16 bench holders'
// lease sets, to keys of their own in the same hash slot, and returns them
// as KEYS for lh_calibration_acquire_calls.
func (e *benchEnv) calibrationKeys() []string {
	e.b.Helper()
	keys, _ := keySchema(e.led.s.opts.Prefix, e.pool)
	src := keys.scriptKeys()
	dst := make([]string, len(src))
	for i, k := range src {
		dst[i] = k + "calibration:"
		if i == len(src)-1 { // the holder key prefix
			for h := 0; h < 16; h++ {
				from := k + string(benchkit.BenchHolder(h))
				if err := e.client.Copy(e.ctx, from, dst[i]+string(benchkit.BenchHolder(h)), 0, true).Err(); err != nil {
					e.b.Fatalf("COPY %s: %v", from, err)
				}
			}
			continue
		}
		if err := e.client.Copy(e.ctx, k, dst[i], 0, true).Err(); err != nil {
			e.b.Fatalf("COPY %s: %v", k, err)
		}
	}
	return dst
}

// calibration loads the calibration functions (emptyLibrary) and returns
// a call of each on the bench pool: the empty function with the pool's
// KEYS, acquire's calls alone for bench request i of caller i%16
// (request id tag+i) on copies of the pool's keys (calibrationKeys), and
// release's calls alone for the lease acquireCalls(i, tag) wrote, with
// routerUsage's arguments.
func (e *benchEnv) calibration() (empty func(i int) error, acquireCalls, releaseCalls func(i int, tag string) error) {
	e.b.Helper()
	if err := e.client.FunctionLoadReplace(e.ctx, emptyLibrary).Err(); err != nil {
		e.b.Fatalf("load the calibration functions: %v", err)
	}
	keys, _ := keySchema(e.led.s.opts.Prefix, e.pool)
	k := keys.scriptKeys()
	calKeys := e.calibrationKeys()
	argv1 := e.led.s.argv1(e.led.s.opts.SweepBatch)
	empty = func(int) error { return e.client.FCall(e.ctx, "lh_calibration_empty", k, 64).Err() }
	acquireCalls = func(i int, tag string) error {
		args := append([]any{argv1}, acquireArgv(benchkit.BenchRequest(e.pool, i%16, i, tag))...)
		return e.client.FCall(e.ctx, "lh_calibration_acquire_calls", calKeys, args...).Err()
	}
	releaseCalls = func(i int, tag string) error {
		req := benchkit.BenchRequest(e.pool, i%16, i, tag)
		ref := ledger.LeaseRef{Pool: e.pool, ID: ledger.LeaseID("c-" + string(req.RequestID)), Holder: req.Holder}
		args := append([]any{argv1}, releaseArgv(ref, routerUsage)...)
		return e.client.FCall(e.ctx, "lh_calibration_release_calls", calKeys, args...).Err()
	}
	return empty, acquireCalls, releaseCalls
}

// scriptTimes runs each operation alone from one caller, 2,000 times, on a
// pool holding 10,000 leases whose engines have been observed, and reads
// its server time per call. Each row is timed in scriptSlices slices of
// 200 calls, each just after a slice of as many calls of an empty function
// with the same keys (the calibration): on a shared machine the floor
// drifts by a factor of two or more within a second, so a row's ratio is
// taken against the empty calls interleaved with its own, slices of equal
// size so that each starts as cold. Resize shrinks each lease by one KV
// token and grow gives it back.
func (e *benchEnv) scriptTimes() scriptTimesReport {
	const n = 2000
	e.fresh(16)
	e.preload(10000)
	e.observeAll()
	ctx, led := e.ctx, e.led
	var leases []ledger.Lease
	var out scriptTimesReport
	// Calibration: an empty function with the same KEYS, the floor every
	// call of the ledger's functions pays on this machine; and an empty
	// EVAL script for reference (the scripts were EVAL scripts until the
	// ledger's Lua became a function library).
	emptyFn, acquireCalls, releaseCalls := e.calibration()
	keys, _ := keySchema(e.led.s.opts.Prefix, e.pool)
	run := func(name string, from, calls int, f func(i int) error) scriptTime {
		var ferr error
		per, got := e.serverTime(func() {
			for i := from; i < from+calls && ferr == nil; i++ {
				ferr = f(i)
			}
		})
		if ferr != nil {
			e.b.Fatalf("%s: %v", name, ferr)
		}
		return scriptTime{name, got, per}
	}
	measure := func(name string, f func(i int) error) {
		row := scriptRow{scriptTime: scriptTime{name: name}, lo: math.Inf(1)}
		var rowT, floorT time.Duration
		var floorN int64
		for k := 0; k < scriptSlices; k++ {
			fl := run("(empty function)", 0, n/scriptSlices, emptyFn)
			out.floor = append(out.floor, fl)
			r := run(name, k*n/scriptSlices, n/scriptSlices, f)
			rowT += r.per * time.Duration(r.calls)
			row.calls += r.calls
			floorT += fl.per * time.Duration(fl.calls)
			floorN += fl.calls
			q := float64(r.per) / float64(fl.per)
			row.lo, row.hi = min(row.lo, q), max(row.hi, q)
		}
		row.per, row.floor = rowT/time.Duration(row.calls), floorT/time.Duration(floorN)
		out.rows = append(out.rows, row)
	}
	empty := goredis.NewScript("return 1")
	measure("(empty EVAL script, for reference)", func(i int) error {
		return empty.Run(ctx, e.client, keys.scriptKeys(), 64).Err()
	})
	measure(acquireCallsRow, func(i int) error { return acquireCalls(i, "st") })
	measure("acquire", func(i int) error {
		g, err := led.Acquire(ctx, benchkit.BenchRequest(e.pool, i%16, i, "st"))
		leases = append(leases, g.Lease)
		return err
	})
	measure("renew", func(i int) error {
		_, err := led.Renew(ctx, leases[i].Ref(), time.Hour)
		return err
	})
	measure("resize", func(i int) error {
		_, err := led.Resize(ctx, leases[i].Ref(), leases[i].KVTokens-1)
		return err
	})
	measure("grow", func(i int) error {
		_, err := led.Grow(ctx, leases[i].Ref(), leases[i].KVTokens+1)
		return err
	})
	measure(releaseCallsRow, func(i int) error { return releaseCalls(i, "st") })
	measure("release", func(i int) error {
		_, err := led.Release(ctx, leases[i].Ref(), routerUsage)
		return err
	})
	// The same leases again, for a release without the router's outcome
	// and completion counters (granted outside any row's measurement).
	more := make([]ledger.Lease, n)
	for i := range more {
		g, err := led.Acquire(ctx, benchkit.BenchRequest(e.pool, i%16, i, "st2"))
		if err != nil {
			e.b.Fatalf("acquire: %v", err)
		}
		more[i] = g.Lease
	}
	measure("release (bare: no outcome, unfinished)", func(i int) error {
		_, err := led.Release(ctx, more[i].Ref(), ledger.Usage{PromptTokens: 10, CompletionTokens: 10})
		return err
	})
	measure("reassert", func(i int) error {
		_, err := led.Reassert(ctx, leases[i], time.Hour)
		return err
	})
	measure("keepalive", func(i int) error {
		_, err := led.KeepAlive(ctx, e.pool, benchkit.BenchHolder(i%16), time.Hour)
		return err
	})
	// The reassert row left gpu-0, the engine of every lease it
	// re-asserted, marked for confirmation (e:<id>:u). The observe row
	// observes gpu-1, which has nothing to confirm: the common case. The
	// next observes gpu-0 showing no sequence, fewer than its unconfirmed
	// leases' slots: nothing to confirm either, which an observation of a
	// marked engine once found by reading every lease of the pool (15 ms a
	// call on this pool of 12,000 leases).
	measure("observe", func(i int) error {
		_, err := led.Observe(ctx, ledger.Observation{Pool: e.pool, Engine: "gpu-1", KVTokensUsed: int64(i),
			ObservedAt: time.Unix(1700000000, 0).Add(time.Duration(i+1) * time.Millisecond)})
		return err
	})
	measure("observe (a marked engine that shows too few sequences to confirm)", func(i int) error {
		_, err := led.Observe(ctx, ledger.Observation{Pool: e.pool, Engine: "gpu-0", KVTokensUsed: int64(i),
			ObservedAt: time.Unix(1700000000, 0).Add(time.Duration(i+1) * time.Millisecond)})
		return err
	})
	measure("sweep", func(i int) error {
		_, err := led.Sweep(ctx, e.pool, 64)
		return err
	})
	measure("drain", func(i int) error {
		return led.SetDraining(ctx, e.pool, "gpu-3", i%2 == 0)
	})
	measure("configure", func(i int) error {
		_, err := led.Configure(ctx, benchkit.BenchPool(e.pool))
		return err
	})
	return out
}

// The rows of the calibration functions that make acquire's and release's
// Redis calls with none of their logic (emptyLibrary).
const (
	acquireCallsRow = "(acquire's Redis calls alone, no admission logic)"
	releaseCallsRow = "(release's Redis calls alone, no release logic)"
)

// scriptSlices is how many slices scriptTimes times each row in, each
// after a slice of the empty function.
const scriptSlices = 10

// BenchmarkScriptTimes prints only the server-time table of BenchmarkReport
// (each script alone, 2,000 calls, on a pool of 10,000 leases): the quick
// loop for work on the Lua scripts.
//
//	go test -run '^$' -bench '^BenchmarkScriptTimes$' -benchtime 1x ./internal/ledger/redis/
func BenchmarkScriptTimes(b *testing.B) {
	if testing.Short() {
		b.Skip("report benchmark: skipped in -short")
	}
	ctx := context.Background()
	srv := redisserver.Start(b)
	e := &benchEnv{b: b, ctx: ctx, srv: srv, client: srv.Client()}
	out := &strings.Builder{}
	printScriptTimes(out, e.scriptTimes())
	fmt.Print(out.String())
}

// scriptTarget is the most Redis server time per call of acquire, release,
// grow and resize, in empty-function calls of the same run (issue 20).
const scriptTarget = 8.0

// printScriptTimes prints the script-time table, each row against the
// empty function's slices interleaved with it, and the hot functions
// against scriptTarget.
func printScriptTimes(out io.Writer, r scriptTimesReport) {
	var sum time.Duration
	var calls int64
	lo, hi := r.floor[0].per, r.floor[0].per
	for _, f := range r.floor {
		sum += f.per * time.Duration(f.calls)
		calls += f.calls
		lo, hi = min(lo, f.per), max(hi, f.per)
	}
	fmt.Fprintln(out, "\n| function | calls | Redis server time per call µs (INFO commandstats) | the empty function's, interleaved | vs empty function (its slices) |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|")
	fmt.Fprintf(out, "| (empty function: calibration, %d slices) | %d | %s (slices %s-%s) | | 1.00× |\n", len(r.floor), calls,
		benchkit.Micros(sum/time.Duration(calls)), benchkit.Micros(lo), benchkit.Micros(hi))
	for _, s := range r.rows {
		fmt.Fprintf(out, "| %s | %d | %s | %s | %.2f× (%.1f-%.1f) |\n", s.name, s.calls, benchkit.Micros(s.per),
			benchkit.Micros(s.floor), s.ratio(), s.lo, s.hi)
	}
	floors := map[string]string{"acquire": acquireCallsRow, "release": releaseCallsRow}
	ratios := map[string]float64{}
	for _, s := range r.rows {
		ratios[s.name] = s.ratio()
	}
	var hot []string
	for _, s := range r.rows {
		switch s.name {
		case "acquire", "release", "grow", "resize":
			h := fmt.Sprintf("%s %.2f×", s.name, s.ratio())
			if f, ok := ratios[floors[s.name]]; ok {
				h += fmt.Sprintf(" (its Redis calls alone %.2f×)", f)
			}
			hot = append(hot, h)
		}
	}
	fmt.Fprintf(out, "\nServer time per call against the empty function of this run: %s (target ≤ %.0f× each).\n",
		strings.Join(hot, ", "), scriptTarget)
	fmt.Fprintf(out, "Each row is timed in %d slices, each after a slice of %d empty-function calls; \"vs empty function\" "+
		"divides the row's time per call by the empty function's in its own slices, and gives the range of one slice "+
		"against the empty slice before it.\n", scriptSlices, r.floor[0].calls)
}
