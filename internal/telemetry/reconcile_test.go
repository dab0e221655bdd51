package telemetry

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/memory"
)

// engineServer serves a fixture at /metrics until failing is set, then 500.
type engineServer struct {
	*httptest.Server
	failing atomic.Bool
}

func newEngineServer(t *testing.T, body []byte) *engineServer {
	t.Helper()
	s := &engineServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		if s.failing.Load() {
			http.Error(w, "engine unhealthy", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

func findEngine(t *testing.T, st ledger.PoolStats, id ledger.EngineID) ledger.EngineStats {
	t.Helper()
	for _, e := range st.Engines {
		if e.Spec.ID == id {
			return e
		}
	}
	t.Fatalf("engine %s not in stats", id)
	return ledger.EngineStats{}
}

func TestReconcilerObservesFixturesAndReportsStale(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := clockwork.NewFakeClockAt(t0)
	led := memory.New(ledger.Options{RecoveryWindow: -1}, clock)
	defer led.Close()

	const pool = ledger.PoolID("llama")
	const staleAfter = 5 * time.Second
	spec := ledger.PoolSpec{Name: pool}
	var targets []Target
	servers := map[ledger.EngineID]*engineServer{}
	for _, fx := range fixtures {
		id := ledger.EngineID(fx.format + "-0")
		servers[id] = newEngineServer(t, fixture(t, fx.file))
		targets = append(targets, Target{Pool: pool, Engine: id, MetricsURL: servers[id].URL + "/metrics",
			Format: fx.format, StaleAfter: staleAfter, Policy: ledger.StaleHold})
	}
	down := newEngineServer(t, nil)
	down.failing.Store(true)
	targets = append(targets, Target{Pool: pool, Engine: "down-0", MetricsURL: down.URL + "/metrics",
		Format: FormatVLLM, StaleAfter: staleAfter, Policy: ledger.StaleBlock})
	for _, tg := range targets {
		spec.Engines = append(spec.Engines, ledger.EngineSpec{ID: tg.Engine, KVTokens: 400000, Slots: 256,
			StaleAfter: staleAfter, StalePolicy: tg.Policy})
	}
	if _, err := led.Configure(ctx, spec); err != nil {
		t.Fatal(err)
	}

	r, err := NewReconciler(ReconcilerConfig{Targets: targets, Ledger: led, Interval: time.Second, Concurrency: 2, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if err := r.Start(); !errors.Is(err, ErrStarted) {
		t.Errorf("second Start = %v, want ErrStarted", err)
	}
	// The loop parks on its interval timer once a round is done.
	round := func() {
		t.Helper()
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatalf("waiting for a round: %v", err)
		}
	}
	round()

	st, err := led.Stats(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, fx := range fixtures {
		id := ledger.EngineID(fx.format + "-0")
		e := findEngine(t, st, id)
		want := fx.want.Observation(pool, id, t0)
		if got := e.LastObservation; got != want {
			t.Errorf("%s LastObservation:\n got %+v\nwant %+v", id, got, want)
		}
		if e.Stale {
			t.Errorf("%s: ledger reports fresh telemetry as stale", id)
		}
		es, _ := r.Engine(EngineKey{pool, id})
		if es.Stale || es.LastError != nil || !es.LastSuccess.Equal(t0) || es.Sample != fx.want {
			t.Errorf("%s status = %+v, want fresh with the fixture sample", id, es)
		}
	}
	e := findEngine(t, st, "down-0")
	if e.LastObservation != (ledger.Observation{}) || !e.ObservedAt.IsZero() {
		t.Errorf("down-0 was observed: %+v", e.LastObservation)
	}
	if !e.Stale {
		t.Errorf("ledger: never-observed down-0 is not stale")
	}
	es, ok := r.Engine(EngineKey{pool, "down-0"})
	if !ok || !es.Stale || es.Failures != 1 || es.LastError == nil || !strings.Contains(es.LastError.Error(), "500") {
		t.Errorf("down-0 status = %+v, want stale after one failure naming HTTP 500", es)
	}

	// vLLM starts failing: its last observation holds, unchanged, and it
	// turns stale once StaleAfter has passed without a success.
	servers["vllm-0"].failing.Store(true)
	for i := 1; i <= 6; i++ {
		clock.Advance(time.Second)
		round()
		es, _ := r.Engine(EngineKey{pool, "vllm-0"})
		if wantStale := time.Duration(i)*time.Second > staleAfter; es.Stale != wantStale || es.Failures != i {
			t.Errorf("after %ds of failures: stale=%v failures=%d, want stale=%v failures=%d", i, es.Stale, es.Failures, wantStale, i)
		}
	}
	st, err = led.Stats(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	v := findEngine(t, st, "vllm-0")
	if !v.Stale {
		t.Errorf("ledger: vllm-0 not stale after %s without telemetry", 6*time.Second)
	}
	if want := fixtures[0].want.Observation(pool, "vllm-0", t0); v.LastObservation != want {
		t.Errorf("vllm-0 observation changed while failing:\n got %+v\nwant %+v", v.LastObservation, want)
	}
	if s := findEngine(t, st, "sglang-0"); s.Stale || !s.LastObservation.ObservedAt.Equal(t0.Add(6*time.Second)) {
		t.Errorf("sglang-0 stale=%v observed at %s, want fresh at t0+6s", s.Stale, s.LastObservation.ObservedAt)
	}

	// Recovery: the next success makes it fresh again.
	servers["vllm-0"].failing.Store(false)
	clock.Advance(time.Second)
	round()
	if es, _ := r.Engine(EngineKey{pool, "vllm-0"}); es.Stale || es.Failures != 0 || es.LastError != nil {
		t.Errorf("after recovery: %+v, want fresh", es)
	}

	status := r.Status()
	if len(status) != len(targets) || status[0].Target.Engine != "down-0" {
		t.Errorf("Status() = %d entries starting %s, want %d sorted by engine", len(status), status[0].Target.Engine, len(targets))
	}
	disc := r.Discovered()
	want := map[EngineKey]int64{{pool, "vllm-0"}: 461328, {pool, "sglang-0"}: 483912, {pool, "tgi-0"}: 449872}
	if len(disc) != len(want) {
		t.Errorf("Discovered() = %v, want %v", disc, want)
	}
	for k, v := range want {
		if disc[k] != v {
			t.Errorf("Discovered()[%s] = %d, want %d", k, disc[k], v)
		}
	}
}

func TestReconcilerObserveFailureIsNotSuccess(t *testing.T) {
	srv := newEngineServer(t, fixture(t, "sglang.metrics.txt"))
	led := memory.New(ledger.Options{RecoveryWindow: -1}, nil)
	defer led.Close()
	// The pool is not configured: Observe fails with ErrUnknownPool.
	r, err := NewReconciler(ReconcilerConfig{Ledger: led, Targets: []Target{
		{Pool: "nope", Engine: "e", MetricsURL: srv.URL + "/metrics", Format: FormatSGLang},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r.RunOnce(context.Background())
	es, _ := r.Engine(EngineKey{"nope", "e"})
	if !es.Stale || !errors.Is(es.LastError, ledger.ErrUnknownPool) || !es.LastSuccess.IsZero() {
		t.Errorf("status = %+v, want stale with ErrUnknownPool", es)
	}
	if len(r.Discovered()) != 0 {
		t.Errorf("Discovered() = %v after no success, want empty", r.Discovered())
	}
}

// countingObserver records observations.
type countingObserver struct {
	mu  sync.Mutex
	obs []ledger.Observation
}

func (c *countingObserver) Observe(_ context.Context, o ledger.Observation) (ledger.Observed, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.obs = append(c.obs, o)
	return ledger.Observed{Applied: true}, nil
}

func TestReconcilerBoundsConcurrency(t *testing.T) {
	body := fixture(t, "tgi.metrics.txt")
	var inFlight, peak atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	obs := &countingObserver{}
	var targets []Target
	for _, id := range []ledger.EngineID{"a", "b", "c", "d", "e", "f", "g"} {
		targets = append(targets, Target{Pool: "p", Engine: id, MetricsURL: srv.URL, Format: FormatTGI})
	}
	r, err := NewReconciler(ReconcilerConfig{Ledger: obs, Targets: targets, Concurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	r.RunOnce(context.Background())
	if got := peak.Load(); got > 3 || got < 2 {
		t.Errorf("peak scrapes in flight = %d, want 2..3", got)
	}
	if len(obs.obs) != len(targets) {
		t.Errorf("%d observations, want %d", len(obs.obs), len(targets))
	}
}

func TestReconcilerStopCancelsScrapes(t *testing.T) {
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done() // hang until the client gives up
	}))
	defer srv.Close()
	r, err := NewReconciler(ReconcilerConfig{Ledger: &countingObserver{}, Targets: []Target{
		{Pool: "p", Engine: "e", MetricsURL: srv.URL, Format: FormatVLLM},
	}, Scraper: &Scraper{Timeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	<-arrived
	done := make(chan struct{})
	go func() { r.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return while a scrape hung")
	}
	r.Stop() // idempotent
	if err := r.Start(); !errors.Is(err, ErrStarted) {
		t.Errorf("Start after Stop = %v, want ErrStarted", err)
	}
}

func TestNewReconcilerRejects(t *testing.T) {
	ok := Target{Pool: "p", Engine: "e", MetricsURL: "http://x/metrics"}
	for _, tt := range []struct {
		name   string
		cfg    ReconcilerConfig
		errHas string
	}{
		{"no ledger", ReconcilerConfig{Targets: []Target{ok}}, "Ledger is required"},
		{"negative interval", ReconcilerConfig{Ledger: &countingObserver{}, Interval: -1}, "interval"},
		{"target without url", ReconcilerConfig{Ledger: &countingObserver{}, Targets: []Target{{Pool: "p", Engine: "e"}}}, "targets[0]"},
		{"bad format", ReconcilerConfig{Ledger: &countingObserver{}, Targets: []Target{{Pool: "p", Engine: "e", MetricsURL: "http://x", Format: "triton"}}}, "want vllm, sglang or tgi"},
		{"duplicate", ReconcilerConfig{Ledger: &countingObserver{}, Targets: []Target{ok, ok}}, "p/e listed twice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewReconciler(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("NewReconciler = %v, want error containing %q", err, tt.errHas)
			}
		})
	}
}
