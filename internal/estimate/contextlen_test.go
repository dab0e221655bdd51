package estimate

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
)

// fit drops engines too small for an exact prompt and moves them last for
// an estimated one; equal engines, or no engine that fits, leave the order.
func TestContextFit(t *testing.T) {
	l := Bounds{Limit: 1024, Reserve: 4096, Engines: map[ledger.EngineID]int64{"a": 1024, "b": 4096, "c": 2048, "d": 4096}}
	cands := []ledger.EngineID{"a", "b", "c", "d"}
	for _, tc := range []struct {
		need  int64
		exact bool
		want  []ledger.EngineID
	}{
		{1024, true, cands},
		{1025, true, []ledger.EngineID{"b", "c", "d"}},
		{1025, false, []ledger.EngineID{"b", "c", "d", "a"}},
		{3000, true, []ledger.EngineID{"b", "d"}},
		{3000, false, []ledger.EngineID{"b", "d", "a", "c"}},
		{5000, true, cands}, // nothing fits: checkContext's to refuse
		{0, true, cands},
	} {
		if got := l.Fit(slices.Clone(cands), tc.need, tc.exact); !slices.Equal(got, tc.want) {
			t.Errorf("fit(need %d, exact %v) = %v, want %v", tc.need, tc.exact, got, tc.want)
		}
	}
	equal := Bounds{Limit: 2048, Reserve: 2048}
	if got := equal.Fit(cands, 4000, true); !slices.Equal(got, cands) {
		t.Errorf("equal engines: %v, want %v unchanged", got, cands)
	}
}

// An engine that answered is asked again every recheck: a longer context
// after a redeploy reaches the pool's bounds (so a request without
// max_tokens is not under-leased), and a failed re-ask keeps the answer.
func TestContextLengthRecheck(t *testing.T) {
	var maxLen atomic.Int64
	maxLen.Store(4096)
	var down atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "restarting", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"m","max_model_len":%d}]}`, maxLen.Load())
	}))
	t.Cleanup(srv.Close)
	f, err := fleet.Parse([]byte(fmt.Sprintf(`pools:
  - name: m
    engines:
      - {id: e0, url: %q, kv_tokens: 100000, slots: 8}
`, srv.URL) + tenants))
	if err != nil {
		t.Fatal(err)
	}
	c := NewContextLens(ContextConfig{Fleet: f, Fallback: 2048, Client: srv.Client(), Timeout: time.Second, Log: slog.New(slog.DiscardHandler)})
	c.recheck = 50 * time.Millisecond
	want := func(limit int64) {
		t.Helper()
		if got := c.Get("m"); got.Limit != limit || got.Reserve != limit {
			t.Fatalf("context length %+v, want %d", got, limit)
		}
	}
	c.Discover(t.Context(), "m")
	want(4096)
	maxLen.Store(8192) // redeployed with a longer context
	c.Discover(t.Context(), "m")
	want(4096) // not due yet
	time.Sleep(60 * time.Millisecond)
	c.Discover(t.Context(), "m")
	want(8192)
	down.Store(true)
	time.Sleep(60 * time.Millisecond)
	c.Discover(t.Context(), "m")
	want(8192) // a failed re-ask keeps the answer
}

// tenants completes a fleet file.
const tenants = `tenants:
  - {name: acme, api_keys: ["sk-acme"], kv_share: 1}
`
