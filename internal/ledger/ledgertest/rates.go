package ledgertest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Rate budgets (ledger/rate.go): a tenant's tokens and requests per window,
// checked with the capacity in one atomic step, charged at grant, trued up
// at release.

// Tenants of the rates pool.
const (
	tenantTok ledger.TenantID = "tok" // tokens_per_minute rateTPM
	tenantReq ledger.TenantID = "req" // requests_per_minute rateRPM
)

const (
	rateTPM = 1000
	rateRPM = 3
)

// ratesSpec is a pool with room for every test's leases, tenant t1 with no
// budget, tok with rateTPM tokens and req with rateRPM requests per window
// (window 0: the default minute).
func ratesSpec(window time.Duration) ledger.PoolSpec {
	s := poolSpec(pool, engine(e1, 1_000_000, 1000), engine(e2, 1_000_000, 1000))
	s.Tenants = append(s.Tenants,
		ledger.TenantSpec{Name: tenantTok, KVShare: 1, TokensPerMinute: rateTPM},
		ledger.TenantSpec{Name: tenantReq, KVShare: 1, RequestsPerMinute: rateRPM},
	)
	s.RateWindow = window
	return s
}

// rateReq is a request of tenant charging tokens (0: its KV tokens, 10).
func (f *fixture) rateReq(h ledger.HolderID, tenant ledger.TenantID, tokens int64) ledger.AcquireRequest {
	r := f.req(h, 10, 1, e1, e2)
	r.Tenant, r.Tokens = tenant, tokens
	return r
}

// rateAcquire wants a grant of r charging want tokens (Lease.Tokens).
func (f *fixture) rateAcquire(r ledger.AcquireRequest, want int64) ledger.Lease {
	f.t.Helper()
	l := f.acquire(r, "")
	if l.Tokens != want {
		f.t.Errorf("Acquire(%s tokens=%d) lease Tokens = %d, want %d", describe(r), r.Tokens, l.Tokens, want)
	}
	return l
}

// rateReject wants Acquire to refuse r with a rate reason whose retry hint
// is when the window frees enough: the end, RateWindow after, of the
// bucket of the grant at oldest whose leaving makes room, counted from the
// ledger's now at the rejection (between the previous call's ledger time
// before and a Stats read after it).
func (f *fixture) rateReject(r ledger.AcquireRequest, reason ledger.Reason, oldest, before time.Time) *ledger.Rejection {
	f.t.Helper()
	_, err := f.l.Acquire(f.ctx, r)
	after := f.ledgerNow()
	what := fmt.Sprintf("Acquire(%s tokens=%d)", describe(r), r.Tokens)
	if !errors.Is(err, ledger.ErrRejected) {
		f.t.Fatalf("%s error = %v, want rejection %s", what, err, reason)
	}
	rej := ledger.AsRejection(err)
	if rej.Reason != reason || rej.Engine != "" || rej.Epoch != f.epoch {
		f.t.Fatalf("%s rejection = %s on %q epoch %d, want %s on \"\" epoch %d", what, rej.Reason, rej.Engine, rej.Epoch, reason, f.epoch)
	}
	frees := f.bucketFrees(oldest)
	lo, hi := frees.Sub(after), frees.Sub(before)
	if rej.RetryAfter < lo || rej.RetryAfter > hi {
		f.t.Errorf("%s RetryAfter = %s, want when the window frees (%s) counted from the rejection: in [%s, %s]",
			what, rej.RetryAfter, frees.Format(time.StampMilli), lo, hi)
	}
	return rej
}

// bucketFrees is when a charge made at t stops counting: the end of its
// bucket plus the window.
func (f *fixture) bucketFrees(t time.Time) time.Time {
	w := ledger.RateWidth(f.spec.RateWindow)
	start := t.Truncate(time.Millisecond).UnixMilli()
	start -= start % w.Milliseconds()
	return time.UnixMilli(start).Add(ledger.RateWindowOf(f.spec.RateWindow) + w)
}

// rateUse returns what tenant's window counts in Stats.
func (f *fixture) rateUse(tenant ledger.TenantID) (tokens, requests int64) {
	f.t.Helper()
	st := f.stats()
	ts, ok := tenantStats(st, tenant)
	if !ok {
		f.t.Fatalf("Stats has no tenant %s", tenant)
	}
	return ledger.RateUse(ts.Rates, st.Now, f.spec.RateWindow)
}

func (f *fixture) wantRateUse(when string, tenant ledger.TenantID, tokens, requests int64) {
	f.t.Helper()
	if gt, gr := f.rateUse(tenant); gt != tokens || gr != requests {
		f.t.Errorf("%s: Stats tenant %s window counts %d tokens, %d requests; want %d, %d", when, tenant, gt, gr, tokens, requests)
	}
}

func (f *fixture) releaseUsage(l ledger.Lease, u ledger.Usage, want bool) {
	f.t.Helper()
	rel, err := f.l.Release(f.ctx, l.Ref(), u)
	if err != nil {
		f.t.Fatalf("Release(%s, %+v) error = %v, want nil", l.ID, u, err)
	}
	if rel.Released != want {
		f.t.Errorf("Release(%s, %+v) Released = %v, want %v", l.ID, u, rel.Released, want)
	}
}

// used is a usage of p prompt and c completion tokens.
func used(p, c int64) ledger.Usage {
	return ledger.Usage{PromptTokens: p, CompletionTokens: c, Finished: true}
}

func (s *suite) testRates(t *testing.T) {
	t.Run("BudgetAcrossHolders", s.testRateBudget)
	t.Run("TrueUp", s.testRateTrueUp)
	t.Run("IdempotentRelease", s.testRateIdempotentRelease)
	t.Run("WindowExpiry", s.testRateWindowExpiry)
	t.Run("SurvivesConfigure", s.testRateSurvivesConfigure)
	t.Run("ConcurrentAcquires", s.testRateConcurrent)
}

// testRateBudget: one budget for every holder; the request that would
// pass it is refused with the time its window frees; a request larger
// than the budget is too_large; a tenant with no budget is not charged.
func (s *suite) testRateBudget(t *testing.T) {
	f := s.setup(t, ratesSpec(0), noWindow)
	a := f.rateAcquire(f.rateReq(h1, tenantTok, 600), 600)
	b := f.rateAcquire(f.rateReq(h2, tenantTok, 400), 400) // the budget, exactly
	f.rateReject(f.rateReq(h1, tenantTok, 1), ledger.ReasonTenantTokenRate, a.Created, b.Created)
	f.rateReject(f.rateReq(h2, tenantTok, 1), ledger.ReasonTenantTokenRate, a.Created, b.Created)
	f.reject(f.rateReq(h1, tenantTok, rateTPM+1), ledger.ReasonTooLarge, "")
	f.wantRateUse("after 2 grants and 3 refusals", tenantTok, rateTPM, 2)
	f.wantCounters("", map[string]int64{"rejections:" + string(ledger.ReasonTenantTokenRate): 2})

	// Tokens 0 charges the request's KV tokens.
	var last ledger.Lease
	for i := range rateRPM {
		last = f.rateAcquire(f.rateReq([]ledger.HolderID{h1, h2}[i%2], tenantReq, 0), 10)
	}
	first := f.list(ledger.Filter{Pool: pool, Tenant: tenantReq})[0]
	f.rateReject(f.rateReq(h2, tenantReq, 5), ledger.ReasonTenantRequestRate, first.Created, last.Created)
	f.wantRateUse("after the request budget", tenantReq, 10*rateRPM, rateRPM)

	free := f.rateAcquire(f.rateReq(h1, tenantAll, 5000), 0)
	if u, _ := f.rateUse(tenantAll); u != 0 {
		t.Errorf("a tenant with no budget: window counts %d tokens, want nothing charged", u)
	}
	f.releaseUsage(free, used(100, 100), true)
	f.checkTotals("after rate grants")
}

// testRateTrueUp: release trues the charge up to the usage, both ways; a
// release whose usage is unknown (no prompt tokens) keeps it.
func (s *suite) testRateTrueUp(t *testing.T) {
	f := s.setup(t, ratesSpec(0), noWindow)
	a := f.rateAcquire(f.rateReq(h1, tenantTok, 800), 800)
	f.rateReject(f.rateReq(h2, tenantTok, 300), ledger.ReasonTenantTokenRate, a.Created, a.Created)
	f.releaseUsage(a, used(120, 80), true) // 200 used: 600 back
	f.wantRateUse("after a release that used 200 of 800", tenantTok, 200, 1)
	b := f.rateAcquire(f.rateReq(h2, tenantTok, 300), 300)
	c := f.rateAcquire(f.rateReq(h1, tenantTok, 100), 100)
	f.releaseUsage(c, used(300, 200), true) // 500 used: 400 more
	f.wantRateUse("after a release that used 500 of 100", tenantTok, rateTPM, 3)
	f.rateReject(f.rateReq(h1, tenantTok, 1), ledger.ReasonTenantTokenRate, a.Created, c.Created)
	f.releaseUsage(b, ledger.Usage{CompletionTokens: 50}, true) // the engine's usage unknown
	f.wantRateUse("after a release with unknown usage", tenantTok, rateTPM, 3)
	f.checkTotals("after true-ups")
}

// testRateIdempotentRelease: a retried release trues up nothing more; a
// lease the ledger ended keeps its charge.
func (s *suite) testRateIdempotentRelease(t *testing.T) {
	f := s.setup(t, ratesSpec(0), noWindow)
	a := f.rateAcquire(f.rateReq(h1, tenantTok, 600), 600)
	f.releaseUsage(a, used(50, 50), true)
	f.releaseUsage(a, used(1, 0), false)
	f.releaseUsage(a, used(400, 400), false)
	f.wantRateUse("after one release and two retries", tenantTok, 100, 1)

	r := f.rateReq(h2, tenantTok, 300)
	r.TTL = f.ttl(50 * time.Millisecond)
	e := f.rateAcquire(r, 300)
	f.waitPast(e.Deadline)
	f.releaseUsage(e, used(1, 1), false) // ended by the ledger: no true-up
	f.sweepAll()
	f.wantRateUse("after a lease the ledger ended", tenantTok, 400, 2)
	f.rateAcquire(f.rateReq(h1, tenantTok, 600), 600) // the budget, exactly
	f.rateReject(f.rateReq(h1, tenantTok, 1), ledger.ReasonTenantTokenRate, a.Created, e.Created)
	f.checkTotals("after retried releases")
}

// testRateWindowExpiry: charges stop counting a window after their
// bucket, and the hint says when: a request refused fits once it has
// passed.
func (s *suite) testRateWindowExpiry(t *testing.T) {
	f := s.setup(t, ratesSpec(1200*time.Millisecond), noWindow) // 20 ms buckets
	a := f.rateAcquire(f.rateReq(h1, tenantTok, 700), 700)
	b := f.rateAcquire(f.rateReq(h2, tenantTok, 300), 300)
	r := f.rateReq(h1, tenantTok, 500)
	f.rateReject(r, ledger.ReasonTenantTokenRate, a.Created, b.Created)
	f.waitPast(f.bucketFrees(a.Created))
	last := b.Created
	if f.bucketFrees(b.Created).After(f.ledgerNow()) {
		// a's bucket has left the window, b's may not have: 300 + 500 fit.
		last = f.rateAcquire(r, 500).Created
		st := f.stats()
		ts, _ := tenantStats(st, tenantTok)
		wantT, wantR := int64(800), int64(2)
		if !f.bucketFrees(b.Created).After(st.Now) {
			wantT, wantR = 500, 1 // b's left too before Stats read
		}
		if gt, gr := ledger.RateUse(ts.Rates, st.Now, f.spec.RateWindow); gt != wantT || gr != wantR {
			t.Errorf("after a's bucket left: window counts %d tokens, %d requests; want %d, %d", gt, gr, wantT, wantR)
		}
	}
	f.waitPast(f.bucketFrees(last))
	f.wantRateUse("a window after the last grant", tenantTok, 0, 0)
	f.rateAcquire(f.rateReq(h2, tenantTok, rateTPM), rateTPM)
	f.checkTotals("after the window passed")
}

// testRateSurvivesConfigure: re-applying the spec keeps the window; a
// lower budget applies to what was charged before it; a tenant given a
// budget later starts charging then.
func (s *suite) testRateSurvivesConfigure(t *testing.T) {
	f := s.setup(t, ratesSpec(0), noWindow)
	a := f.rateAcquire(f.rateReq(h1, tenantTok, 600), 600)
	f.rateAcquire(f.rateReq(h1, tenantAll, 600), 0)
	f.configure(f.spec)
	f.wantRateUse("after re-applying the spec", tenantTok, 600, 1)
	lower := ratesSpec(0)
	lower.Tenants[1].TokensPerMinute = 700
	lower.Tenants[0].TokensPerMinute = 500 // tenantAll gets a budget
	f.configure(lower)
	f.rateReject(f.rateReq(h2, tenantTok, 200), ledger.ReasonTenantTokenRate, a.Created, a.Created)
	f.rateAcquire(f.rateReq(h2, tenantTok, 100), 100)
	f.rateAcquire(f.rateReq(h2, tenantAll, 500), 500) // its grant before the budget was not charged
	f.wantRateUse("after the budgets changed", tenantAll, 500, 1)
	f.checkTotals("after re-configuring budgets")
}

// testRateConcurrent: concurrent acquires from several holders never
// charge more than the budget (not even by one request): the check and
// the charge are one atomic step.
func (s *suite) testRateConcurrent(t *testing.T) {
	const budget = 5000
	spec := ratesSpec(0)
	spec.Tenants[1].TokensPerMinute = budget
	f := s.setup(t, spec, noWindow)
	holders := []ledger.HolderID{h1, h2, "h3", "h4"}
	f.keepAlive("h3", longTTL)
	f.keepAlive("h4", longTTL)
	var granted, refused atomic.Int64
	var mu sync.Mutex // guards errs
	var errs []error
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				r := ledger.AcquireRequest{Pool: pool, Candidates: []ledger.EngineID{e1, e2}, Tenant: tenantTok, Priority: prioStd,
					KVTokens: 10, Slots: 1, Holder: holders[w%len(holders)], TTL: longTTL,
					RequestID: ledger.RequestID(fmt.Sprintf("w%d-%d", w, i)), Tokens: int64(50 + (w*37+i*11)%200)}
				g, _, err := retry(&s.backendFailures, func() (ledger.Grant, error) { return f.l.Acquire(f.ctx, r) })
				if rej := ledger.AsRejection(err); rej != nil && rej.Reason == ledger.ReasonTenantTokenRate {
					refused.Add(1)
					return
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("worker %d Acquire %s: %w", w, r.RequestID, err))
					mu.Unlock()
					return
				}
				granted.Add(g.Lease.Tokens)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if g := granted.Load(); g > budget || g < budget-250 {
		t.Errorf("8 workers on 4 holders were granted %d tokens, want at most the budget %d (and within one request, 250, of it)", g, budget)
	}
	f.wantRateUse("after the concurrent acquires", tenantTok, granted.Load(), int64(len(f.list(ledger.Filter{Pool: pool, Tenant: tenantTok}))))
	if refused.Load() != 8 {
		t.Errorf("%d workers refused tenant_token_rate, want all 8", refused.Load())
	}
	f.checkTotals("after the concurrent acquires")
}
