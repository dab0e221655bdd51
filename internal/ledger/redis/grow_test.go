package redis_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// TestGrowMatchesGo holds grow.lua to ledger.GrowthOf: random pools (both
// reservation modes, reported capacities below and above the configured
// ones, engines and tenants removed while their leases grow), random
// growth below, at, within and above the engine's capacity, and the Go
// rule evaluated on a Stats snapshot before each call. The script must
// give the same delta, Overgrown flag and error, charge the delta to the
// engine and the tenant, count it, and change nothing when the rule says
// so. Releases with usage must count their completion length.
// LEASEHOLD_TEST_SEED=<seed> reruns one round; a failing round logs its seed.
func TestGrowMatchesGo(t *testing.T) {
	srv := redisserver.Start(t)
	seededRounds(t, 8, 8, func(t *testing.T, rng *rand.Rand) { growRound(t, srv, rng) })
}

func growRound(t *testing.T, srv *redisserver.Server, rng *rand.Rand) {
	l, spec, epoch := startRound(t, srv, rng)
	ctx := ctxT(t)
	live := spec // what is configured now
	var held []ledger.Lease
	outcomes := map[string]int{}
	defer func() { t.Logf("outcomes: %v", outcomes) }()
	for step := range 150 {
		what := fmt.Sprintf("step %d", step)
		switch {
		case rng.IntN(15) == 0: // remove engines and tenants, or bring them back
			live = someOf(rng, spec)
			mustConfigure(t, l, live)
		case rng.IntN(8) == 0: // new telemetry: correction and reported capacity
			observe(t, l, rng, live.Engines[rng.IntN(len(live.Engines))])
		case len(held) < 3 || rng.IntN(4) == 0:
			r := ledger.AcquireRequest{
				Pool: "p", Tenant: live.Tenants[rng.IntN(len(live.Tenants))].Name, Priority: spec.Priorities[rng.IntN(2)].Name,
				KVTokens: 1 + rng.Int64N(300), Slots: 1, Holder: "h", RequestID: ledger.RequestID(fmt.Sprintf("r%d", step)), TTL: time.Hour,
			}
			for _, e := range live.Engines {
				r.Candidates = append(r.Candidates, e.ID)
			}
			g, err := l.Acquire(ctx, r)
			if ledger.AsRejection(err) != nil && rng.IntN(2) == 0 {
				// Load the ledger did not admit: a reasserted lease,
				// taken above capacity if need be.
				fence := ledger.Fence{Epoch: epoch, Seq: uint64(1e6 + step)}
				x := ledger.Lease{ID: ledger.MakeLeaseID(fence), Fence: fence, Pool: "p",
					Engine: r.Candidates[rng.IntN(len(r.Candidates))], Tenant: r.Tenant, Priority: r.Priority,
					KVTokens: r.KVTokens, Slots: r.Slots, Holder: "h", RequestID: r.RequestID}
				g, err = l.Reassert(ctx, x, time.Hour)
				if errors.Is(err, ledger.ErrInvalidArgument) {
					continue // larger than the engine (ledger.CheckReassert): no load to grow
				}
			}
			if err == nil {
				held = append(held, g.Lease)
			} else if ledger.AsRejection(err) == nil {
				t.Fatalf("%s Acquire or Reassert: %v", what, err)
			}
		case rng.IntN(6) == 0:
			i := rng.IntN(len(held))
			releaseCounted(t, l, rng, held[i])
			held = append(held[:i], held[i+1:]...)
		default:
			i := rng.IntN(len(held))
			if got, ok := growChecked(t, l, rng, spec, epoch, held[i], outcomes); ok {
				held[i] = got
			}
		}
	}
}

// someOf returns spec with some of its engines and tenants left out (at
// least one of each kept).
func someOf(rng *rand.Rand, spec ledger.PoolSpec) ledger.PoolSpec {
	out := spec
	out.Engines, out.Tenants = nil, nil
	for _, e := range spec.Engines {
		if rng.IntN(4) > 0 {
			out.Engines = append(out.Engines, e)
		}
	}
	for _, x := range spec.Tenants {
		if rng.IntN(4) > 0 {
			out.Tenants = append(out.Tenants, x)
		}
	}
	if len(out.Engines) == 0 {
		out.Engines = spec.Engines[:1]
	}
	if len(out.Tenants) == 0 {
		out.Tenants = spec.Tenants[:1]
	}
	return out
}

// growChecked grows x to a random size and checks the script against
// ledger.GrowthOf on the state before the call. It returns the lease
// after a successful Grow.
func growChecked(t *testing.T, l ledger.Ledger, rng *rand.Rand, spec ledger.PoolSpec, epoch ledger.Epoch, x ledger.Lease, outcomes map[string]int) (ledger.Lease, bool) {
	t.Helper()
	before := readSnapshot(t, l)
	e := before.engines[x.Engine]
	c := e.CapacityKV()
	var newKV int64
	switch rng.IntN(6) {
	case 0:
		newKV = 1 + rng.Int64N(x.KVTokens) // below or equal
	case 1:
		newKV = x.KVTokens
	case 2:
		newKV = c + 1 + rng.Int64N(100)
	default:
		newKV = x.KVTokens + rng.Int64N(max(1, c-x.KVTokens+1))
	}
	what := fmt.Sprintf("Grow(%s kv %d -> %d on %s, capacity %d, tenant %s)", x.ID, x.KVTokens, newKV, x.Engine, c, x.Tenant)
	want, werr := ledger.GrowthOf(spec.Mode(), before.admission(spec, epoch, x.Tenant, x.Priority), e, x, newKV)
	r, err := l.Grow(ctxT(t), x.Ref(), newKV)
	after := readSnapshot(t, l)
	if werr != nil {
		outcomes["invalid"]++
		if !errors.Is(err, ledger.ErrInvalidArgument) || !strings.Contains(err.Error(), werr.Error()) {
			t.Errorf("%s error = %v, want the Go rule's %q", what, err, werr)
		}
		if got, was := accounts(after), accounts(before); got != was {
			t.Errorf("%s failed and changed the pool:\n got %s\nwant %s", what, got, was)
		}
		return ledger.Lease{}, false
	}
	if err != nil {
		t.Fatalf("%s error = %v, want delta %d (Go rule)", what, err, want.Delta)
	}
	wantLease := x
	wantLease.KVTokens, wantLease.Overgrown = newKV, want.Overgrown
	if r.Lease != wantLease || r.Epoch != epoch {
		t.Errorf("%s = %+v (epoch %d), want %+v (epoch %d)", what, r.Lease, r.Epoch, wantLease, epoch)
	}
	if ls, err := l.List(ctxT(t), ledger.Filter{Pool: "p", Holder: "h"}); err != nil || !containsLease(ls, wantLease) {
		t.Errorf("%s: List = %+v, %v; want it to hold %+v", what, ls, err, wantLease)
	}
	if want.Delta == 0 {
		outcomes["no-op"]++
		if got, was := accounts(after), accounts(before); got != was {
			t.Errorf("%s to the lease's size changed the pool:\n got %s\nwant %s", what, got, was)
		}
		return r.Lease, true
	}
	outcomes["grown"]++
	wantC := map[string]int64{ledger.CounterGrowths: 1, ledger.CounterGrownKV: want.Delta}
	if want.Overgrown {
		outcomes["overgrown"]++
	}
	// Overgrowths counts the growths that themselves pass capacity or
	// quota, not those of a lease flagged before.
	if want.Passed {
		outcomes["overgrowth"]++
		wantC[ledger.CounterOvergrowths] = 1
	}
	for _, name := range []string{ledger.CounterGrowths, ledger.CounterGrownKV, ledger.CounterOvergrowths} {
		if d := after.st.Counters[name] - before.st.Counters[name]; d != wantC[name] {
			t.Errorf("%s counter %s += %d, want %d", what, name, d, wantC[name])
		}
	}
	if d := after.engines[x.Engine].ReservedKV - e.ReservedKV; d != want.Delta {
		t.Errorf("%s engine reserved KV += %d, want %d", what, d, want.Delta)
	}
	if d := after.tenants[x.Tenant].ReservedKV - before.tenants[x.Tenant].ReservedKV; d != want.Delta {
		t.Errorf("%s tenant reserved KV += %d, want %d", what, d, want.Delta)
	}
	return r.Lease, true
}

// releaseCounted releases x with random usage and checks the release and
// usage counters, the completion-length ones included.
func releaseCounted(t *testing.T, l ledger.Ledger, rng *rand.Rand, x ledger.Lease) {
	t.Helper()
	u := ledger.Usage{PromptTokens: rng.Int64N(100), Finished: rng.IntN(5) > 0}
	if rng.IntN(4) > 0 {
		u.CompletionTokens = 1 + rng.Int64N(3000)
	}
	before := readSnapshot(t, l)
	if r, err := l.Release(ctxT(t), x.Ref(), u); err != nil || !r.Released {
		t.Fatalf("Release(%s, %+v) = %+v, %v; want released", x.ID, u, r, err)
	}
	after := readSnapshot(t, l)
	want := map[string]int64{ledger.CounterReleases: 1, ledger.CounterReleasedKV: x.KVTokens,
		ledger.CounterActualPrompt: u.PromptTokens, ledger.CounterActualComplete: u.CompletionTokens}
	for _, name := range ledger.CompletionCounters(u, x.Tenant) {
		want[name] = 1
	}
	for name, n := range want {
		if d := after.st.Counters[name] - before.st.Counters[name]; d != n {
			t.Errorf("Release(%s of %s, %+v) counter %s += %d, want %d", x.ID, x.Tenant, u, name, d, n)
		}
	}
}

// accounts formats what Grow may change: reservations and counters.
func accounts(s snapshot) string {
	var b strings.Builder
	for _, e := range s.st.Engines {
		fmt.Fprintf(&b, "engine %s %d/%d/%d; ", e.Spec.ID, e.ReservedKV, e.ReservedSlots, e.Leases)
	}
	for _, x := range s.st.Tenants {
		fmt.Fprintf(&b, "tenant %s %d/%d/%d; ", x.Spec.Name, x.ReservedKV, x.ReservedSlots, x.Leases)
	}
	fmt.Fprintf(&b, "counters %v", s.st.Counters)
	return b.String()
}

func containsLease(ls []ledger.Lease, want ledger.Lease) bool {
	for _, l := range ls {
		if l == want {
			return true
		}
	}
	return false
}
