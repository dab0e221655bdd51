package redis_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// TestRatesMatchGo holds lib_rate.lua (acquire.lua's rate check and
// charge, release.lua's true-up) to ledger/rate.go: random rate budgets
// and windows (from the shortest, 1 ms buckets, to the default minute,
// changed now and then by a Configure), requests charging random tokens
// (some past the budget), releases with random usage (some unknown). The
// Go rule is evaluated on a Stats snapshot at the snapshot's now and at a
// Stats read's now after the call: when both agree the script must decide
// the same, and a rate rejection's retry hint must lie between theirs
// (the script's now lies between). The tenant's window in Stats after
// each call must be the Go functions' result. LEASEHOLD_TEST_SEED=<seed>
// reruns one round; a failing round logs its seed.
func TestRatesMatchGo(t *testing.T) {
	srv := redisserver.Start(t)
	seededRounds(t, 6, 11, func(t *testing.T, rng *rand.Rand) { ratesRound(t, srv, rng) })
}

// rateWindows are the windows a round picks from: 0 is the default minute.
var rateWindows = []time.Duration{ledger.MinRateWindow, 300 * time.Millisecond, 1200 * time.Millisecond, 0}

// randomRatePool is a pool whose engines rarely refuse, so the budgets of
// its tenants decide: t0 has a token budget and maybe a request budget,
// t1 a request budget or none, t2 none.
func randomRatePool(rng *rand.Rand) ledger.PoolSpec {
	spec := ledger.PoolSpec{Name: "p", RetryAfter: time.Second, RateWindow: rateWindows[rng.IntN(len(rateWindows))]}
	for i := range 1 + rng.IntN(2) {
		spec.Engines = append(spec.Engines, ledger.EngineSpec{ID: ledger.EngineID(fmt.Sprintf("e%d", i)), KVTokens: 100_000, Slots: 1000})
	}
	spec.Tenants = []ledger.TenantSpec{
		{Name: "t0", KVShare: 1, TokensPerMinute: 200 + rng.Int64N(3000)},
		{Name: "t1", KVShare: 1},
		{Name: "t2", KVShare: 1},
	}
	if rng.IntN(2) == 0 {
		spec.Tenants[0].RequestsPerMinute = 2 + rng.Int64N(10)
	}
	if rng.IntN(3) > 0 {
		spec.Tenants[1].RequestsPerMinute = 1 + rng.Int64N(8)
	}
	spec.Priorities = []ledger.PrioritySpec{{Name: "q", MaxFill: 1}}
	return spec
}

func ratesRound(t *testing.T, srv *redisserver.Server, rng *rand.Rand) {
	l := newLedger(t, srv, noWindow)
	spec := randomRatePool(rng)
	epoch := mustConfigure(t, l, spec)
	wantBudgets(t, l, spec)
	mustKeepAlive(t, l, "p", "h", time.Hour)
	ctx := ctxT(t)
	var held []ledger.Lease
	outcomes := map[string]int{}
	defer func() { t.Logf("window %s, outcomes: %v", ledger.RateWindowOf(spec.RateWindow), outcomes) }()
	for step := range 150 {
		if rng.IntN(40) == 0 { // new budgets, maybe a new window: the windows stay
			next := randomRatePool(rng)
			next.Engines = spec.Engines
			if rng.IntN(2) == 0 {
				next.RateWindow = spec.RateWindow
			}
			spec = next
			if got := mustConfigure(t, l, spec); got != epoch {
				t.Fatalf("step %d: re-Configure changed the epoch %d to %d", step, epoch, got)
			}
			wantBudgets(t, l, spec)
			outcomes["configure"]++
		}
		if spec.RateWindow != 0 && rng.IntN(3) == 0 {
			time.Sleep(time.Duration(rng.IntN(int(ledger.RateWindowOf(spec.RateWindow)/4/time.Millisecond))) * time.Millisecond)
		}
		before := readSnapshot(t, l)
		if len(held) > 0 && rng.IntN(3) == 0 {
			i := rng.IntN(len(held))
			x := held[i]
			held = append(held[:i], held[i+1:]...)
			u := ledger.Usage{PromptTokens: rng.Int64N(x.Tokens + 2), CompletionTokens: rng.Int64N(x.Tokens + 2)}
			if rng.IntN(5) == 0 {
				u.PromptTokens = 0 // the engine's usage unknown: the charge stays
			}
			rel, err := l.Release(ctx, x.Ref(), u)
			if err != nil || !rel.Released {
				t.Fatalf("step %d Release(%s): %+v, %v; want released", step, x.ID, rel, err)
			}
			after := readSnapshot(t, l)
			ts := before.tenants[x.Tenant]
			want := ledger.TrueUpRate(ts.Rates, x.Created, before.st.Now, spec.RateWindow, ledger.RateTrueUp(x, u))
			wantWindow(t, fmt.Sprintf("step %d Release(%s charged %d, usage %d+%d)", step, x.ID, x.Tokens, u.PromptTokens, u.CompletionTokens),
				after, x.Tenant, spec.RateWindow, want)
			outcomes["releases"]++
			continue
		}

		tenant := spec.Tenants[rng.IntN(len(spec.Tenants))]
		r := ledger.AcquireRequest{
			Pool: "p", Tenant: tenant.Name, Priority: "q", KVTokens: 1 + rng.Int64N(300), Slots: 1, Holder: "h",
			RequestID: ledger.RequestID(fmt.Sprintf("r%d", step)), TTL: time.Hour,
		}
		switch rng.IntN(6) {
		case 0: // Tokens 0: the KV tokens are charged
		case 1: // past the token budget, if any
			r.Tokens = tenant.TokensPerMinute + 1 + rng.Int64N(100)
		default:
			r.Tokens = 1 + rng.Int64N(max(tenant.TokensPerMinute/2, 500))
		}
		decide := func(now time.Time) (ledger.EngineID, *ledger.Rejection) {
			a := before.admission(spec, epoch, r.Tenant, r.Priority)
			a.Now, a.KVTokens, a.Slots = now, r.KVTokens, r.Slots
			a.Tokens, a.Rates, a.RateWindow = r.ChargedTokens(), before.tenants[r.Tenant].Rates, spec.RateWindow
			for _, c := range spec.Engines {
				a.Candidates = append(a.Candidates, before.engines[c.ID])
			}
			idx, rej := ledger.Admit(a)
			if idx < 0 {
				return "", rej
			}
			return spec.Engines[idx].ID, nil
		}
		for _, c := range spec.Engines {
			r.Candidates = append(r.Candidates, c.ID)
		}
		g, err := l.Acquire(ctx, r)
		after := readSnapshot(t, l)
		what := fmt.Sprintf("step %d Acquire(%s tokens=%d, budgets %d/%d per %s)", step, r.Tenant, r.ChargedTokens(),
			tenant.TokensPerMinute, tenant.RequestsPerMinute, ledger.RateWindowOf(spec.RateWindow))
		got := ledger.AsRejection(err)
		if err != nil && got == nil {
			t.Fatalf("%s error = %v, want a decision", what, err)
		}
		e1, w1 := decide(before.st.Now)
		e2, w2 := decide(after.st.Now)
		switch {
		case (w1 == nil) != (w2 == nil) || e1 != e2 || (w1 != nil && w1.Reason != w2.Reason):
			outcomes["straddled"]++ // the window moved during the call: either may hold
		case w1 == nil && got != nil:
			t.Errorf("%s = rejected %s, Go rule grants on %s", what, got.Reason, e1)
		case w1 == nil && g.Lease.Engine != e1:
			t.Errorf("%s granted on %s, Go rule on %s", what, g.Lease.Engine, e1)
		case w1 != nil && got == nil:
			t.Errorf("%s = granted on %s, Go rule rejects %s", what, g.Lease.Engine, w1.Reason)
		case w1 != nil && (got.Reason != w1.Reason || got.Engine != w1.Engine || got.Epoch != w1.Epoch):
			t.Errorf("%s = %+v, Go rule %+v", what, *got, *w1)
		case w1 != nil && (got.RetryAfter < w2.RetryAfter || got.RetryAfter > w1.RetryAfter):
			t.Errorf("%s RetryAfter = %s, Go rule %s at the snapshot before and %s at the one after", what, got.RetryAfter, w1.RetryAfter, w2.RetryAfter)
		}
		ts := before.tenants[r.Tenant]
		want := ts.Rates
		if got != nil {
			outcomes[string(got.Reason)]++
		} else {
			outcomes["granted"]++
			held = append(held, g.Lease)
			wantTokens := int64(0)
			if tenant.Rated() {
				wantTokens = r.ChargedTokens()
				want = ledger.ChargeRate(ts.Rates, g.Lease.Created, spec.RateWindow, wantTokens)
			}
			if g.Lease.Tokens != wantTokens {
				t.Errorf("%s lease Tokens = %d, want %d", what, g.Lease.Tokens, wantTokens)
			}
		}
		wantWindow(t, what, after, r.Tenant, spec.RateWindow, want)
	}
}

// wantWindow checks tenant's window in snapshot s (Stats prunes at its
// now) is want pruned at that now.
func wantWindow(t *testing.T, what string, s snapshot, tenant ledger.TenantID, w time.Duration, want []ledger.RateBucket) {
	t.Helper()
	got := s.tenants[tenant].Rates
	if g, wt := fmtRates(got), fmtRates(ledger.PruneRates(want, s.st.Now, w)); g != wt {
		t.Errorf("%s: tenant %s window = %s, Go functions %s", what, tenant, g, wt)
	}
}

// wantBudgets checks Stats reports spec's tenants' budgets.
func wantBudgets(t *testing.T, l ledger.Ledger, spec ledger.PoolSpec) {
	t.Helper()
	s := readSnapshot(t, l)
	for _, ts := range spec.Tenants {
		got := s.tenants[ts.Name].Spec
		if got.TokensPerMinute != ts.TokensPerMinute || got.RequestsPerMinute != ts.RequestsPerMinute {
			t.Errorf("Stats tenant %s budgets %d tokens, %d requests; want the spec's %d, %d",
				ts.Name, got.TokensPerMinute, got.RequestsPerMinute, ts.TokensPerMinute, ts.RequestsPerMinute)
		}
	}
}

func fmtRates(bs []ledger.RateBucket) string {
	var b strings.Builder
	for _, x := range bs {
		fmt.Fprintf(&b, "[%d %d %d]", x.At.UnixMilli(), x.Tokens, x.Requests)
	}
	return b.String()
}
