package chaos

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/testutil/etcdserver"
)

// TestTokenRateCheck judges crafted request logs: a tenant within its
// budget plus one request's estimate in every minute passes, one past it
// or never refused fails, and so does a rate refusal without Retry-After.
func TestTokenRateCheck(t *testing.T) {
	sc := testScenario(t)
	sc.Topology.Tenants = []TenantSpec{{Name: "acme", KVShare: 1, TokensPerMinute: 1000, RequestsPerMinute: 4}}
	ok := func(at float64, prompt, completion, maxTok int) RequestEvent {
		return RequestEvent{T: at, End: at + 2, HeadersMS: 500, Tenant: "acme", Status: 200,
			UsagePrompt: prompt, Completion: completion, Prompt: prompt, MaxTokens: maxTok}
	}
	refused := RequestEvent{T: 1, Tenant: "acme", Status: 429, Code: "tenant_token_rate", RetryAfter: "59"}
	for _, tc := range []struct {
		name string
		reqs []RequestEvent
		pass bool
		want string
	}{
		{"within the budget, the window slides", []RequestEvent{ok(0, 300, 200, 300), ok(10, 300, 200, 300), refused, ok(61, 300, 200, 300), ok(70, 200, 100, 300)},
			true, "acme: peak 1000 tokens/min (at most 1300) of 1000 (+600), 4 answered, 1 refused"},
		{"over by less than one request's estimate", []RequestEvent{ok(0, 300, 200, 300), ok(10, 300, 200, 300), ok(59, 300, 200, 300), refused},
			true, "peak 1500 tokens/min (at most 1500) of 1000 (+600)"},
		// Granted between its start and its first byte: a request that
		// may have been granted in the next minute is not counted in
		// this one, but bounds it from above.
		{"a slow grant", []RequestEvent{ok(0, 300, 200, 300), ok(30, 300, 200, 300), {T: 59, End: 75, HeadersMS: 6000, Tenant: "acme", Status: 200,
			UsagePrompt: 300, Completion: 300, MaxTokens: 300}, ok(90, 300, 200, 300), refused},
			true, "peak 1100 tokens/min (at most 1600) of 1000 (+600)"},
		{"over by more", []RequestEvent{ok(0, 300, 300, 300), ok(10, 300, 300, 300), ok(59, 300, 300, 300), refused},
			false, "acme: 1800 tokens admitted in a minute, budget 1000 + one request's estimate 600"},
		{"over the request budget", []RequestEvent{ok(0, 1, 1, 1), ok(1, 1, 1, 1), ok(2, 1, 1, 1), ok(3, 1, 1, 1), ok(4, 1, 1, 1), ok(5, 1, 1, 1), refused},
			false, "acme: 6 requests admitted in a minute, budget 4 + 1"},
		{"never refused", []RequestEvent{ok(0, 300, 200, 300)}, false, "never refused for its rate"},
		{"refused without Retry-After", []RequestEvent{ok(0, 300, 200, 300), {T: 2, Tenant: "acme", Status: 429, Code: "tenant_request_rate"}},
			false, "1 rate refusals without Retry-After"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := (&evidence{sc: sc, requests: tc.reqs}).check(CheckTokenRate)
			if v.Pass != tc.pass || !strings.Contains(v.Figure+" "+v.Detail, tc.want) {
				t.Errorf("token_rate = pass %v, %q (%s); want pass %v with %q", v.Pass, v.Figure, v.Detail, tc.pass, tc.want)
			}
		})
	}
	if v := (&evidence{sc: testScenario(t)}).check(CheckTokenRate); v.Pass {
		t.Errorf("token_rate with no rated tenant passed: %+v", v)
	}
}

// TestTokenRateFull runs the token-rate scenario in full (4 routers, a
// tenant with a 20,000 tokens/minute budget, 2 minutes of load far above
// it) on the reserver (memory://, routers over gRPC), on Redis and on an
// embedded etcd, and logs each run's token_rate figure: the most tokens
// admitted in any minute. `make test-scenarios` runs it (it sets
// EtcdScenariosEnv); about 7 minutes.
func TestTokenRateFull(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: 2 minutes of load on each of three ledgers")
	}
	if os.Getenv(EtcdScenariosEnv) == "" {
		t.Skip("the full token-rate scenario: run `make test-scenarios` (sets " + EtcdScenariosEnv + "=1)")
	}
	bins := binaries(t)
	es := etcdserver.Start(t, t.TempDir())
	for _, opts := range []Options{{Ledger: LedgerMemory}, {Ledger: LedgerRedis}, {Ledger: LedgerEtcd, Etcd: es.HostPort()}} {
		t.Run(opts.Ledger, func(t *testing.T) {
			sc, err := Load("token-rate")
			if err != nil {
				t.Fatal(err)
			}
			opts.Binaries, opts.RunsDir, opts.NoChart = bins, t.TempDir(), true
			res, err := Run(context.Background(), sc, opts)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			for _, v := range res.Checks {
				t.Logf("%s %s: %s %s", res.Ledger, v.Check, v.Figure, v.Detail)
			}
			if !res.Pass {
				t.Errorf("token-rate on %s failed its checks (run dir %s, logs kept under it)", res.Ledger, res.RunDir)
				keep(t, res.RunDir)
			}
		})
	}
}
