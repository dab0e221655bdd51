package reserver_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/reserver"
)

// breakerFleetYAML is fleetYAML with gpu-0 and gpu-1's breakers opening
// after two failures and staying open for the test.
const breakerFleetYAML = `
pools:
  - name: llama
    breaker: {failures: 2, cooldown: 1h}
    engines:
      - {id: gpu-0, url: "http://127.0.0.1:1", kv_tokens: 10000, slots: 8, stale_after: 0s}
      - {id: gpu-1, url: "http://127.0.0.1:2", kv_tokens: 20000, slots: 8, stale_after: 0s}
tenants:
  - {name: acme, api_keys: [sk-acme], kv_share: 1}
` + fleetPolicy

// TestBreakerShown: the fleet file's breaker reaches the ledger, two
// routers' failed dispatches (reported with their releases over gRPC)
// open gpu-0's breaker for both, and the metrics, the audit's JSON and
// table and the audit page show it.
func TestBreakerShown(t *testing.T) {
	r := start(t, writeFile(t, t.TempDir(), "fleet.yaml", breakerFleetYAML), func(c *reserver.Config) {
		c.Token = sharedToken
	})
	c := dial(t, r, sharedToken)
	ctx := context.Background()
	keepAlive(t, c, "router-a", 10*time.Second)
	keepAlive(t, c, "router-b", 10*time.Second)
	for i, h := range []ledger.HolderID{"router-a", "router-b"} {
		l := acquire(t, c, h, "fail-"+string(h), "gpu-0", 10)
		if rel, err := c.Release(ctx, l.Ref(), ledger.Usage{Outcome: ledger.OutcomeConnect}); err != nil || !rel.Released {
			t.Fatalf("release %d with a connect error = %+v, %v", i, rel, err)
		}
	}
	_, err := c.Acquire(ctx, ledger.AcquireRequest{
		Pool: "llama", Candidates: []ledger.EngineID{"gpu-0"}, Tenant: "acme", Priority: "standard",
		KVTokens: 10, Slots: 1, Holder: "router-a", RequestID: "after", TTL: time.Minute,
	})
	if rej := ledger.AsRejection(err); rej == nil || rej.Reason != ledger.ReasonBreakerOpen || rej.Engine != "gpu-0" {
		t.Fatalf("Acquire on gpu-0 after two failures = %v, want breaker_open on gpu-0", err)
	}
	if _, err := c.Release(ctx, ledger.LeaseRef{Pool: "llama", ID: "1-1", Holder: "router-a"}, ledger.Usage{Outcome: "exploded"}); !errors.Is(err, ledger.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), `outcome "exploded"`) {
		t.Errorf("Release with outcome exploded = %v, want ErrInvalidArgument naming the outcome", err)
	}

	code, body := get(t, r, "/metrics", "")
	if code != 200 {
		t.Fatalf("GET /metrics = %d", code)
	}
	for _, want := range []string{
		`leasehold_ledger_breaker_state{engine="gpu-0",pool="llama"} 2`,
		`leasehold_ledger_breaker_state{engine="gpu-1",pool="llama"} 0`,
		`leasehold_ledger_breaker_transitions_total{pool="llama",transition="opened"} 1`,
		`leasehold_ledger_breaker_transitions_total{pool="llama",transition="closed"} 0`,
		`leasehold_ledger_rejections_total{pool="llama",reason="breaker_open"} 1`,
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	code, body = get(t, r, "/v1/audit", "Bearer "+sharedToken)
	rep := decode(t, body)
	if code != 200 || len(rep.Engines) != 2 {
		t.Fatalf("GET /v1/audit = %d, %d engines", code, len(rep.Engines))
	}
	if b := rep.Engines[0].Breaker; b.State != "open" || b.OpenedAt == nil || rep.Engines[1].Breaker.State != "closed" {
		t.Errorf("audit breakers = %+v, %+v; want gpu-0 open with its opening time, gpu-1 closed", b, rep.Engines[1].Breaker)
	}
	var out, errb bytes.Buffer
	if code := reserver.RunAudit(ctx, []string{"--server", r.HTTPAddr()}, env(map[string]string{"LEASEHOLD_TOKEN": sharedToken}), &out, &errb); code != 0 {
		t.Fatalf("audit exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "BREAKER") || !strings.Contains(out.String(), "open(opened ") {
		t.Errorf("audit table lacks gpu-0's open breaker:\n%s", out.String())
	}
	code, body = get(t, r, "/", "Bearer "+sharedToken)
	if s := string(body); code != 200 || !strings.Contains(s, "<th>breaker</th>") || !strings.Contains(s, `<td class="bad">open <span class="muted">opened `) {
		t.Errorf("page: %d, lacks gpu-0's open breaker:\n%s", code, s)
	}
}
