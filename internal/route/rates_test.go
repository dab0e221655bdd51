package route

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"
	"github.com/leasehold/leasehold/internal/ledger"
	lhredis "github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// Rate budgets through real routers: 3 router processes on one Redis
// ledger, tenant "metered" with tokens_per_minute 3000, "counted" with
// requests_per_minute 2, "free" with neither. Every request of metered
// has an exact prompt (100 token ids) and max_tokens 400: each is charged
// 500 at grant and trued up to the engine's usage at release.
const (
	rateBudget = 3000
	ratePrompt = 100
	rateMaxOut = 400
)

func TestRateBudgetAcrossRouters(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	var engines []*proc
	for i := range 2 {
		engines = append(engines, startEngine(t, fmt.Sprintf("gpu-%d", i), engineOpts{kv: 20000, slots: 16, speed: 8, output: 96}))
	}
	fleetPath := fleetYAML(t, engines, 20000, 16, fmt.Sprintf(`tenants:
  - {name: metered, api_keys: ["sk-metered"], kv_share: 1, tokens_per_minute: %d}
  - {name: counted, api_keys: ["sk-counted"], kv_share: 1, requests_per_minute: 2}
  - {name: free, api_keys: ["sk-free"], kv_share: 1}
lease:
  session_ttl: 3s
  recovery_window: 0s
`, rateBudget))
	rs := redisserver.Start(t)
	var routers []*proc
	for i := range 3 {
		addr := freeport.AddrT(t)
		routers = append(routers, startProc(t, fmt.Sprintf("router-%d", i), "router", addr,
			"--ledger", rs.URL(), "--config", fleetPath, "--listen", addr, "--id", fmt.Sprintf("r%d", i),
			"--max-model-len", "2048", "--log-level", "warn"))
	}
	for _, r := range routers {
		waitHTTP(t, r.url()+"/readyz", 15*time.Second)
	}
	l, err := lhredis.Open(rs.URL(), lhredis.Options{})
	if err != nil {
		t.Fatalf("open the routers' ledger: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	client := &http.Client{Timeout: 30 * time.Second}
	ids := make([]int, ratePrompt)
	for i := range ids {
		ids[i] = 1 + i
	}
	body := func(stream bool) map[string]any {
		b := map[string]any{"model": "m", "prompt": ids, "max_tokens": rateMaxOut, "stream": stream}
		if stream {
			b["stream_options"] = map[string]any{"include_usage": true}
		}
		return b
	}

	// 12 clients, 4 per router, send until each is refused for the rate.
	began := time.Now()
	var mu sync.Mutex // guards used, answered
	var used, answered int64
	var wg sync.WaitGroup
	for c := range 12 {
		wg.Go(func() {
			base := routers[c%len(routers)].url()
			for i := 0; ; i++ {
				status, hdr, data, err := post(context.Background(), client, base+"/v1/completions", "sk-metered", body(i%2 == 0))
				if err != nil {
					t.Errorf("client %d: %v", c, err)
					return
				}
				if status == http.StatusTooManyRequests {
					if code, _ := errCode(data); code != string(ledger.ReasonTenantTokenRate) || hdr.Get("Retry-After") == "" {
						t.Errorf("client %d: 429 %q with Retry-After %q, want tenant_token_rate with one", c, code, hdr.Get("Retry-After"))
					}
					return
				}
				u, ok := usageIn(data)
				if status != http.StatusOK || !ok || u.PromptTokens != ratePrompt || u.CompletionTokens > rateMaxOut {
					t.Errorf("client %d: %d with usage %+v (%v): %s", c, status, u, ok, tail(string(data), 300))
					return
				}
				mu.Lock()
				used += u.PromptTokens + u.CompletionTokens
				answered++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if took := time.Since(began); took >= time.Minute {
		t.Fatalf("the load took %s: past the one-minute window, the answered tokens are not one window's", took)
	}
	// Every grant was charged 500 and trued up to what the engine used,
	// which never exceeds the charge: across the 3 routers, the tokens
	// used in the minute never exceed the budget.
	if used > rateBudget || answered < rateBudget/(ratePrompt+rateMaxOut) {
		t.Errorf("12 clients on 3 routers: %d answered using %d tokens; want at most the budget %d (and at least %d answered)",
			answered, used, rateBudget, rateBudget/(ratePrompt+rateMaxOut))
	}
	t.Logf("12 clients on 3 routers: %d answered using %d tokens of the %d budget", answered, used, rateBudget)
	st := poolStats(t, l)
	window := tenantWindow(t, st, "metered")
	if tok, req := ledger.RateUse(window, st.Now, 0); tok != used || req != answered {
		t.Errorf("ledger window of metered after the true-ups: %d tokens, %d requests; want the engines' usage %d of %d answered", tok, req, used, answered)
	}

	// A request that does not fit is refused with when the window frees
	// enough: the first bucket whose leaving makes room for its 500, a
	// window and a bucket after that bucket's start (ledger/rate.go).
	before := time.Now()
	status, hdr, data, err := post(context.Background(), client, routers[1].url()+"/v1/completions", "sk-metered", body(false))
	after := time.Now()
	frees := freesAt(window, ledger.RateWindowOf(0), used, ratePrompt+rateMaxOut)
	code, _ := errCode(data)
	ra, raErr := strconv.Atoi(hdr.Get("Retry-After"))
	lo, hi := int(math.Ceil(frees.Sub(after).Seconds())), int(math.Ceil(frees.Sub(before).Seconds()))
	switch {
	case used+ratePrompt+rateMaxOut <= rateBudget:
		t.Logf("the window has room for one more (%d used): no refusal to judge", used)
	case err != nil || status != http.StatusTooManyRequests || code != string(ledger.ReasonTenantTokenRate):
		t.Errorf("one more request = %d %q, %v; want 429 tenant_token_rate", status, code, err)
	case raErr != nil || ra < lo || ra > hi:
		t.Errorf("Retry-After %q, want the seconds until the window frees enough at %s: %d..%d", hdr.Get("Retry-After"), frees.Format(time.StampMilli), lo, hi)
	}

	// A request budget: the third request in the minute is refused; a
	// tenant with no budget is never charged.
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		status, _, data, err := post(context.Background(), client, routers[i].url()+"/v1/completions", "sk-counted", body(false))
		if code, _ := errCode(data); err != nil || status != want || (want == http.StatusTooManyRequests && code != string(ledger.ReasonTenantRequestRate)) {
			t.Errorf("counted request %d via router-%d = %d %q, %v; want %d", i+1, i, status, code, err, want)
		}
	}
	if status, _, data, err := post(context.Background(), client, routers[2].url()+"/v1/completions", "sk-free", body(false)); err != nil || status != http.StatusOK {
		t.Errorf("free request = %d, %v: %s; want 200", status, err, tail(string(data), 200))
	}
	st = poolStats(t, l)
	if w := tenantWindow(t, st, "free"); len(w) != 0 {
		t.Errorf("free's window = %+v, want nothing charged (no budget)", w)
	}
}

// usage is an answer's usage.
type usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// usageIn reads the usage of a JSON answer or of a stream's usage chunk.
func usageIn(data []byte) (usage, bool) {
	var u struct {
		Usage *usage `json:"usage"`
	}
	if json.Unmarshal(data, &u) == nil && u.Usage != nil {
		return *u.Usage, true
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok && json.Unmarshal(d, &u) == nil && u.Usage != nil {
			return *u.Usage, true
		}
	}
	return usage{}, false
}

func poolStats(t *testing.T, l ledger.Ledger) ledger.PoolStats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := l.Stats(ctx, "m")
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st
}

func tenantWindow(t *testing.T, st ledger.PoolStats, name ledger.TenantID) []ledger.RateBucket {
	t.Helper()
	for _, ts := range st.Tenants {
		if ts.Spec.Name == name {
			return ts.Rates
		}
	}
	t.Fatalf("Stats has no tenant %s", name)
	return nil
}

// freesAt is when enough of window (used tokens in all) has left for need
// more to fit the budget: the end of the first such bucket plus the
// window.
func freesAt(window []ledger.RateBucket, w time.Duration, used, need int64) time.Time {
	for _, b := range window {
		used -= b.Tokens
		if used+need <= rateBudget {
			return b.At.Add(w + w/ledger.RateBuckets)
		}
	}
	return time.Time{}
}
