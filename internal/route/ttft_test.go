package route

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/enginesim"
	"github.com/leasehold/leasehold/internal/fleet"
)

// sloEnv is a router on a real Redis ledger in front of in-process
// simulated engines of the given config, with a fleet whose interactive
// class has a ttft_slo and whose batch class has none.
type sloEnv struct {
	t       *testing.T
	url     string
	engines []*enginesim.Engine
	h       *harness // for stats and streams
}

func newSLOEnv(t *testing.T, n int, ec enginesim.Config, slo string, cfg func(*Config)) *sloEnv {
	t.Helper()
	var b strings.Builder
	b.WriteString("pools:\n  - name: m\n    retry_after: 200ms\n    engines:\n")
	e := &sloEnv{t: t}
	for i := range n {
		eng, url := serveSim(t, ec, nil)
		e.engines = append(e.engines, eng)
		fmt.Fprintf(&b, "      - {id: gpu-%d, url: %q, kv_tokens: %d, slots: %d, stale_after: 0s}\n", i, url, ec.KVTokens, ec.Slots)
	}
	fmt.Fprintf(&b, `tenants:
  - {name: acme, api_keys: ["sk-acme"], kv_share: 1}
priorities:
  - {name: interactive, max_fill: 1.0, ttft_slo: %s}
  - {name: batch, max_fill: 1.0}
lease:
  session_ttl: 1s
  recovery_window: 0s
`, slo)
	f, err := fleet.Parse([]byte(b.String()))
	if err != nil {
		t.Fatalf("fleet: %v\n%s", err, b.String())
	}
	h := &harness{t: t, fleet: f, engines: e.engines, client: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{}}}
	h.rs, h.l = redisLedger(t, f)
	c := Defaults()
	c.Listen, c.ID, c.FleetFile, c.Ledger = "127.0.0.1:0", "test", "fleet.yaml", h.rs.URL()
	c.MaxModelLen = int64(ec.MaxModelLen)
	if cfg != nil {
		cfg(&c)
	}
	t.Cleanup(h.client.CloseIdleConnections)
	h.r = startRouter(t, c, Options{Fleet: f, Ledger: h.l, LeaseConfig: callTimeouts(300 * time.Millisecond)})
	h.url = "http://" + h.r.Addr()
	waitHTTP(t, h.url+"/readyz", 10*time.Second)
	e.h, e.url = h, h.url
	return e
}

// complete sends one completion of prompt in class prio and returns the
// status, the engine that served it, the error code and Retry-After.
func (e *sloEnv) complete(prompt, prio string, stream bool) (status int, engine, code, retry string) {
	e.t.Helper()
	body := map[string]any{"model": "m", "prompt": prompt, "max_tokens": 4, "stream": stream}
	st, hdr, data, err := post(context.Background(), e.h.client, e.url+"/v1/completions", "sk-acme", body, "X-Priority", prio)
	if err != nil {
		e.t.Fatalf("post: %v", err)
	}
	code, _ = errCode(data)
	return st, hdr.Get("X-Leasehold-Engine"), code, hdr.Get("Retry-After")
}

// A crashed-looking engine (every request answered 500) frees its leases
// at once and looks the emptiest; once this router saw it fail, it ranks
// below the healthy engine however empty it looks, so at most the first
// request is lost. Before ranking knew health, every request after the
// crash went to the empty, failing engine.
func TestFailingEngineThatLooksEmptyIsNotRankedFirst(t *testing.T) {
	e := newSLOEnv(t, 2, enginesim.Config{Model: "m", KVTokens: 8192, Slots: 4, Speed: 1, OutputTokens: 2000, MaxModelLen: 4096}, "1s", nil)
	// A long stream makes one engine the fuller one.
	var held *stream
	for i := 0; held == nil; i++ {
		if i == 40 {
			t.Fatal("no stream landed on gpu-1 in 40 tries")
		}
		s := e.h.mustStream(t, "hold", "sk-acme", map[string]any{"model": "m", "prompt": fmt.Sprintf("hold %d", i), "max_tokens": 3000}, "X-Priority", "batch")
		if s.resp.Header.Get("X-Leasehold-Engine") == "gpu-1" {
			held = s
		} else {
			s.close()
		}
	}
	defer held.close()
	e.h.waitLeases(1, 5*time.Second)
	yes := true
	e.engines[0].Fail(enginesim.FailChange{Errors: &yes})
	failed, served := 0, map[string]int{}
	for i := range 20 {
		status, engine, code, _ := e.complete(fmt.Sprintf("request %d after the crash", i), "batch", false)
		switch {
		case status == http.StatusOK:
			served[engine]++
		case status >= 500: // the engine's own 500, passed through
			failed++
		default:
			t.Fatalf("request %d: %d %s", i, status, code)
		}
	}
	if failed > 1 || served["gpu-1"] != 20-failed {
		t.Errorf("after gpu-0 began failing: %d requests failed, served %v; want at most the first lost, the rest on gpu-1", failed, served)
	}
}

// waitLeases waits until pool m holds n leases.
func (h *harness) waitLeases(n int64, within time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for h.stats().Leases != n {
		if time.Now().After(deadline) {
			h.t.Fatalf("ledger holds %d leases, want %d", h.stats().Leases, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Once the estimate is warm, a request of a class whose ttft_slo no
// engine can meet is refused 503 ttft_slo with Retry-After before any
// lease: the ledger and the engine never see it. A short prompt of the
// same class, and a long one of a class without an SLO, are served. Each
// refusal is counted once by pool, priority and reason.
func TestTTFTSLORefusesBeforeLease(t *testing.T) {
	// 2,000 prompt tokens/s: 1,000 tokens take about 0.5 s to the first
	// token, 10 tokens one decode step (20 ms).
	e := newSLOEnv(t, 1, enginesim.Config{Model: "m", KVTokens: 65536, Slots: 8, Speed: 1, PrefillTokensPerSec: 2000, OutputTokens: 4, MaxModelLen: 8192}, "150ms", nil)
	words := func(n int) string { return strings.Repeat("hello world ", n) } // about 3 tokens each
	for i := range 12 {                                                      // batch has no SLO: these teach the estimate
		if status, _, code, _ := e.complete(words(10+40*(i%5)), "batch", true); status != http.StatusOK {
			t.Fatalf("warm-up %d: %d %s", i, status, code)
		}
	}
	if status, _, code, _ := e.complete(words(3), "interactive", true); status != http.StatusOK {
		t.Fatalf("a short interactive prompt: %d %s, want 200 (its estimate is within 150ms)", status, code)
	}
	accepted := e.engines[0].Stats().RequestsAccepted
	status, _, code, retry := e.complete(words(330), "interactive", true)
	if status != http.StatusServiceUnavailable || code != "ttft_slo" || retry == "" {
		t.Fatalf("a 1,000-token interactive prompt: %d %q Retry-After %q, want 503 ttft_slo with Retry-After", status, code, retry)
	}
	if got := e.engines[0].Stats().RequestsAccepted; got != accepted {
		t.Errorf("the engine accepted %d requests during the refusal, want none", got-accepted)
	}
	if st := e.h.stats(); st.Leases != 0 {
		t.Errorf("ledger holds %d leases after the refusal", st.Leases)
	}
	if status, _, code, _ := e.complete(words(330), "batch", true); status != http.StatusOK {
		t.Errorf("the same prompt in batch (no SLO): %d %s, want 200", status, code)
	}
	for name, want := range map[string]float64{
		`leasehold_router_refused_requests_total{pool="m",priority="interactive",reason="ttft_slo"}`: 1,
		`leasehold_router_admission_requests_total{pool="m",priority="interactive"}`:                 2,
		`leasehold_router_admission_requests_total{pool="m",priority="batch"}`:                       13,
	} {
		if got := metricSum(e.url, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := metricSum(e.url, `leasehold_router_ttft_estimate_seconds{engine="gpu-0",pool="m"}`); got <= 0 {
		t.Errorf("leasehold_router_ttft_estimate_seconds for gpu-0 = %v, want > 0", got)
	}
}

// A capacity rejection of a class with a ttft_slo waits in the queue only
// while the SLO can still be met, then is refused ttft_slo, long before
// --queue-timeout; it is counted as one refusal however often it retried.
func TestTTFTSLOEndsTheQueueWait(t *testing.T) {
	e := newSLOEnv(t, 1, enginesim.Config{Model: "m", KVTokens: 8192, Slots: 1, Speed: 1, OutputTokens: 2000, MaxModelLen: 4096}, "300ms",
		func(c *Config) { c.QueueTimeout = 30 * time.Second })
	held := e.h.mustStream(t, "hold", "sk-acme", map[string]any{"model": "m", "prompt": "hold", "max_tokens": 3000}, "X-Priority", "batch")
	defer held.close()
	status, _, code, retry := e.complete("hello", "interactive", true)
	if status != http.StatusServiceUnavailable || code != "ttft_slo" || retry == "" {
		t.Fatalf("interactive request on a full engine: %d %q Retry-After %q, want 503 ttft_slo (the SLO, not the 30s queue timeout, ended its wait)", status, code, retry)
	}
	if got := metricSum(e.url, `leasehold_router_refused_requests_total{pool="m",priority="interactive",reason="ttft_slo"}`); got != 1 {
		t.Errorf("refused_requests_total{interactive,ttft_slo} = %v, want 1", got)
	}
	if got := metricSum(e.url, `leasehold_router_queue_wait_seconds_count{outcome="rejected",pool="m"}`); got != 1 {
		t.Errorf("queue_wait_seconds_count{rejected} = %v, want 1 (it waited in the queue)", got)
	}
}
