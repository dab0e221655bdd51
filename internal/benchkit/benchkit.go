// Package benchkit drives closed-loop load at a fixed number of concurrent
// callers and summarises it as throughput and latency quantiles, so that a
// figure and its baseline are measured the same way in the same run.
package benchkit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
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
					if ctx.Err() != nil {
						break // cut off by the end of the run
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
