package baseline_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/baseline"
	"github.com/leasehold/leasehold/internal/enginesim"
	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	every      = time.Second
	retryAfter = 700 * time.Millisecond
)

// fixture is an Admitter on the fake clock over pool "p" of two simulated
// engines, each configured with 1000 KV tokens and 2 slots.
type fixture struct {
	t     *testing.T
	a     *baseline.Admitter
	clock *clockwork.FakeClock
	urls  []string // each engine's base URL
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: clockwork.NewFakeClock()}
	var b strings.Builder
	fmt.Fprintf(&b, "pools:\n  - name: p\n    retry_after: %s\n    engines:\n", retryAfter)
	for i := range 2 {
		eng, err := enginesim.New(enginesim.Config{Model: "p", KVTokens: 4096, Slots: 8, Speed: 1, MaxModelLen: 2048})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(eng.Handler())
		t.Cleanup(func() { eng.Close(); srv.Close() })
		f.urls = append(f.urls, srv.URL)
		fmt.Fprintf(&b, "      - {id: gpu-%d, url: %q, kv_tokens: 1000, slots: 2}\n", i, srv.URL)
	}
	f.a = newAdmitter(t, b.String(), f.clock)
	t.Cleanup(f.a.Close)
	f.waitFor("the first scrape", f.a.Ready)
	return f
}

// newAdmitter starts an Admitter over the fleet file fleetYAML, scraping
// (each scrape bounded only by Close) every interval of clock; the caller
// closes it.
func newAdmitter(t *testing.T, fleetYAML string, clock clockwork.Clock) *baseline.Admitter {
	t.Helper()
	fl, err := fleet.Parse([]byte(fleetYAML))
	if err != nil {
		t.Fatal(err)
	}
	specs, err := fl.PoolSpecs(nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return baseline.New(baseline.Config{Fleet: fl, Specs: specs, Every: every, Clock: clock,
		Scraper: telemetry.Scraper{Client: &http.Client{Transport: tr}, Timeout: time.Hour}})
}

func (f *fixture) waitFor(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f *fixture) view(engine ledger.EngineID) baseline.View {
	for _, v := range f.a.Views("p") {
		if v.ID == engine {
			return v
		}
	}
	f.t.Fatalf("no view of %s", engine)
	return baseline.View{}
}

func admitReq(pool ledger.PoolID, kv, slots int64, cands ...ledger.EngineID) ledger.AcquireRequest {
	return ledger.AcquireRequest{Pool: pool, Candidates: cands, KVTokens: kv, Slots: slots, RequestID: "r"}
}

// Admit grants on the first candidate that the last scrape (idle engines
// here) plus this router's dispatches since leave room on, and otherwise
// returns the first candidate's reason with the pool's retry hint.
func TestAdmitAgainstScrapePlusDispatched(t *testing.T) {
	f := newFixture(t)
	both := []ledger.EngineID{"gpu-0", "gpu-1"}
	for _, tc := range []struct {
		name       string
		req        ledger.AcquireRequest
		wantEngine ledger.EngineID // granted on
		wantReason ledger.Reason   // or rejected for
		wantOn     ledger.EngineID // rejection's engine
		wantErr    error           // or failed with
	}{
		{name: "first fit", req: admitReq("p", 600, 1, both...), wantEngine: "gpu-0"},
		{name: "first candidate full: next", req: admitReq("p", 600, 1, both...), wantEngine: "gpu-1"},
		{name: "what is left of the first", req: admitReq("p", 400, 1, both...), wantEngine: "gpu-0"},
		{name: "a slot left", req: admitReq("p", 100, 1, "gpu-1"), wantEngine: "gpu-1"},
		{name: "the first candidate's reason", req: admitReq("p", 1, 1, "gpu-1", "gpu-0"), wantReason: ledger.ReasonEngineSlots, wantOn: "gpu-1"},
		{name: "no KV left", req: admitReq("p", 500, 1, "gpu-0"), wantReason: ledger.ReasonEngineKV, wantOn: "gpu-0"},
		{name: "no candidate the pool has", req: admitReq("p", 1, 1, "gpu-9"), wantReason: ledger.ReasonEngineKV},
		{name: "unknown pool", req: admitReq("q", 1, 1, "gpu-0"), wantErr: lease.ErrUnknownPool},
	} {
		tk, err := f.a.Admit(context.Background(), tc.req)
		switch {
		case tc.wantEngine != "":
			if err != nil || tk.Engine() != tc.wantEngine {
				t.Errorf("%s: Admit = %v, %v; want a grant on %s", tc.name, tk, err, tc.wantEngine)
			}
		case tc.wantErr != nil:
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("%s: Admit err = %v, want %v", tc.name, err, tc.wantErr)
			}
		default:
			rej := ledger.AsRejection(err)
			if rej == nil || rej.Reason != tc.wantReason || rej.Engine != tc.wantOn || rej.RetryAfter != retryAfter {
				t.Errorf("%s: Admit err = %v (%+v); want a %s rejection on %q with retry after %s", tc.name, err, rej, tc.wantReason, tc.wantOn, retryAfter)
			}
		}
	}
	for _, want := range []baseline.View{
		{ID: "gpu-0", CapKV: 1000, CapSlots: 2, UsedKV: 1000, UsedSlots: 2},
		{ID: "gpu-1", CapKV: 1000, CapSlots: 2, UsedKV: 700, UsedSlots: 2},
	} {
		if got := f.view(want.ID); got != want {
			t.Errorf("view %+v, want %+v", got, want)
		}
	}
	if vs := f.a.Views("q"); vs != nil {
		t.Errorf("views of an unknown pool: %v, want nil", vs)
	}
}

// A grant is never revoked and releasing it gives nothing back: the next
// scrape, on the Admitter's clock, replaces what this router dispatched
// with what the engine reports in use, so the capacity comes back once the
// engine has finished, and not before.
func TestScrapeReplacesDispatched(t *testing.T) {
	f := newFixture(t)
	tk, err := f.a.Admit(context.Background(), admitReq("p", 1000, 2, "gpu-0"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tk.Done():
		t.Error("a local grant's Done is closed")
	default:
	}
	if err := tk.Err(); err != nil {
		t.Errorf("Err = %v, want nil", err)
	}
	if err := tk.Release(ledger.Usage{PromptTokens: 10, CompletionTokens: 10}); err != nil {
		t.Errorf("Release = %v, want nil", err)
	}
	if got := f.view("gpu-0"); got.UsedKV != 1000 || got.UsedSlots != 2 {
		t.Errorf("after Release, before a scrape: used %d KV, %d slots; want 1000, 2 (dispatched since the scrape)", got.UsedKV, got.UsedSlots)
	}
	if _, err := f.a.Admit(context.Background(), admitReq("p", 1, 1, "gpu-0")); ledger.AsRejection(err) == nil {
		t.Errorf("before a scrape: Admit err = %v, want a rejection", err)
	}

	// The engine runs one request of its own (sent straight to it): the
	// next scrape counts it instead of the dispatches.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := `{"model":"p","prompt":"hold","max_tokens":1000,"ignore_eos":true,"stream":true}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.urls[0]+"/v1/completions", strings.NewReader(body))
	direct := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := direct.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(every)
	f.waitFor("a scrape that sees the engine's own request", func() bool { return f.view("gpu-0").UsedSlots == 1 })
	if got := f.view("gpu-0"); got.UsedKV <= 0 || got.UsedKV >= 1000 {
		t.Errorf("after the scrape: used %d KV, want the engine's few blocks", got.UsedKV)
	}
	if _, err := f.a.Admit(context.Background(), admitReq("p", 1, 1, "gpu-0")); err != nil {
		t.Errorf("one slot free after the scrape: Admit = %v", err)
	}
	if _, err := f.a.Admit(context.Background(), admitReq("p", 1, 1, "gpu-0")); ledger.AsRejection(err) == nil {
		t.Errorf("no slot free: Admit err = %v, want a rejection", err)
	}

	cancel() // the engine's request ends: the next scrape frees everything
	f.waitFor("the engine to drop the request", func() bool {
		f.clock.Advance(every)
		time.Sleep(20 * time.Millisecond)
		v := f.view("gpu-0")
		return v.UsedKV == 0 && v.UsedSlots == 0
	})
}

// Close aborts a scrape in flight and waits for it; an Admitter whose
// first scrape never answered is not ready.
func TestCloseAbortsHungScrape(t *testing.T) {
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hung.Close()
	a := newAdmitter(t, fmt.Sprintf("pools:\n  - name: p\n    engines:\n      - {id: gpu-0, url: %q, kv_tokens: 1000, slots: 2}\n", hung.URL),
		clockwork.NewFakeClock())
	time.Sleep(100 * time.Millisecond)
	if a.Ready() {
		t.Error("ready before its first scrape answered")
	}
	start := time.Now()
	a.Close()
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close took %s with a scrape hung", took)
	}
}
