package route

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/internal/benchkit"
)

// roundsEnv sets how many alternating rounds BenchmarkReport measures the
// bare proxy and the routers in, for every engine.
const roundsEnv = "LEASEHOLD_BENCH_ROUNDS"

// benchRounds is $LEASEHOLD_BENCH_ROUNDS, or def.
func benchRounds(def int) int {
	if n, err := strconv.Atoi(os.Getenv(roundsEnv)); err == nil && n > 0 {
		return n
	}
	return def
}

// altPath is one path measured in rounds that alternate with other
// paths': load from elsewhere on a shared machine falls on all of them
// alike, and a ratio taken within a round compares like with like.
type altPath struct {
	bt   *benchTarget
	pids [3]int
	// prof profiles the path's first round (nil: none).
	prof func(time.Duration) <-chan struct{}
	// phases is each round's measured load, in round order.
	phases []phase
}

// alternate warms every path up, then runs rounds rounds of d each; in
// round i the paths run in turn starting with path i mod len(paths), so
// none always follows the same neighbour. It returns each path's figures
// over all its rounds together (requests, time and CPU summed, latency
// samples pooled).
func alternate(ctx context.Context, paths []*altPath, callers, rounds int, d time.Duration) []benchRow {
	for _, p := range paths {
		defer p.bt.close()
		warmUp(ctx, p.bt, callers, d)
	}
	for round := range rounds {
		for k := range paths {
			p := paths[(round+k)%len(paths)]
			prof := p.prof
			if round > 0 {
				prof = nil
			}
			p.phases = append(p.phases, runPhase(ctx, p.bt, callers, d, p.pids, prof))
		}
	}
	rows := make([]benchRow, len(paths))
	for i, p := range paths {
		res := benchkit.Result{Name: p.bt.name, Callers: callers}
		var cpu [3]time.Duration
		for _, ph := range p.phases {
			res.Ops, res.Errors, res.Elapsed = res.Ops+ph.res.Ops, res.Errors+ph.res.Errors, res.Elapsed+ph.res.Elapsed
			for j := range cpu {
				if cpu[j] < 0 || ph.cpu[j] < 0 {
					cpu[j] = -1
				} else {
					cpu[j] += ph.cpu[j]
				}
			}
		}
		rows[i] = p.bt.row(res, cpu, p.pids)
	}
	return rows
}

// roundRatios is p's router CPU per request over floor's in each round
// (rounds where either is unknown or served nothing are left out).
func roundRatios(p, floor *altPath) []float64 {
	var out []float64
	for i := range min(len(p.phases), len(floor.phases)) {
		a, b := p.phases[i], floor.phases[i]
		if a.cpu[2] <= 0 || b.cpu[2] <= 0 || a.res.Ops == 0 || b.res.Ops == 0 {
			continue
		}
		out = append(out, (float64(a.cpu[2])/float64(a.res.Ops))/(float64(b.cpu[2])/float64(b.res.Ops)))
	}
	return out
}

// median of xs (the mean of the middle two for an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// cpuVerdict is the summary of a router's CPU against the bare proxy's:
// the ratio of the rounds' sums, each round's ratio, their median and
// whether the median meets target.
func cpuVerdict(p, floor *altPath, target float64) string {
	rs := roundRatios(p, floor)
	if len(rs) == 0 {
		return "no round measured both"
	}
	each := ""
	for i, r := range rs {
		if i > 0 {
			each += ", "
		}
		each += fmt.Sprintf("%.2f", r)
	}
	m := median(rs)
	verdict := "met"
	if m > target {
		verdict = "NOT met"
	}
	return fmt.Sprintf("rounds %s; median %.2f× (target ≤ %.1f×: %s)", each, m, target, verdict)
}
