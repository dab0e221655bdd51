package fleetapply_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/fleetapply"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/memory"
	"github.com/leasehold/leasehold/internal/telemetry"
	"github.com/leasehold/leasehold/internal/testutil/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testFleet has pool m with gpu-0 (configured capacity) and gpu-1
// (capacity from its metrics), and pool solo with only gpu-2 (metrics).
const testFleet = `
pools:
  - name: m
    engines:
      - {id: gpu-0, url: "http://127.0.0.1:1", kv_tokens: 4096, slots: 8, stale_after: 0s}
      - {id: gpu-1, url: "http://127.0.0.1:2", slots: 8}
  - name: solo
    engines:
      - {id: gpu-2, url: "http://127.0.0.1:3", slots: 8}
tenants:
  - {name: acme, api_keys: [sk-acme], kv_share: 1}
priorities:
  - {name: standard, max_fill: 1}
`

var (
	gpu1 = telemetry.EngineKey{Pool: "m", Engine: "gpu-1"}
	gpu2 = telemetry.EngineKey{Pool: "solo", Engine: "gpu-2"}
)

// swapLedger is a real memory ledger that a test can wipe (swap for a
// fresh one) or make refuse Configure (a principal that may not configure).
// Only Configure and Stats (what the applier calls) are guarded; the
// embedded ledger answers the rest.
type swapLedger struct {
	mu sync.Mutex // guards Ledger
	ledger.Ledger
	// deny, when set, is returned by Configure.
	deny       atomic.Pointer[error]
	configures atomic.Int64
}

var errDenied = errors.New("test: permission denied")

func newSwapLedger() *swapLedger {
	s := &swapLedger{}
	s.wipe()
	return s
}

func (s *swapLedger) wipe() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Ledger = memory.New(ledger.Options{RecoveryWindow: -1}, nil)
}

func (s *swapLedger) cur() ledger.Ledger {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Ledger
}

func (s *swapLedger) Configure(ctx context.Context, spec ledger.PoolSpec) (ledger.Epoch, error) {
	if e := s.deny.Load(); e != nil {
		return ledger.NoEpoch, *e
	}
	s.configures.Add(1)
	return s.cur().Configure(ctx, spec)
}

func (s *swapLedger) Stats(ctx context.Context, pool ledger.PoolID) (ledger.PoolStats, error) {
	return s.cur().Stats(ctx, pool)
}

// applier wraps fleetapply for a test on l: counts by result and the
// last published specs.
type applier struct {
	*fleetapply.Applier
	mu        sync.Mutex // guards counts and published
	counts    map[string]int
	published []ledger.PoolSpec
}

func newApplier(t *testing.T, l *swapLedger, mod func(*fleetapply.Config)) *applier {
	t.Helper()
	f, err := fleet.Parse([]byte(testFleet))
	if err != nil {
		t.Fatal(err)
	}
	a := &applier{counts: map[string]int{}}
	cfg := fleetapply.Config{
		Fleet: f, Ledger: l,
		Counted: func(_ ledger.PoolID, result string) {
			a.mu.Lock()
			a.counts[result]++
			a.mu.Unlock()
		},
		Publish: func(specs []ledger.PoolSpec) {
			a.mu.Lock()
			a.published = specs
			a.mu.Unlock()
		},
	}
	if mod != nil {
		mod(&cfg)
	}
	a.Applier = fleetapply.New(cfg)
	t.Cleanup(a.Stop)
	return a
}

func engines(spec ledger.PoolSpec) []string {
	var ids []string
	for _, e := range spec.Engines {
		ids = append(ids, string(e.ID)+":"+strconv.FormatInt(e.KVTokens, 10))
	}
	return ids
}

func ledgerEngines(t *testing.T, l *swapLedger, pool ledger.PoolID) []string {
	t.Helper()
	st, err := l.Stats(context.Background(), pool)
	if errors.Is(err, ledger.ErrUnknownPool) {
		return nil
	}
	if err != nil {
		t.Fatalf("Stats(%s): %v", pool, err)
	}
	var ids []string
	for _, e := range st.Engines {
		if !e.Removed {
			ids = append(ids, string(e.Spec.ID)+":"+strconv.FormatInt(e.Spec.KVTokens, 10))
		}
	}
	return ids
}

func waitingIDs(a *applier, pool ledger.PoolID) []string {
	var ids []string
	for _, w := range a.Waiting()[pool] {
		ids = append(ids, string(w.ID))
	}
	return ids
}

// configureDirect configures pool in l behind the applier's back (another
// router or reserver, or an admin), with engines id:kv.
func configureDirect(t *testing.T, l *swapLedger, pool ledger.PoolID, kv map[ledger.EngineID]int64) {
	t.Helper()
	spec := ledger.PoolSpec{Name: pool, Tenants: []ledger.TenantSpec{{Name: "acme", KVShare: 1}},
		Priorities: []ledger.PrioritySpec{{Name: "standard", MaxFill: 1}}}
	for _, id := range slices.Sorted(mapsKeys(kv)) {
		spec.Engines = append(spec.Engines, ledger.EngineSpec{ID: id, KVTokens: kv[id], Slots: 8})
	}
	if _, err := l.cur().Configure(context.Background(), spec); err != nil {
		t.Fatalf("configure %s directly: %v", pool, err)
	}
}

func mapsKeys(m map[ledger.EngineID]int64) func(func(ledger.EngineID) bool) {
	return func(yield func(ledger.EngineID) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func mayNotConfigure(c *fleetapply.Config) {
	c.MayNotConfigure = func(err error) bool { return errors.Is(err, errDenied) }
}

// poolState is what a test wants for pool m: the ledger's engines, the
// applied (and published) ones (nil: not applied) and the waiting ones.
type poolState struct{ ledger, applied, waiting []string }

// TestApplyPool runs rounds against a real memory ledger and checks, for
// pool m, what the ledger has, what the applier applied and published,
// which engines wait, why the pool is pending, and how often Configure
// reached the ledger.
func TestApplyPool(t *testing.T) {
	ctx := context.Background()
	deny := func(l *swapLedger) { e := errDenied; l.deny.Store(&e) }
	var sessionEpoch atomic.Int64
	// onlyGPU0: m configured with gpu-0, gpu-1 waiting for its capacity.
	onlyGPU0 := poolState{ledger: []string{"gpu-0:4096"}, applied: []string{"gpu-0:4096"}, waiting: []string{"gpu-1"}}
	cases := []struct {
		name string
		mod  func(*fleetapply.Config)
		run  func(t *testing.T, l *swapLedger, a *applier)
		poolState
		wantPending    string // substring of why m is pending; "" not pending
		wantConfigures int64
		wantCounts     map[string]int
	}{
		{
			name:           "known engines configured, a metrics engine waits",
			run:            func(t *testing.T, l *swapLedger, a *applier) { a.ApplyAll(ctx, true) },
			poolState:      onlyGPU0,
			wantConfigures: 1, wantCounts: map[string]int{"ok": 1, "pending": 1},
		},
		{
			name: "a discovered engine joins",
			run: func(t *testing.T, l *swapLedger, a *applier) {
				a.ApplyAll(ctx, true)
				if !a.Learn(map[telemetry.EngineKey]int64{gpu1: 8192}) { // 90% headroom: 7372
					t.Error("Learn of a new capacity reported no change")
				}
				a.ApplyAll(ctx, false)
			},
			poolState:      poolState{ledger: []string{"gpu-0:4096", "gpu-1:7372"}, applied: []string{"gpu-0:4096", "gpu-1:7372"}},
			wantConfigures: 2, wantCounts: map[string]int{"ok": 2, "pending": 2},
		},
		{
			name: "unchanged spec and epoch: not configured again",
			run: func(t *testing.T, l *swapLedger, a *applier) {
				for range 3 {
					a.ApplyAll(ctx, false)
				}
			},
			poolState:      onlyGPU0,
			wantConfigures: 1, wantCounts: map[string]int{"ok": 1, "pending": 3},
		},
		{
			name: "force configures again",
			run: func(t *testing.T, l *swapLedger, a *applier) {
				a.ApplyAll(ctx, false)
				if err := a.ApplyPool(ctx, "m", true); err != nil {
					t.Errorf("ApplyPool(force): %v", err)
				}
			},
			poolState:      onlyGPU0,
			wantConfigures: 2, wantCounts: map[string]int{"ok": 2, "pending": 1},
		},
		{
			name: "wiped store found by Stats and re-applied",
			run: func(t *testing.T, l *swapLedger, a *applier) {
				a.ApplyAll(ctx, false)
				l.wipe()
				a.ApplyAll(ctx, false)
			},
			poolState:      onlyGPU0,
			wantConfigures: 2, wantCounts: map[string]int{"ok": 2, "pending": 2},
		},
		{
			name: "new epoch from the ledger re-applied",
			run: func(t *testing.T, l *swapLedger, a *applier) {
				a.ApplyAll(ctx, false)
				l.wipe() // the store restarted and someone configured it: a new epoch
				time.Sleep(time.Millisecond)
				configureDirect(t, l, "m", map[ledger.EngineID]int64{"gpu-0": 4096})
				a.ApplyAll(ctx, false)
				a.ApplyAll(ctx, false)
			},
			poolState:      onlyGPU0,
			wantConfigures: 2, wantCounts: map[string]int{"ok": 2, "pending": 3},
		},
		{
			name: "session epoch: a new one re-applies, a wipe waits for the Reconfigure hook",
			mod: func(c *fleetapply.Config) {
				c.Epoch = func(ledger.PoolID) ledger.Epoch { return ledger.Epoch(sessionEpoch.Load()) }
			},
			run: func(t *testing.T, l *swapLedger, a *applier) {
				sessionEpoch.Store(int64(ledger.NoEpoch))
				a.ApplyAll(ctx, false)
				sessionEpoch.Store(1 << 40)
				a.ApplyAll(ctx, false) // another epoch than applied: configure
				sessionEpoch.Store(int64(ledger.NoEpoch))
				l.wipe()
				a.ApplyAll(ctx, false) // no Stats: nothing noticed
				if got := ledgerEngines(t, l, "m"); got != nil {
					t.Errorf("after a wipe with no epoch change, ledger has %v, want nothing (not re-applied)", got)
				}
				if err := a.ApplyPool(ctx, "m", true); err != nil { // the Reconfigure hook
					t.Errorf("ApplyPool(force): %v", err)
				}
			},
			poolState:      onlyGPU0,
			wantConfigures: 3, wantCounts: map[string]int{"ok": 3, "pending": 3},
		},
		{
			name: "an engine another applier configured is kept",
			run: func(t *testing.T, l *swapLedger, a *applier) {
				configureDirect(t, l, "m", map[ledger.EngineID]int64{"gpu-0": 4096, "gpu-1": 9000})
				a.ApplyAll(ctx, false)
			},
			poolState:      poolState{ledger: []string{"gpu-0:4096", "gpu-1:9000"}, applied: []string{"gpu-0:4096", "gpu-1:9000"}},
			wantConfigures: 1, wantCounts: map[string]int{"ok": 1, "pending": 1},
		},
		{
			name: "Configure refused without MayNotConfigure: pending, counted as an error",
			run: func(t *testing.T, l *swapLedger, a *applier) {
				deny(l)
				if err := a.ApplyPool(ctx, "m", false); !errors.Is(err, errDenied) {
					t.Errorf("ApplyPool = %v, want errDenied", err)
				}
			},
			wantPending: "configure pool m in the ledger", wantCounts: map[string]int{"error": 1},
		},
		{
			name: "an applied pool keeps its spec when a later round fails",
			run: func(t *testing.T, l *swapLedger, a *applier) {
				a.ApplyAll(ctx, false)
				deny(l)
				if err := a.ApplyPool(ctx, "m", true); err == nil {
					t.Error("ApplyPool with Configure failing = nil, want an error")
				}
			},
			poolState:      onlyGPU0,
			wantConfigures: 1, wantCounts: map[string]int{"ok": 1, "pending": 1, "error": 1},
		},
		{
			name: "may not configure, the ledger lacks the pool: pending, awaiting the owner",
			mod:  mayNotConfigure,
			run: func(t *testing.T, l *swapLedger, a *applier) {
				deny(l)
				if err := a.ApplyPool(ctx, "m", false); !errors.Is(err, fleetapply.ErrAwaitingOwner) {
					t.Errorf("ApplyPool = %v, want ErrAwaitingOwner", err)
				}
				// A pool with no capacity known here is adopted too.
				if err := a.ApplyPool(ctx, "solo", false); !errors.Is(err, fleetapply.ErrAwaitingOwner) {
					t.Errorf("ApplyPool(solo) = %v, want ErrAwaitingOwner", err)
				}
			},
			wantPending: "may not configure the ledger", wantCounts: map[string]int{},
		},
		{
			name: "may not configure: adopt the ledger's engines that the fleet lists, then re-read while some are missing",
			mod:  mayNotConfigure,
			run: func(t *testing.T, l *swapLedger, a *applier) {
				deny(l)
				configureDirect(t, l, "m", map[ledger.EngineID]int64{"gpu-0": 2048, "gpu-x": 1 << 20})
				a.ApplyAll(ctx, false)
				if got, want := waitingIDs(a, "m"), []string{"gpu-1"}; !slices.Equal(got, want) {
					t.Errorf("waiting after adopting = %v, want %v", got, want)
				}
				if got, _ := a.Applied("m"); !slices.Equal(engines(got), []string{"gpu-0:2048"}) {
					t.Errorf("adopted = %v, want [gpu-0:2048] (the ledger's capacity, fleet engines only)", engines(got))
				}
				configureDirect(t, l, "m", map[ledger.EngineID]int64{"gpu-0": 2048, "gpu-1": 1000, "gpu-x": 1 << 20})
				a.ApplyAll(ctx, false)
			},
			poolState:  poolState{ledger: []string{"gpu-0:2048", "gpu-1:1000", "gpu-x:1048576"}, applied: []string{"gpu-0:2048", "gpu-1:1000"}},
			wantCounts: map[string]int{}, // adopting configures nothing
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newSwapLedger()
			a := newApplier(t, l, tc.mod)
			tc.run(t, l, a)
			if got := ledgerEngines(t, l, "m"); !slices.Equal(got, tc.ledger) {
				t.Errorf("ledger engines = %v, want %v", got, tc.ledger)
			}
			spec, ok := a.Applied("m")
			if got := engines(spec); ok != (tc.applied != nil) || !slices.Equal(got, tc.applied) {
				t.Errorf("applied = %v (applied %v), want %v", got, ok, tc.applied)
			}
			a.mu.Lock()
			var pub []string
			for _, s := range a.published {
				if s.Name == "m" {
					pub = engines(s)
				}
			}
			counts := a.counts
			a.mu.Unlock()
			if !slices.Equal(pub, tc.applied) {
				t.Errorf("published = %v, want the applied %v", pub, tc.applied)
			}
			if got := waitingIDs(a, "m"); !slices.Equal(got, tc.waiting) {
				t.Errorf("waiting = %v, want %v", got, tc.waiting)
			}
			why, pending := a.Pending()["m"]
			if pending != (tc.wantPending != "") || !strings.Contains(why, tc.wantPending) {
				t.Errorf("pending = %q (%v), want %q", why, pending, tc.wantPending)
			}
			if got := l.configures.Load(); got != tc.wantConfigures {
				t.Errorf("Configure calls = %d, want %d", got, tc.wantConfigures)
			}
			for _, r := range []string{fleetapply.ResultOK, fleetapply.ResultPending, fleetapply.ResultError} {
				if counts[r] != tc.wantCounts[r] {
					t.Errorf("counted %s = %d, want %d (all: %v)", r, counts[r], tc.wantCounts[r], counts)
				}
			}
			if !strings.Contains(a.Describe(), "pool solo not configured") {
				t.Errorf("Describe = %q, want pool solo pending (no capacity known)", a.Describe())
			}
		})
	}
}

// TestLoopRetriesUntilConfigured: Start does not wait for the ledger; a
// failing ledger is retried with the backoff until every pool is
// configured, Reapply configures again, and Stop is idempotent.
func TestLoopRetriesUntilConfigured(t *testing.T) {
	l := newSwapLedger()
	unreachable := errors.New("test: ledger unreachable")
	l.deny.Store(&unreachable)
	a := newApplier(t, l, func(c *fleetapply.Config) {
		c.Recheck, c.BackoffMin, c.BackoffMax = time.Hour, time.Millisecond, 5*time.Millisecond
		c.Discover = func(_ context.Context, _ *fleet.Fleet, pool ledger.PoolID, known map[telemetry.EngineKey]int64) map[telemetry.EngineKey]int64 {
			if _, ok := known[gpu2]; pool == "solo" && !ok {
				return map[telemetry.EngineKey]int64{gpu2: 1000}
			}
			return nil
		}
	})
	a.Start()
	poll.Eventually(t, 5*time.Second, "two failed rounds", func() bool { a.mu.Lock(); defer a.mu.Unlock(); return a.counts["error"] >= 4 })
	if a.Configured() {
		t.Fatal("Configured with the ledger refusing every Configure")
	}
	l.deny.Store(nil)
	poll.Eventually(t, 5*time.Second, "every pool configured", a.Configured)
	if got := ledgerEngines(t, l, "solo"); !slices.Equal(got, []string{"gpu-2:900"}) {
		t.Errorf("solo in the ledger = %v, want [gpu-2:900] (discovered 1000, 90%% headroom)", got)
	}
	before := l.configures.Load()
	a.Reapply()
	poll.Eventually(t, 5*time.Second, "Reapply configures again", func() bool { return l.configures.Load() >= before+2 })
	a.Stop()
	a.Stop()
}

func TestStopWithoutStart(t *testing.T) {
	a := newApplier(t, newSwapLedger(), nil)
	a.Stop()
}
