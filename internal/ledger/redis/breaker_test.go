package redis_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// TestBreakerReportMatchesGo holds release.lua's breaker to
// ledger.Breaker.Report with the leases' grant times: random rounds of
// grants and releases on two engines whose breaker opens after 2-5
// failures, with several leases held at once, so successes arrive on
// leases granted before the engine's latest failure (stale: no reset),
// after it (fresh), and in the failure's own millisecond (stale). Each
// release's Go prediction, from a Stats snapshot before it, is compared
// with the breaker Stats reads after it. A round whose cooldown is 1 ms
// sleeps past it after each release (so no decision straddles its end)
// and goes through half-open and probes; one of an hour does not sleep,
// so grants follow failures within the same millisecond.
// LEASEHOLD_TEST_SEED=<seed> reruns one round.
func TestBreakerReportMatchesGo(t *testing.T) {
	srv := redisserver.Start(t)
	total := map[string]int{}
	seededRounds(t, 8, 11, func(t *testing.T, rng *rand.Rand) {
		for k, n := range breakerRound(t, srv, rng) {
			total[k] += n
		}
	})
	t.Logf("successes reported on a closed engine with failures counted: %v", total)
	if _, one := os.LookupEnv(seedEnv); !one && (total["stale ok"] == 0 || total["fresh ok"] == 0) {
		t.Errorf("rounds reported %d stale and %d fresh successes on an engine with failures counted, want both", total["stale ok"], total["fresh ok"])
	}
}

// breakerRound runs one round and returns how many successes it reported
// on a closed engine with failures counted, by kind.
func breakerRound(t *testing.T, srv *redisserver.Server, rng *rand.Rand) map[string]int {
	l := newLedger(t, srv, noWindow)
	ctx := ctxT(t)
	spec := ledger.PoolSpec{Name: "p",
		Engines: []ledger.EngineSpec{{ID: "e0", KVTokens: 1 << 20, Slots: 1 << 10}, {ID: "e1", KVTokens: 1 << 20, Slots: 1 << 10}},
		Tenants: []ledger.TenantSpec{{Name: "t", KVShare: 1}}, Priorities: []ledger.PrioritySpec{{Name: "q", MaxFill: 1}},
		Breaker: ledger.BreakerSpec{Failures: 2 + rng.IntN(4), Cooldown: []time.Duration{time.Millisecond, time.Hour}[rng.IntN(2)],
			Probes: 1 + rng.IntN(2), Successes: 1 + rng.IntN(2)},
	}
	mustConfigure(t, l, spec)
	mustKeepAlive(t, l, "p", "h", time.Hour)
	sleep := spec.Breaker.Cooldown == time.Millisecond
	kinds := map[string]int{}
	var held []ledger.Lease
	for step := range 150 {
		if len(held) == 0 || (len(held) < 8 && rng.IntN(2) == 0) {
			r := ledger.AcquireRequest{Pool: "p", Tenant: "t", Priority: "q", KVTokens: 1, Slots: 1, Holder: "h",
				RequestID: ledger.RequestID(fmt.Sprintf("r%d", step)), TTL: time.Hour}
			for _, i := range rng.Perm(2) {
				r.Candidates = append(r.Candidates, spec.Engines[i].ID)
			}
			g, err := l.Acquire(ctx, r)
			if err == nil {
				held = append(held, g.Lease)
			} else if rej := ledger.AsRejection(err); rej == nil || rej.Reason != ledger.ReasonBreakerOpen {
				t.Fatalf("step %d Acquire on %v: %v, want a grant or breaker_open", step, r.Candidates, err)
			}
			continue
		}
		i := rng.IntN(len(held))
		x := held[i]
		held = append(held[:i], held[i+1:]...)
		o := []ledger.Outcome{ledger.OutcomeOK, ledger.OutcomeOK, ledger.OutcomeNone, ledger.OutcomeStatus5xx, ledger.OutcomeConnect}[rng.IntN(5)]
		snap := readSnapshot(t, l)
		before := snap.engines[x.Engine].Breaker
		want, _ := before.Report(snap.st.Now, spec.Breaker, x.Created, x.Probe, o)
		if o == ledger.OutcomeOK && before.State == ledger.BreakerClosed && before.Failures > 0 {
			switch {
			case x.Created.UnixMilli() == before.LastFailureAt.UnixMilli():
				kinds["stale ok"]++
				kinds["stale ok, same ms"]++
			case before.Fresh(x.Created):
				kinds["fresh ok"]++
			default:
				kinds["stale ok"]++
			}
		}
		if rel, err := l.Release(ctx, x.Ref(), ledger.Usage{Outcome: o}); err != nil || !rel.Released {
			t.Fatalf("step %d Release(%s): %+v, %v; want released", step, x.ID, rel, err)
		}
		if sleep {
			time.Sleep(2 * time.Millisecond) // past a 1ms cooldown: read both as of after it
		}
		after := readSnapshot(t, l)
		got := after.engines[x.Engine].Breaker
		want = want.At(after.st.Now, spec.Breaker)
		what := fmt.Sprintf("step %d Release(%s on %s granted %s, probe %v, outcome %q) of breaker %s failures=%d last failure %s",
			step, x.ID, x.Engine, x.Created.Format(time.StampMilli), x.Probe, o, before.State, before.Failures, before.LastFailureAt.Format(time.StampMilli))
		if got.State != want.State || got.Failures != want.Failures || got.Successes != want.Successes || got.Probes != want.Probes {
			t.Errorf("%s: breaker %s failures=%d successes=%d probes=%d, Go rule %s %d %d %d", what,
				got.State, got.Failures, got.Successes, got.Probes, want.State, want.Failures, want.Successes, want.Probes)
		}
		// The Go rule stamped a counted failure at the snapshot's now; the
		// script at its own, between that and after.
		if !countsFailure(spec.Breaker, before, x.Probe, o) {
			if !got.LastFailureAt.Equal(before.LastFailureAt) {
				t.Errorf("%s: LastFailureAt %s, want unchanged", what, got.LastFailureAt.Format(time.StampMilli))
			}
		} else if got.LastFailureAt.Before(snap.st.Now.Truncate(time.Millisecond)) || got.LastFailureAt.After(after.st.Now) {
			t.Errorf("%s: LastFailureAt %s, want the release's time, within [%s, %s]", what,
				got.LastFailureAt.Format(time.StampMilli), snap.st.Now.Format(time.StampMilli), after.st.Now.Format(time.StampMilli))
		}
	}
	var parts []string
	for _, k := range []string{"fresh ok", "stale ok", "stale ok, same ms"} {
		parts = append(parts, fmt.Sprintf("%s %d", k, kinds[k]))
	}
	t.Logf("breaker %+v: %s", spec.Breaker, strings.Join(parts, ", "))
	return kinds
}

// countsFailure reports whether the release of a lease (probe: a probe)
// with outcome o counts a failure against breaker b (read with At) under
// spec s, stamping its LastFailureAt: a failure while closed, or a failed
// probe.
func countsFailure(s ledger.BreakerSpec, b ledger.Breaker, probe bool, o ledger.Outcome) bool {
	return !s.Off() && o.Failure() && (b.State == ledger.BreakerClosed || (b.State == ledger.BreakerHalfOpen && probe))
}

// TestReleaseOKStoresBreakerAsBefore checks what a release with outcome ok
// leaves in the engine's stored breaker (e:<id>:b), byte for byte, in the
// cases release.lua skips reading it (quiet) and the ones next to them
// that it must not: nothing stored stays absent; a closed breaker with no
// failure counted (one reset after a failure: failed_ms set) stays as it
// is under a breaker that is on; a count of failures is reset; a breaker
// of five fields (written before failed_ms) is rewritten in six; under a
// breaker turned off every stored breaker reads, and is written back,
// closed with every count 0.
func TestReleaseOKStoresBreakerAsBefore(t *testing.T) {
	srv := redisserver.Start(t)
	client := srv.Client()
	for _, c := range []struct {
		name      string
		off       bool
		raw, want string // "": absent
	}{
		{name: "none stored", raw: "", want: ""},
		{name: "closed, reset after a failure", raw: "closed 0 0 0 0 1700000000000", want: "closed 0 0 0 0 1700000000000"},
		{name: "closed, all 0", raw: "closed 0 0 0 0 0", want: "closed 0 0 0 0 0"},
		{name: "closed, failures counted", raw: "closed 2 0 0 0 1700000000000", want: "closed 0 0 0 0 1700000000000"},
		{name: "five fields", raw: "closed 0 0 0 0", want: "closed 0 0 0 0 0"},
		{name: "off, none stored", off: true, raw: "", want: ""},
		{name: "off, reset after a failure", off: true, raw: "closed 0 0 0 0 1700000000000", want: "closed 0 0 0 0 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := ctxT(t)
			l, p := newLedgerOn(t, client, noWindow)
			spec := basicSpec()
			if c.off {
				spec.Breaker.Failures = -1
			}
			mustConfigure(t, l, spec)
			mustKeepAlive(t, l, "llama", "h1", time.Minute)
			g, err := l.Acquire(ctx, req("h1", "a", 100, 1, "gpu-0"))
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			state := p + ":{llama}:state"
			if c.raw != "" {
				client.HSet(ctx, state, "e:gpu-0:b", c.raw)
			}
			if rel, err := l.Release(ctx, g.Lease.Ref(), ledger.Usage{Finished: true, Outcome: ledger.OutcomeOK}); err != nil || !rel.Released {
				t.Fatalf("Release = %+v, %v", rel, err)
			}
			got, err := client.HGet(ctx, state, "e:gpu-0:b").Result()
			if err != nil {
				got = ""
			}
			if got != c.want {
				t.Errorf("e:gpu-0:b after an ok release of %q = %q, want %q", c.raw, got, c.want)
			}
		})
	}
}
