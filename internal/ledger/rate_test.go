package ledger

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// rateNow is half a second into a bucket of the default window.
var rateNow = time.UnixMilli(1_800_000_000_500)

// bucketAgo is the bucket d before rateNow's, in the default window.
func bucketAgo(d time.Duration, tokens, requests int64) RateBucket {
	return RateBucket{At: time.UnixMilli(bucketStart(rateNow.Add(-d), time.Second)), Tokens: tokens, Requests: requests}
}

func TestAdmitRates(t *testing.T) {
	base := func() Admission {
		return Admission{
			Now: rateNow, CapacityKV: 2000, CapacitySlots: 20,
			Tenant: TenantSpec{Name: "t", KVShare: 1, TokensPerMinute: 1000}, MaxFill: 1,
			Candidates: []EngineState{{Spec: EngineSpec{ID: "a", KVTokens: 2000, Slots: 20}}},
			KVTokens:   100, Slots: 1, Tokens: 400, RetryAfter: 2 * time.Second, Epoch: 7,
		}
	}
	// A bucket d before now's stops counting 61 s after its start: at its
	// start + window + width.
	frees := func(d time.Duration) time.Duration {
		return time.UnixMilli(bucketStart(rateNow.Add(-d), time.Second)).Add(61 * time.Second).Sub(rateNow)
	}
	for _, tc := range []struct {
		name  string
		mod   func(*Admission)
		want  Reason
		retry time.Duration
	}{
		{"fits the budget exactly", func(a *Admission) { a.Rates = []RateBucket{bucketAgo(10*time.Second, 600, 1)} }, "", 0},
		{"one token over", func(a *Admission) { a.Rates = []RateBucket{bucketAgo(10*time.Second, 601, 1)} },
			ReasonTenantTokenRate, frees(10 * time.Second)},
		{"retry is when the first bucket making room leaves", func(a *Admission) {
			a.Tokens = 700
			a.Rates = []RateBucket{bucketAgo(30*time.Second, 300, 1), bucketAgo(20*time.Second, 300, 1), bucketAgo(5*time.Second, 300, 1)}
		}, ReasonTenantTokenRate, frees(20 * time.Second)},
		{"the current bucket counts", func(a *Admission) { a.Rates = []RateBucket{bucketAgo(0, 700, 1)} },
			ReasonTenantTokenRate, 60*time.Second + 500*time.Millisecond},
		{"a bucket a window before now's still counts", func(a *Admission) { a.Rates = []RateBucket{bucketAgo(60*time.Second, 700, 1)} },
			ReasonTenantTokenRate, 500 * time.Millisecond},
		{"an older bucket no longer counts", func(a *Admission) { a.Rates = []RateBucket{bucketAgo(61*time.Second, 1000, 1)} }, "", 0},
		{"larger than the budget can never fit", func(a *Admission) { a.Tokens = 1001 }, ReasonTooLarge, 0},
		{"request budget", func(a *Admission) {
			a.Tenant.TokensPerMinute, a.Tenant.RequestsPerMinute = 0, 2
			a.Rates = []RateBucket{bucketAgo(40*time.Second, 5000, 1), bucketAgo(3*time.Second, 5000, 1)}
		}, ReasonTenantRequestRate, frees(40 * time.Second)},
		{"request budget not reached", func(a *Admission) {
			a.Tenant.TokensPerMinute, a.Tenant.RequestsPerMinute = 0, 3
			a.Rates = []RateBucket{bucketAgo(40*time.Second, 5000, 1), bucketAgo(3*time.Second, 5000, 1)}
		}, "", 0},
		{"both budgets: tokens named, retry when both fit", func(a *Admission) {
			a.Tenant.RequestsPerMinute = 1
			a.Rates = []RateBucket{bucketAgo(40*time.Second, 700, 1), bucketAgo(3*time.Second, 0, 1)}
		}, ReasonTenantTokenRate, frees(3 * time.Second)},
		{"no budget ignores the window", func(a *Admission) {
			a.Tenant.TokensPerMinute = 0
			a.Rates = []RateBucket{bucketAgo(0, 1<<30, 1<<30)}
		}, "", 0},
		{"kv quota before rate", func(a *Admission) {
			a.Tenant.KVShare = 0.1
			a.TenantKV = 150
			a.Rates = []RateBucket{bucketAgo(0, 1000, 1)}
		}, ReasonTenantKV, 2 * time.Second},
		{"rate before engines", func(a *Admission) {
			a.Candidates[0].ReservedKV = 2000
			a.Rates = []RateBucket{bucketAgo(0, 1000, 1)}
		}, ReasonTenantTokenRate, 60*time.Second + 500*time.Millisecond},
		{"a short window", func(a *Admission) {
			a.RateWindow = 3 * time.Second // 50 ms buckets
			a.Rates = []RateBucket{{At: rateNow.Add(-time.Second), Tokens: 700, Requests: 1}}
		}, ReasonTenantTokenRate, 2050 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := base()
			tc.mod(&a)
			idx, rej := Admit(a)
			if tc.want == "" {
				if rej != nil || idx != 0 {
					t.Fatalf("Admit = %d, %v; want a grant on the first candidate", idx, rej)
				}
				return
			}
			if rej == nil || rej.Reason != tc.want || rej.Engine != "" || rej.RetryAfter != tc.retry {
				t.Fatalf("Admit rejection = %+v, want reason %s retry %s", rej, tc.want, tc.retry)
			}
		})
	}
}

func TestChargeAndTrueUpRate(t *testing.T) {
	old := bucketAgo(61*time.Second, 50, 1)
	mid := bucketAgo(30*time.Second, 300, 2)
	bs := []RateBucket{old, mid}
	got := ChargeRate(bs, rateNow, 0, 120)
	want := []RateBucket{mid, bucketAgo(0, 120, 1)}
	if !slices.Equal(got, want) {
		t.Fatalf("ChargeRate = %+v, want %+v (the old bucket pruned, now's added)", got, want)
	}
	if bs[0] != old || len(bs) != 2 {
		t.Errorf("ChargeRate modified its input: %+v", bs)
	}
	got = ChargeRate(got, rateNow.Add(200*time.Millisecond), 0, 30)
	if want := []RateBucket{mid, bucketAgo(0, 150, 2)}; !slices.Equal(got, want) {
		t.Fatalf("ChargeRate in the same bucket = %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		name    string
		created time.Time
		delta   int64
		want    int64 // mid's tokens after
	}{
		{"refund", rateNow.Add(-30 * time.Second), -100, 200},
		{"charge more", rateNow.Add(-30 * time.Second), 80, 380},
		{"never below zero", rateNow.Add(-30 * time.Second), -1000, 0},
		{"another bucket's lease", rateNow.Add(-29 * time.Second), -100, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := []RateBucket{mid}
			out := TrueUpRate(in, tc.created, rateNow, 0, tc.delta)
			if len(out) != 1 || out[0].Tokens != tc.want || out[0].Requests != 2 {
				t.Fatalf("TrueUpRate = %+v, want one bucket with %d tokens, 2 requests", out, tc.want)
			}
			if in[0] != mid {
				t.Errorf("TrueUpRate modified its input")
			}
		})
	}
	if out := TrueUpRate([]RateBucket{old}, rateNow.Add(-61*time.Second), rateNow, 0, -50); len(out) != 0 {
		t.Errorf("TrueUpRate of a bucket no longer counted = %+v, want it pruned", out)
	}
}

// A pool whose window widens puts now's charge in a bucket that may start
// before the last narrower one: the buckets stay oldest first, so pruning
// and the retry hint read them in order.
func TestChargeRateAfterTheWindowWidens(t *testing.T) {
	short := 1200 * time.Millisecond // 20 ms buckets
	bs := ChargeRate(nil, rateNow.Add(-40*time.Millisecond), short, 100)
	bs = ChargeRate(bs, rateNow, short, 200)
	got := ChargeRate(bs, rateNow.Add(100*time.Millisecond), 0, 300) // now's second-wide bucket starts 500 ms before rateNow
	want := []RateBucket{
		{At: time.UnixMilli(bucketStart(rateNow, time.Second)), Tokens: 300, Requests: 1},
		{At: rateNow.Add(-40 * time.Millisecond), Tokens: 100, Requests: 1},
		{At: rateNow, Tokens: 200, Requests: 1},
	}
	if !slices.EqualFunc(got, want, func(a, b RateBucket) bool {
		return a.At.Equal(b.At) && a.Tokens == b.Tokens && a.Requests == b.Requests
	}) {
		t.Fatalf("ChargeRate after the window widened = %+v, want %+v (oldest first)", got, want)
	}
	if tok, req := RateUse(got, rateNow.Add(100*time.Millisecond), 0); tok != 600 || req != 3 {
		t.Errorf("RateUse = %d tokens, %d requests; want 600, 3", tok, req)
	}
	if got := ChargeRate(got, rateNow.Add(200*time.Millisecond), 0, 5); got[0].Tokens != 305 || len(got) != 3 {
		t.Errorf("a second charge in the wide bucket = %+v, want it added to the first", got)
	}
}

func TestRateTrueUp(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tokens int64
		u      Usage
		want   int64
	}{
		{"used less", 1000, Usage{PromptTokens: 200, CompletionTokens: 300}, -500},
		{"used more", 1000, Usage{PromptTokens: 900, CompletionTokens: 300}, 200},
		{"used exactly", 1000, Usage{PromptTokens: 400, CompletionTokens: 600}, 0},
		{"usage unknown keeps the charge", 1000, Usage{CompletionTokens: 37}, 0},
		{"not charged", 0, Usage{PromptTokens: 200, CompletionTokens: 300}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RateTrueUp(Lease{Tokens: tc.tokens}, tc.u); got != tc.want {
				t.Errorf("RateTrueUp(charge %d, %+v) = %d, want %d", tc.tokens, tc.u, got, tc.want)
			}
		})
	}
}

// TestRateWindowBound drives the rule with random requests on a simulated
// millisecond clock and checks the guarantee: the tokens and requests
// charged by grants in any window-long span never exceed the budgets, and
// a rejection's RetryAfter is exact: one millisecond earlier the request
// still does not fit, at RetryAfter it does (nothing else changed).
func TestRateWindowBound(t *testing.T) {
	for _, w := range []time.Duration{0, 3 * time.Second} {
		win := RateWindowOf(w)
		rng := rand.New(rand.NewPCG(uint64(w), 17))
		ten := TenantSpec{Name: "t", KVShare: 1, TokensPerMinute: 5000, RequestsPerMinute: 40}
		a := Admission{CapacityKV: 1 << 30, CapacitySlots: 1 << 20, Tenant: ten, MaxFill: 1, KVTokens: 1, Slots: 1,
			Candidates: []EngineState{{Spec: EngineSpec{ID: "a", KVTokens: 1 << 30, Slots: 1 << 20}}}, RateWindow: w}
		type grant struct {
			at     time.Time
			tokens int64
		}
		var grants []grant
		now := rateNow
		for range 3000 {
			now = now.Add(time.Duration(rng.Int64N(win.Milliseconds()/20+1)) * time.Millisecond)
			a.Now, a.Tokens = now, 1+rng.Int64N(1500)
			if _, rej := Admit(a); rej != nil {
				if !rej.Reason.Rate() || rej.RetryAfter <= 0 || rej.RetryAfter > win+RateWidth(w) {
					t.Fatalf("window %s: rejection %+v, want a rate reason with 0 < RetryAfter <= %s", win, rej, win+RateWidth(w))
				}
				b := a
				b.Now = now.Add(rej.RetryAfter - time.Millisecond)
				if _, r := Admit(b); r == nil {
					t.Fatalf("window %s: admitted at RetryAfter-1ms (%s), want still refused", win, rej.RetryAfter)
				}
				b.Now = now.Add(rej.RetryAfter)
				if _, r := Admit(b); r != nil {
					t.Fatalf("window %s: refused %+v at RetryAfter %s, want admitted", win, r, rej.RetryAfter)
				}
				continue
			}
			a.Rates = ChargeRate(a.Rates, now, w, a.Tokens)
			grants = append(grants, grant{now, a.Tokens})
		}
		if len(grants) < 100 {
			t.Fatalf("window %s: %d grants, want the budget reached many times", win, len(grants))
		}
		for i, g := range grants {
			var tokens, reqs int64
			for _, h := range grants[:i+1] {
				if g.at.Sub(h.at) < win {
					tokens += h.tokens
					reqs++
				}
			}
			if tokens > ten.TokensPerMinute || reqs > ten.RequestsPerMinute {
				t.Fatalf("window %s: grants in the span ending %s charged %d tokens, %d requests; budgets %d, %d",
					win, g.at.Format(time.StampMilli), tokens, reqs, ten.TokensPerMinute, ten.RequestsPerMinute)
			}
		}
	}
}
