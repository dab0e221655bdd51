package redis_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	lhredis "github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// TestAdmitMatchesGo holds acquire.lua and resize.lua to ledger.Admit and
// ledger.AdmitGrowth, and release.lua to ledger.Breaker.Report: random
// pools (growth headroom, engines whose reported capacity is below, at or
// above the configured one, breakers that open after 1-3 failures and
// stay open or are half-open with their probe budget, half of them in a
// recovery window with engines that recover or not) and requests and
// releases with random outcomes, the Go rule evaluated on a Stats snapshot
// before each call, and the script's decision (and probe flag, and
// breaker after a release) compared. Releases of leases held across
// failures on their engine report stale successes (granted before the
// latest failure), the others fresh ones. LEASEHOLD_TEST_SEED=<seed> reruns one round; a failing
// round logs its seed.
func TestAdmitMatchesGo(t *testing.T) {
	srv := redisserver.Start(t)
	seededRounds(t, 8, 7, func(t *testing.T, rng *rand.Rand) { admitRound(t, srv, rng) })
}

// randomPool is a random pool "p" for the differential tests: 1-4 engines
// with random telemetry expectations, two tenants and two priorities with
// random shares and fills, a random reservation mode and growth headroom.
func randomPool(rng *rand.Rand) ledger.PoolSpec {
	frac := func() float64 {
		switch rng.IntN(4) {
		case 0:
			return 1
		case 1:
			return []float64{0.7, 0.95, 0.5, 0.1, 0.3}[rng.IntN(5)]
		}
		return 0.05 + 0.95*rng.Float64()
	}
	spec := ledger.PoolSpec{Name: "p", RetryAfter: time.Duration(rng.IntN(3000)) * time.Millisecond}
	switch rng.IntN(4) {
	case 0:
		spec.Reserve = ledger.ReserveWorstCase
	case 1:
		spec.Reserve = ledger.ReserveElastic
		spec.GrowthHeadroom = []float64{0, 0.1, 0.3, ledger.MaxGrowthHeadroom}[rng.IntN(4)]
	default:
		spec.GrowthHeadroom = ledger.MaxGrowthHeadroom * rng.Float64()
	}
	for i := range 1 + rng.IntN(4) {
		e := ledger.EngineSpec{ID: ledger.EngineID(fmt.Sprintf("e%d", i)), KVTokens: 1 + rng.Int64N(2000), Slots: 1 + rng.Int64N(8)}
		switch rng.IntN(4) {
		case 1: // never observed: stale from the start
			e.StaleAfter = time.Hour
			e.StalePolicy = []ledger.StalePolicy{"", ledger.StaleHold, ledger.StaleBlock, ledger.StaleIgnore}[rng.IntN(4)]
		case 2: // observed below: fresh for the whole round
			e.StaleAfter = time.Hour
			e.StalePolicy = []ledger.StalePolicy{ledger.StaleHold, ledger.StaleBlock, ledger.StaleIgnore}[rng.IntN(3)]
		}
		spec.Engines = append(spec.Engines, e)
	}
	for i := range 2 {
		ts := ledger.TenantSpec{Name: ledger.TenantID(fmt.Sprintf("t%d", i)), KVShare: frac()}
		if rng.IntN(2) == 0 {
			ts.SlotShare = frac()
		}
		spec.Tenants = append(spec.Tenants, ts)
	}
	for i := range 2 {
		spec.Priorities = append(spec.Priorities, ledger.PrioritySpec{Name: ledger.PriorityName(fmt.Sprintf("q%d", i)), MaxFill: frac()})
	}
	// Breakers open after 1-3 failures and either stay open for the round
	// or are half-open from the next millisecond (the test sleeps past it
	// after each release, so no decision straddles a cooldown's end).
	spec.Breaker = ledger.BreakerSpec{Failures: 1 + rng.IntN(3), Cooldown: []time.Duration{time.Millisecond, time.Hour}[rng.IntN(2)],
		Probes: 1 + rng.IntN(2), Successes: 1 + rng.IntN(2)}
	if rng.IntN(5) == 0 {
		spec.Breaker.Failures = -1
	}
	return spec
}

// observeRandomly reports telemetry for spec's engines: always for those
// expected to report, sometimes for the others, with a reported capacity
// that is unknown, below, at or above the configured one. Engines it does
// not observe stay never observed.
func observeRandomly(t *testing.T, l ledger.Ledger, rng *rand.Rand, spec ledger.PoolSpec) {
	ctx := ctxT(t)
	for _, e := range spec.Engines {
		if (e.StaleAfter > 0 && rng.IntN(3) > 0) || (e.StaleAfter == 0 && rng.IntN(3) == 0) {
			observe(t, l, rng, e)
		}
		if rng.IntN(6) == 0 {
			if err := l.SetDraining(ctx, spec.Name, e.ID, true); err != nil {
				t.Fatalf("SetDraining: %v", err)
			}
		}
	}
}

// observe applies a random observation of e taken now (observeAt).
func observe(t *testing.T, l ledger.Ledger, rng *rand.Rand, e ledger.EngineSpec) {
	observeAt(t, l, rng, e, time.Now())
}

// observeAt applies a random observation of e taken at at, its reported
// capacity unknown (0), below, at or above the configured one, a third of
// them idle (nothing running or waiting).
func observeAt(t *testing.T, l ledger.Ledger, rng *rand.Rand, e ledger.EngineSpec, at time.Time) {
	total := []int64{0, 1 + rng.Int64N(e.KVTokens), e.KVTokens, e.KVTokens + 1 + rng.Int64N(e.KVTokens)}[rng.IntN(4)]
	obs := ledger.Observation{Pool: "p", Engine: e.ID, KVTokensUsed: rng.Int64N(e.KVTokens), KVTokensTotal: total,
		Running: rng.Int64N(e.Slots), Waiting: rng.Int64N(3), ObservedAt: at}
	if rng.IntN(3) == 0 {
		obs.Running, obs.Waiting = 0, 0
	}
	if r, err := l.Observe(ctxT(t), obs); err != nil || !r.Applied {
		t.Fatalf("Observe(%+v) = %+v, %v; want applied", obs, r, err)
	}
}

// snapshot is a Stats reading in the Go rule's terms.
type snapshot struct {
	st      ledger.PoolStats
	engines map[ledger.EngineID]ledger.EngineState
	tenants map[ledger.TenantID]ledger.TenantStats
	fills   map[ledger.PriorityName]float64
	// since is the epoch's ledger.RecoverySince in a round with a
	// recovery window (zero without one).
	since time.Time
}

func readSnapshot(t *testing.T, l ledger.Ledger) snapshot {
	t.Helper()
	st, err := l.Stats(ctxT(t), "p")
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	s := snapshot{st: st, engines: map[ledger.EngineID]ledger.EngineState{}, tenants: map[ledger.TenantID]ledger.TenantStats{},
		fills: map[ledger.PriorityName]float64{}}
	for _, e := range st.Engines {
		s.engines[e.Spec.ID] = ledger.EngineState{Spec: e.Spec, Draining: e.Draining, ReservedKV: e.ReservedKV, ReservedSlots: e.ReservedSlots,
			CorrectionKV: e.CorrectionKV, CorrectionSlots: e.CorrectionSlots, ObservedAt: e.ObservedAt,
			ReportedKV: e.LastObservation.KVTokensTotal, Breaker: e.Breaker,
			LastObservation: e.LastObservation, ArrivedAt: e.ObservedAt}
	}
	for _, x := range st.Tenants {
		s.tenants[x.Spec.Name] = x
	}
	for _, p := range st.Priorities {
		s.fills[p.Name] = p.MaxFill
	}
	return s
}

// admission is the Go rule's input for a request of tenant at prio in
// spec's pool, without candidates or amounts.
func (s snapshot) admission(spec ledger.PoolSpec, epoch ledger.Epoch, tenant ledger.TenantID, prio ledger.PriorityName) ledger.Admission {
	ts := s.tenants[tenant]
	return ledger.Admission{Now: s.st.Now, CapacityKV: s.st.CapacityKV, CapacitySlots: s.st.CapacitySlots, Tenant: ts.Spec,
		TenantKV: ts.ReservedKV, TenantSlots: ts.ReservedSlots, MaxFill: s.fills[prio], RetryAfter: spec.RetryAfter, Epoch: epoch,
		GrowthHeadroom: spec.GrowthHeadroom, Breaker: spec.Breaker,
		RecoveringUntil: s.st.RecoveringUntil, ObservedSince: s.since, Reserve: spec.Mode()}
}

// startRound configures a randomPool on a new ledger on srv, checks Stats
// reports its mode and headroom, opens holder "h"'s session and observes
// the engines at random (observeRandomly).
func startRound(t *testing.T, srv *redisserver.Server, rng *rand.Rand) (*lhredis.Ledger, ledger.PoolSpec, ledger.Epoch) {
	return startRoundWith(t, srv, rng, noWindow)
}

// startRoundWith is startRound on a ledger with opts.
func startRoundWith(t *testing.T, srv *redisserver.Server, rng *rand.Rand, opts ledger.Options) (*lhredis.Ledger, ledger.PoolSpec, ledger.Epoch) {
	l := newLedger(t, srv, opts)
	spec := randomPool(rng)
	epoch := mustConfigure(t, l, spec)
	if st := readSnapshot(t, l).st; st.Reserve != spec.Mode() || st.GrowthHeadroom != spec.GrowthHeadroom {
		t.Fatalf("Stats reserve %q, growth headroom %v; want the spec's %q, %v", st.Reserve, st.GrowthHeadroom, spec.Mode(), spec.GrowthHeadroom)
	}
	mustKeepAlive(t, l, "p", "h", time.Hour)
	observeRandomly(t, l, rng, spec)
	return l, spec, epoch
}

func admitRound(t *testing.T, srv *redisserver.Server, rng *rand.Rand) {
	// Half the rounds run in an hour-long recovery window with a dispatch
	// grace of 1-20ms: the first observations (right after Configure)
	// arrive before the epoch's since, later ones after it, taken either
	// now or 1ms before since, so engines recover or not every way
	// (ledger.EngineState.Recovered), worst_case pools only when idle.
	opts, window := noWindow, time.Duration(0)
	if rng.IntN(2) == 0 {
		window = time.Hour
		opts = ledger.Options{RecoveryWindow: window, ConfirmGrace: time.Duration(1+rng.IntN(20)) * time.Millisecond}
	}
	l, spec, epoch := startRoundWith(t, srv, rng, opts)
	var since time.Time
	taken := map[ledger.EngineID]time.Time{} // latest applied stamp per engine
	if window > 0 {
		st := readSnapshot(t, l).st
		since = ledger.RecoverySince(st.RecoveringUntil.Add(-window), opts.ConfirmGrace)
		for _, e := range st.Engines {
			taken[e.Spec.ID] = e.LastObservation.ObservedAt
		}
	}
	ctx := ctxT(t)
	var held []ledger.Lease
	outcomes := map[string]int{}
	defer func() { t.Logf("outcomes: %v", outcomes) }()
	for step := range 80 {
		if rng.IntN(10) == 0 { // a new capacity report
			e := spec.Engines[rng.IntN(len(spec.Engines))]
			if e.StaleAfter == 0 || rng.IntN(2) == 0 {
				at := time.Now()
				if early := since.Add(-time.Millisecond); window > 0 && rng.IntN(3) == 0 && early.After(taken[e.ID]) && early.Before(at) {
					at = early
				}
				observeAt(t, l, rng, e, at)
				taken[e.ID] = at
			}
		}
		snap := readSnapshot(t, l)
		snap.since = since
		engines := snap.engines
		admission := func(tenant ledger.TenantID, prio ledger.PriorityName) ledger.Admission {
			return snap.admission(spec, epoch, tenant, prio)
		}

		if len(held) > 0 && rng.IntN(4) == 0 { // resize or release a held lease
			i := rng.IntN(len(held))
			x := held[i]
			if rng.IntN(2) == 0 {
				o := []ledger.Outcome{ledger.OutcomeNone, ledger.OutcomeOK, ledger.OutcomeConnect, ledger.OutcomeStatus5xx, ledger.OutcomeReset}[rng.IntN(5)]
				before := engines[x.Engine].Breaker
				want, _ := before.Report(snap.st.Now, spec.Breaker, x.Created, x.Probe, o)
				if o == ledger.OutcomeOK && before.State == ledger.BreakerClosed && before.Failures > 0 && !spec.Breaker.Off() {
					outcomes[map[bool]string{true: "fresh ok", false: "stale ok"}[before.Fresh(x.Created)]]++
				}
				if _, err := l.Release(ctx, x.Ref(), ledger.Usage{Outcome: o}); err != nil {
					t.Fatalf("Release: %v", err)
				}
				time.Sleep(2 * time.Millisecond) // past a 1ms cooldown: read both as of after it
				after := readSnapshot(t, l)
				got, want := after.engines[x.Engine].Breaker, want.At(after.st.Now, spec.Breaker)
				if got.State != want.State || got.Failures != want.Failures || got.Successes != want.Successes || got.Probes != want.Probes {
					t.Errorf("step %d Release(%s on %s granted %s, probe %v, outcome %q): breaker %+v, Go rule %+v",
						step, x.ID, x.Engine, x.Created.Format(time.StampMilli), x.Probe, o, got, want)
				}
				// The Go rule stamped a counted failure at the snapshot's
				// now; the script at its own, between that and after.
				if !countsFailure(spec.Breaker, before, x.Probe, o) {
					if !got.LastFailureAt.Equal(want.LastFailureAt) {
						t.Errorf("step %d Release(%s, outcome %q): breaker LastFailureAt %s, want %s unchanged", step, x.ID, o, got.LastFailureAt, want.LastFailureAt)
					}
				} else if got.LastFailureAt.Before(snap.st.Now.Truncate(time.Millisecond)) || got.LastFailureAt.After(after.st.Now) {
					t.Errorf("step %d Release(%s, outcome %q): breaker LastFailureAt %s, want the release's time, within [%s, %s]",
						step, x.ID, o, got.LastFailureAt.Format(time.StampMilli), snap.st.Now.Format(time.StampMilli), after.st.Now.Format(time.StampMilli))
				}
				held = append(held[:i], held[i+1:]...)
				continue
			}
			newKV := 1 + rng.Int64N(2*x.KVTokens+50)
			var want *ledger.Rejection
			if delta := newKV - x.KVTokens; delta > 0 {
				want = ledger.AdmitGrowth(admission(x.Tenant, x.Priority), engines[x.Engine], newKV, delta)
			}
			rn, err := l.Resize(ctx, x.Ref(), newKV)
			compare(t, fmt.Sprintf("step %d Resize(%s kv %d -> %d on %s)", step, x.ID, x.KVTokens, newKV, x.Engine), err, want, "", rn.Lease.Engine)
			if err == nil {
				held[i] = rn.Lease
			}
			continue
		}

		r := ledger.AcquireRequest{
			Pool: "p", Tenant: spec.Tenants[rng.IntN(2)].Name, Priority: spec.Priorities[rng.IntN(2)].Name,
			KVTokens: 1 + rng.Int64N(700), Slots: 1 + rng.Int64N(3), Holder: "h",
			RequestID: ledger.RequestID(fmt.Sprintf("r%d", step)), TTL: time.Hour,
		}
		for _, i := range rng.Perm(len(spec.Engines))[:1+rng.IntN(len(spec.Engines))] {
			r.Candidates = append(r.Candidates, spec.Engines[i].ID)
		}
		a := admission(r.Tenant, r.Priority)
		for _, c := range r.Candidates {
			a.Candidates = append(a.Candidates, engines[c])
		}
		a.KVTokens, a.Slots = r.KVTokens, r.Slots
		idx, want := ledger.Admit(a)
		wantEngine, wantProbe := ledger.EngineID(""), false
		if idx >= 0 {
			wantEngine = r.Candidates[idx]
			_, wantProbe = a.Candidates[idx].Breaker.Grant(spec.Breaker)
		}
		g, err := l.Acquire(ctx, r)
		if rej := ledger.AsRejection(err); rej != nil {
			outcomes[string(rej.Reason)]++
		} else if err == nil {
			outcomes["granted"]++
			if g.Lease.Probe {
				outcomes["probes"]++
			}
		}
		compare(t, fmt.Sprintf("step %d Acquire(kv=%d slots=%d %s/%s on %v)", step, r.KVTokens, r.Slots, r.Tenant, r.Priority, r.Candidates),
			err, want, wantEngine, g.Lease.Engine)
		if err == nil && g.Lease.Probe != wantProbe {
			t.Errorf("step %d Acquire on %s: Probe = %v, Go rule %v", step, g.Lease.Engine, g.Lease.Probe, wantProbe)
		}
		if err == nil {
			if got, perr := ledger.ParseLeaseID(g.Lease.ID); perr != nil || got != g.Lease.Fence || g.Lease.ID != ledger.MakeLeaseID(g.Lease.Fence) {
				t.Errorf("lease id %q does not encode fence %s", g.Lease.ID, g.Lease.Fence)
			}
			held = append(held, g.Lease)
		}
	}
}

func compare(t *testing.T, what string, err error, want *ledger.Rejection, wantEngine, gotEngine ledger.EngineID) {
	t.Helper()
	got := ledger.AsRejection(err)
	switch {
	case err != nil && got == nil:
		t.Fatalf("%s error = %v, want a decision", what, err)
	case want == nil && got != nil:
		t.Errorf("%s = rejected %s on %q, Go rule grants on %q", what, got.Reason, got.Engine, wantEngine)
	case want != nil && got == nil:
		t.Errorf("%s = granted on %s, Go rule rejects %s on %q", what, gotEngine, want.Reason, want.Engine)
	case want != nil && *got != *want:
		t.Errorf("%s = %+v, Go rule %+v", what, *got, *want)
	case want == nil && wantEngine != "" && gotEngine != wantEngine:
		t.Errorf("%s granted on %s, Go rule on %s", what, gotEngine, wantEngine)
	}
}
