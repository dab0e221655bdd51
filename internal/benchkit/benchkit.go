// Package benchkit drives closed-loop load at a fixed number of concurrent
// callers and summarises it as throughput and latency quantiles, so that a
// figure and its baseline are measured the same way in the same run.
package benchkit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Result summarises one load run.
type Result struct {
	Name    string
	Callers int
	Ops     int
	Errors  int
	Elapsed time.Duration
	P50     time.Duration
	P99     time.Duration
}

// Throughput is operations per second.
func (r Result) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// ErrStop, returned by an Op, ends that caller's loop without counting the
// call: a caller that has run out of work (leases to release) stops.
var ErrStop = errors.New("benchkit: caller done")

// Op is one operation; caller is the index of the calling goroutine and seq
// counts that caller's operations from 0.
type Op func(ctx context.Context, caller, seq int) error

// Run calls op from callers goroutines in a closed loop until d has passed
// (or ctx ends) and returns the summary. Errors are counted, not fatal: a
// run with errors is reported as such.
func Run(ctx context.Context, name string, callers int, d time.Duration, op Op) Result {
	if callers < 1 {
		callers = 1
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	end, _ := ctx.Deadline()
	lat := make([][]time.Duration, callers)
	errs := make([]int, callers)
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			samples := make([]time.Duration, 0, 4096)
			for seq := 0; ctx.Err() == nil; seq++ {
				t0 := time.Now()
				err := op(ctx, c, seq)
				if errors.Is(err, ErrStop) {
					break
				}
				if err != nil {
					// Cut off by the end of the run: a client may time out
					// on the deadline itself a moment before ctx says so.
					if ctx.Err() != nil || !time.Now().Before(end) {
						break
					}
					errs[c]++
				}
				samples = append(samples, time.Since(t0))
			}
			lat[c] = samples
		}(c)
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	r := Result{Name: name, Callers: callers, Elapsed: elapsed}
	for c := range lat {
		all = append(all, lat[c]...)
		r.Errors += errs[c]
	}
	r.Ops = len(all)
	slices.Sort(all)
	r.P50, r.P99 = Quantile(all, 0.50), Quantile(all, 0.99)
	return r
}

// Quantile returns the q-quantile of sorted samples (nearest rank).
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// Ratio formats a/b as "0.93×", or "n/a" when b is zero.
func Ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// Micros formats d in microseconds with one decimal.
func Micros(d time.Duration) string {
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Microsecond))
}

// PhaseEnv is the environment variable that sets each phase's length.
const PhaseEnv = "LEASEHOLD_BENCH_PHASE"

// Phase returns each benchmark phase's length: $LEASEHOLD_BENCH_PHASE, or 2s.
func Phase() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(PhaseEnv)); err == nil && d > 0 {
		return d
	}
	return 2 * time.Second
}

// Row formats r as a markdown table row: name, callers, ops/s (with the
// error count if any), p50 and p99 in µs, and the throughput ratio to base
// (omitted when base is 0).
func Row(r Result, base float64) string {
	ratio, errs := "", ""
	if base > 0 {
		ratio = Ratio(r.Throughput(), base)
	}
	if r.Errors > 0 {
		errs = fmt.Sprintf(" (%d errors)", r.Errors)
	}
	return fmt.Sprintf("| %s | %d | %.0f%s | %s | %s | %s |", r.Name, r.Callers, r.Throughput(), errs,
		Micros(r.P50), Micros(r.P99), ratio)
}

// BenchPool returns a pool of four engines so large (ledger.MaxAmount each)
// that no acquisition is refused: the benchmarks measure what a grant costs,
// not how often capacity runs out.
func BenchPool(name ledger.PoolID) ledger.PoolSpec {
	s := ledger.PoolSpec{
		Name:       name,
		Tenants:    []ledger.TenantSpec{{Name: "acme", KVShare: 1}},
		Priorities: []ledger.PrioritySpec{{Name: "standard", MaxFill: 1}},
	}
	for i := 0; i < 4; i++ {
		s.Engines = append(s.Engines, ledger.EngineSpec{ID: ledger.EngineID(fmt.Sprintf("gpu-%d", i)), KVTokens: ledger.MaxAmount, Slots: ledger.MaxAmount})
	}
	return s
}

// BenchRequest is caller c's seq-th acquisition on a BenchPool, holder
// "h<c>", with a request id unique per tag and seq.
func BenchRequest(pool ledger.PoolID, c, seq int, tag string) ledger.AcquireRequest {
	return ledger.AcquireRequest{
		Pool: pool, Candidates: []ledger.EngineID{"gpu-0", "gpu-1", "gpu-2", "gpu-3"},
		Tenant: "acme", Priority: "standard", KVTokens: 1000 + int64(seq%3000), Slots: 1,
		Holder: BenchHolder(c), RequestID: ledger.RequestID(tag + strconv.Itoa(seq)), TTL: time.Hour,
	}
}

// BenchHolder is caller c's holder id.
func BenchHolder(c int) ledger.HolderID { return ledger.HolderID("h" + strconv.Itoa(c)) }
