package route

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/internal/enginesim"
	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
)

// The request path's waits are timers of the router's clock: a request
// queued behind the one slot (local baseline, so no ledger and no
// sessions share the fake clock) waits out a one-hour --queue-timeout as
// soon as the fake clock is advanced by an hour, and not before.
func TestQueueTimeoutFollowsRouterClock(t *testing.T) {
	_, url := serveSim(t, enginesim.Config{Model: "m", KVTokens: 4096, Slots: 1, Speed: 1, OutputTokens: 2000, MaxModelLen: 2048}, nil)
	f, err := fleet.Parse(fmt.Appendf(nil, "pools:\n  - name: m\n    retry_after: 200ms\n    engines:\n"+
		"      - {id: gpu-0, url: %q, kv_tokens: 4096, slots: 1, stale_after: 0s}\n%s", url, tenants))
	if err != nil {
		t.Fatal(err)
	}
	clock := clockwork.NewFakeClock()
	cfg := Defaults()
	cfg.Listen, cfg.ID, cfg.FleetFile, cfg.Admission = "127.0.0.1:0", "test", "fleet.yaml", AdmissionLocal
	cfg.MaxModelLen, cfg.QueueTimeout, cfg.AbortGrace = 2048, time.Hour, 0
	r := startRouter(t, cfg, Options{Fleet: f, Clock: clock})
	h := &harness{t: t, url: "http://" + r.Addr(), r: r, client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}, fleet: f}
	t.Cleanup(h.client.CloseIdleConnections)
	waitHTTP(t, h.url+"/readyz", 10*time.Second)

	s, status, body := h.openStream(t, "sk-acme", map[string]any{"model": "m", "prompt": "hold the slot", "max_tokens": 1000, "ignore_eos": true})
	if s == nil {
		t.Fatalf("first request: %d %s", status, body)
	}
	defer s.close()

	type answer struct {
		status int
		body   []byte
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		st, _, b, err := post(context.Background(), h.client, h.url+"/v1/completions", "sk-acme", `{"model":"m","prompt":"x","max_tokens":4}`)
		answered <- answer{st, b, err}
	}()
	// Waiters on the fake clock: the baseline's scrape ticker, then the
	// queued request's deadline and retry timers.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clock.BlockUntilContext(ctx, 3); err != nil {
		t.Fatalf("the second request did not queue on the router's clock: %v", err)
	}
	if n := r.pools["m"].q.Len(); n != 1 {
		t.Fatalf("queue length %d, want 1", n)
	}
	select {
	case a := <-answered:
		t.Fatalf("answered %d %s before the router's clock moved", a.status, a.body)
	case <-time.After(500 * time.Millisecond): // beyond the 200ms retry hint, jittered
	}

	start := time.Now()
	clock.Advance(time.Hour)
	select {
	case a := <-answered:
		if a.err != nil {
			t.Fatal(a.err)
		}
		if code, _ := errCode(a.body); a.status != http.StatusServiceUnavailable || code != string(ledger.ReasonEngineSlots) {
			t.Errorf("after the queue timeout: %d %s, want 503 %s", a.status, a.body, ledger.ReasonEngineSlots)
		}
		t.Logf("answered %s after the clock moved an hour", time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("no answer 10s after the router's clock passed the queue timeout")
	}
}
