package chaos

// token_rate: tenants' fleet-wide rate budgets (tenants[].tokens_per_minute,
// requests_per_minute; ledger/rate.go), judged from what the engines
// reported for every answered request.

import (
	"fmt"
	"strings"
	"time"
)

// rateWindow is the span budgets are per: the ledger's default window.
const rateWindow = time.Minute

// RateFigure is one rated tenant's measure in a run: the tokens (and
// requests) admitted in a minute, by the engines' usage of each answered
// request, against the budget. A client does not see when its request was
// granted, only that it was between the request's start and its first
// response byte; so the figures bound the busiest minute of grants from
// below (PeakTokens: requests certainly granted within one minute) and
// from above (PeakUpper: every request that may have been).
type RateFigure struct {
	Tenant string
	// Budget and RequestBudget are tokens_per_minute and
	// requests_per_minute (0: none).
	Budget, RequestBudget int64
	// PeakTokens and PeakRequests are the most certainly granted in one
	// minute, PeakUpper and PeakRequestsUpper the most that may have been;
	// Estimate is the largest one request could use (the engine's prompt
	// count plus its max_tokens): the slack the budget allows, as a
	// request still running is charged its estimate and trued up when it
	// ends.
	PeakTokens, PeakRequests, PeakUpper, PeakRequestsUpper, Estimate int64
	// Answered, Refused and Demand: the tenant's answered requests, its
	// 429s for a rate budget, and the tokens every request it sent asked
	// for at most (prompt + max_tokens), per minute of load.
	Answered, Refused int
	Demand            float64
}

// granted is an answered request: granted in [from, to] (its start and
// its first response byte, seconds since load start), using tokens.
type granted struct {
	from, to float64
	tokens   int64
}

// rateFigures measures every tenant of the scenario that has a budget.
func (ev *evidence) rateFigures() []RateFigure {
	var out []RateFigure
	for _, tn := range ev.sc.Topology.Tenants {
		if tn.TokensPerMinute <= 0 && tn.RequestsPerMinute <= 0 {
			continue
		}
		f := RateFigure{Tenant: tn.Name, Budget: tn.TokensPerMinute, RequestBudget: tn.RequestsPerMinute}
		var gs []granted
		var asked float64
		first, last := -1.0, 0.0
		for _, r := range ev.requests {
			if r.Tenant != tn.Name {
				continue
			}
			if first < 0 || r.T < first {
				first = r.T
			}
			last = max(last, r.T)
			asked += float64(r.Prompt + r.MaxTokens)
			switch {
			case r.Status == 429 && (r.Code == "tenant_token_rate" || r.Code == "tenant_request_rate"):
				f.Refused++
			case r.Status == 200:
				f.Answered++
				to := r.End
				if r.HeadersMS > 0 {
					to = r.T + r.HeadersMS/1000
				}
				gs = append(gs, granted{r.T, max(to, r.T), int64(r.UsagePrompt + r.Completion)})
				f.Estimate = max(f.Estimate, int64(r.UsagePrompt+r.MaxTokens))
			}
		}
		if span := last - first; span > 0 {
			f.Demand = asked / span * rateWindow.Seconds()
		}
		f.PeakTokens, f.PeakRequests, f.PeakUpper, f.PeakRequestsUpper = busiestMinute(gs)
		out = append(out, f)
	}
	return out
}

// busiestMinute returns the most tokens and requests of gs certainly
// granted within one minute [s, s+1min) (their whole interval inside;
// the busiest such window starts at a request's start), and the most
// that may have been (their interval meets the window; the busiest ends
// at a request's start).
func busiestMinute(gs []granted) (tokens, requests, upperTokens, upperRequests int64) {
	w := rateWindow.Seconds()
	for _, a := range gs {
		var t, n, ut, un int64
		for _, g := range gs {
			if g.from >= a.from && g.to < a.from+w {
				t, n = t+g.tokens, n+1
			}
			if g.to > a.from-w && g.from <= a.from {
				ut, un = ut+g.tokens, un+1
			}
		}
		tokens, requests = max(tokens, t), max(requests, n)
		upperTokens, upperRequests = max(upperTokens, ut), max(upperRequests, un)
	}
	return tokens, requests, upperTokens, upperRequests
}

// checkTokenRate: every rated tenant, loaded above its budget (refused
// tenant_token_rate or tenant_request_rate with a Retry-After), had no
// minute with more than its budget plus one request's estimate certainly
// granted (requests: requests_per_minute plus one), over all routers. The
// figure gives the upper bound too: within the budget, it proves the
// budget held.
func (ev *evidence) checkTokenRate() Verdict {
	v := Verdict{Pass: true}
	figs := ev.rateFigures()
	if len(figs) == 0 {
		v.Pass, v.Figure, v.Detail = false, "n/a", "no tenant has tokens_per_minute or requests_per_minute"
		return v
	}
	noHint := 0
	for _, r := range ev.requests {
		if r.Status == 429 && (r.Code == "tenant_token_rate" || r.Code == "tenant_request_rate") && r.RetryAfter == "" {
			noHint++
		}
	}
	if noHint > 0 {
		v.Pass = false
		v.Detail += fmt.Sprintf("%d rate refusals without Retry-After; ", noHint)
	}
	var parts []string
	for _, f := range figs {
		if f.Refused == 0 {
			v.Pass = false
			v.Detail += fmt.Sprintf("%s: never refused for its rate: the load did not reach its budget; ", f.Tenant)
		}
		if f.Budget > 0 {
			if f.PeakTokens > f.Budget+f.Estimate {
				v.Pass = false
				v.Detail += fmt.Sprintf("%s: %d tokens admitted in a minute, budget %d + one request's estimate %d; ", f.Tenant, f.PeakTokens, f.Budget, f.Estimate)
			}
			parts = append(parts, fmt.Sprintf("%s: peak %d tokens/min (at most %d) of %d (+%d), %d answered, %d refused, demand %.0f/min",
				f.Tenant, f.PeakTokens, f.PeakUpper, f.Budget, f.Estimate, f.Answered, f.Refused, f.Demand))
		}
		if f.RequestBudget > 0 {
			if f.PeakRequests > f.RequestBudget+1 {
				v.Pass = false
				v.Detail += fmt.Sprintf("%s: %d requests admitted in a minute, budget %d + 1; ", f.Tenant, f.PeakRequests, f.RequestBudget)
			}
			parts = append(parts, fmt.Sprintf("%s: peak %d requests/min (at most %d) of %d", f.Tenant, f.PeakRequests, f.PeakRequestsUpper, f.RequestBudget))
		}
	}
	v.Figure = strings.Join(parts, "; ")
	return v
}
