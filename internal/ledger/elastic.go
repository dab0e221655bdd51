package ledger

import (
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// This file is the elastic-reservation rule in one place, beside Admit: the
// reservation modes, what Grow does to a lease (GrowthOf), and the
// completion-length histogram the ledger keeps from released leases' usage.
// The Go backends call GrowthOf inside their atomic step; grow.lua
// implements the same rule and the conformance suite holds them to it.

// ReserveMode is how a pool's leases reserve KV tokens.
type ReserveMode string

const (
	// ReserveElastic: a lease reserves its prompt and an expected output
	// and grows, through Grow, with what the request really generates.
	ReserveElastic ReserveMode = "elastic"
	// ReserveWorstCase: a lease reserves every token the request could
	// produce up front; Grow is refused.
	ReserveWorstCase ReserveMode = "worst_case"
)

// MaxGrowthHeadroom bounds PoolSpec.GrowthHeadroom.
const MaxGrowthHeadroom = 0.5

// Mode returns the pool's reservation mode with the default filled in.
func (s PoolSpec) Mode() ReserveMode {
	if s.Reserve == "" {
		return ReserveElastic
	}
	return s.Reserve
}

// Growth is what Grow does to one lease.
type Growth struct {
	// Delta is the KV tokens added (0: the lease already held as much, and
	// Grow changes nothing).
	Delta int64
	// Passed is set when this growth takes the engine's used KV above its
	// capacity or the tenant's reservations above its quota (the growths
	// CounterOvergrowths counts).
	Passed bool
	// Overgrown is the lease's flag after the growth: Passed, or set by an
	// earlier growth (it sticks to the lease).
	Overgrown bool
}

// GrowthOf is the Grow rule: given the pool's mode, the lease's engine and
// tenant state (a.TenantKV, a.Tenant, a.CapacityKV), the lease and the new
// KV tokens, it returns the growth or an ErrInvalidArgument naming why the
// call is malformed for this lease. Growth is never refused for capacity,
// quota, draining, stale telemetry or the recovery window: it records what
// the engine already holds. Admit then sees it as used capacity, so an
// engine it fills takes no new grant until its leases fit again.
func GrowthOf(mode ReserveMode, a Admission, e EngineState, l Lease, newKV int64) (Growth, error) {
	if mode == ReserveWorstCase {
		return Growth{}, fmt.Errorf("%w: pool %s reserves worst_case: its leases hold every output token already; Grow is for elastic pools", ErrInvalidArgument, l.Pool)
	}
	if newKV < l.KVTokens {
		return Growth{}, fmt.Errorf("%w: grow lease %s to %d kv_tokens, below the %d it holds (Resize shrinks)", ErrInvalidArgument, l.ID, newKV, l.KVTokens)
	}
	if c := e.CapacityKV(); newKV > c {
		return Growth{}, fmt.Errorf("%w: grow lease %s to %d kv_tokens, more than engine %s holds in all (%d)", ErrInvalidArgument, l.ID, newKV, e.Spec.ID, c)
	}
	g := Growth{Delta: newKV - l.KVTokens, Overgrown: l.Overgrown}
	if g.Delta == 0 {
		return g, nil
	}
	kv, _ := e.Used(a.Now)
	qKV, _ := TenantQuota(a.Tenant, a.CapacityKV, a.CapacitySlots)
	g.Passed = kv+g.Delta > e.CapacityKV() || a.TenantKV+g.Delta > qKV
	g.Overgrown = g.Overgrown || g.Passed
	return g, nil
}

// Completion-length histogram. Release adds the request's completion
// tokens to two counters of the pool, "completions/<bound>" and
// "completions/<bound>/<tenant>", where bound is the upper bound of the
// length's bucket (CompletionBucket). Buckets are exact below 4 and then
// four per power of two, so a bound overstates a length by less than 25%:
// a quantile read from them errs high, which is the safe side for a
// reservation. The counters live with the pool's other counters (Stats),
// so every router reads the same distribution.

// CompletionCounterPrefix starts every completion-length counter name.
const CompletionCounterPrefix = "completions/"

// CompletionBucket returns the upper bound of the bucket a completion of n
// tokens falls in (n < 1 counts as 1).
func CompletionBucket(n int64) int64 {
	if n < 4 {
		return max(n, 1)
	}
	b := bits.Len64(uint64(n)) - 1 // n in [2^b, 2^(b+1))
	step := int64(1) << (b - 2)    // four buckets of this width per octave
	return (n/step+1)*step - 1
}

// CompletionCounters returns the names of the counters a release with
// usage u by tenant t increments by one: the pool's bucket and the
// tenant's, or none when u is not Finished.
func CompletionCounters(u Usage, t TenantID) []string {
	if !u.Finished {
		return nil
	}
	b := CompletionCounterPrefix + strconv.FormatInt(CompletionBucket(u.CompletionTokens), 10)
	return []string{b, b + "/" + string(t)}
}

// Histogram is a completion-length distribution: how many released leases
// fell in each bucket, by bucket upper bound.
type Histogram struct {
	Counts map[int64]int64
	Total  int64
}

// CompletionHistogram reads the pool's distribution from its counters, or
// one tenant's when tenant is not empty.
func CompletionHistogram(counters map[string]int64, tenant TenantID) Histogram {
	pool, tenants := CompletionHistograms(counters)
	if tenant == "" {
		return pool
	}
	if h, ok := tenants[tenant]; ok {
		return h
	}
	return Histogram{Counts: map[int64]int64{}}
}

// CompletionHistograms reads, in one pass over the counters, the pool's
// distribution and each tenant's that has a completion counter.
func CompletionHistograms(counters map[string]int64) (pool Histogram, tenants map[TenantID]Histogram) {
	pool, tenants = Histogram{Counts: map[int64]int64{}}, map[TenantID]Histogram{}
	for name, n := range counters {
		rest, ok := strings.CutPrefix(name, CompletionCounterPrefix)
		if !ok || n <= 0 {
			continue
		}
		bound, who, hasTenant := strings.Cut(rest, "/")
		v, err := strconv.ParseInt(bound, 10, 64)
		if err != nil || v < 1 {
			continue
		}
		if !hasTenant {
			pool.add(v, n)
			continue
		}
		t := tenants[TenantID(who)]
		if t.Counts == nil {
			t.Counts = map[int64]int64{}
		}
		t.add(v, n)
		tenants[TenantID(who)] = t
	}
	return pool, tenants
}

// add counts n releases in the bucket of upper bound b.
func (h *Histogram) add(b, n int64) {
	h.Counts[b] += n
	h.Total += n
}

// Sub returns the releases in h that are not in older: the distribution of
// the window between two reads of the same pool.
func (h Histogram) Sub(older Histogram) Histogram {
	d := Histogram{Counts: map[int64]int64{}}
	for b, n := range h.Counts {
		if n -= older.Counts[b]; n > 0 {
			d.Counts[b] = n
			d.Total += n
		}
	}
	return d
}

// Quantile returns the upper bound of the bucket holding the q-quantile
// (0 < q <= 1), or 0 when h is empty.
func (h Histogram) Quantile(q float64) int64 {
	if h.Total <= 0 {
		return 0
	}
	bounds := slices.Sorted(maps.Keys(h.Counts))
	rank := int64(q*float64(h.Total) + 0.999999) // ceil, tolerant of float error
	rank = min(max(rank, 1), h.Total)
	var seen int64
	for _, b := range bounds {
		if seen += h.Counts[b]; seen >= rank {
			return b
		}
	}
	return bounds[len(bounds)-1]
}
