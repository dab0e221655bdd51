package chaos

// token_rate: tenants' fleet-wide rate budgets (tenants[].tokens_per_minute,
// requests_per_minute; ledger/rate.go), judged from what the engines
// reported for every answered request.

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// rateWindow is the span budgets are per: the ledger's default window.
const rateWindow = time.Minute

// RateFigure is one rated tenant's measure in a run: the most tokens (and
// requests) admitted in any minute, by the engines' usage of each answered
// request counted at the request's start, against the budget.
type RateFigure struct {
	Tenant string
	// Budget and RequestBudget are tokens_per_minute and
	// requests_per_minute (0: none).
	Budget, RequestBudget int64
	// PeakTokens and PeakRequests are the most admitted in any minute;
	// Estimate is the largest one request could use (the engine's prompt
	// count plus its max_tokens): the slack the budget allows, as a
	// request still running is charged its estimate and trued up when it
	// ends.
	PeakTokens, PeakRequests, Estimate int64
	// Answered, Refused and Demand: the tenant's answered requests, its
	// 429s for a rate budget, and the tokens every request it sent asked
	// for at most (prompt + max_tokens), per minute of load.
	Answered, Refused int
	Demand            float64
}

// rateFigures measures every tenant of the scenario that has a budget.
func (ev *evidence) rateFigures() []RateFigure {
	var out []RateFigure
	for _, tn := range ev.sc.Topology.Tenants {
		if tn.TokensPerMinute <= 0 && tn.RequestsPerMinute <= 0 {
			continue
		}
		f := RateFigure{Tenant: tn.Name, Budget: tn.TokensPerMinute, RequestBudget: tn.RequestsPerMinute}
		type admitted struct {
			t      float64
			tokens int64
		}
		var as []admitted
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
				used := int64(r.UsagePrompt + r.Completion)
				as = append(as, admitted{r.T, used})
				f.Estimate = max(f.Estimate, int64(r.UsagePrompt+r.MaxTokens))
			}
		}
		if span := last - first; span > 0 {
			f.Demand = asked / span * rateWindow.Seconds()
		}
		sort.Slice(as, func(i, j int) bool { return as[i].t < as[j].t })
		// Every window [as[i].t, as[i].t + 1 min): the busiest starts at
		// an admission.
		var sum int64
		j := 0
		for i := range as {
			for j < len(as) && as[j].t < as[i].t+rateWindow.Seconds() {
				sum += as[j].tokens
				j++
			}
			f.PeakTokens = max(f.PeakTokens, sum)
			f.PeakRequests = max(f.PeakRequests, int64(j-i))
			sum -= as[i].tokens
		}
		out = append(out, f)
	}
	return out
}

// checkTokenRate: every rated tenant, loaded above its budget (refused
// tenant_token_rate or tenant_request_rate with a Retry-After), had at
// most its budget plus one request's estimate admitted in any minute
// (requests: at most requests_per_minute plus one), over all routers.
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
			parts = append(parts, fmt.Sprintf("%s: peak %d tokens/min of %d (+%d), %d answered, %d refused, demand %.0f/min",
				f.Tenant, f.PeakTokens, f.Budget, f.Estimate, f.Answered, f.Refused, f.Demand))
		}
		if f.RequestBudget > 0 {
			if f.PeakRequests > f.RequestBudget+1 {
				v.Pass = false
				v.Detail += fmt.Sprintf("%s: %d requests admitted in a minute, budget %d + 1; ", f.Tenant, f.PeakRequests, f.RequestBudget)
			}
			parts = append(parts, fmt.Sprintf("%s: peak %d requests/min of %d", f.Tenant, f.PeakRequests, f.RequestBudget))
		}
	}
	v.Figure = strings.Join(parts, "; ")
	return v
}
