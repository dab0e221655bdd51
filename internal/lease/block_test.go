package lease_test

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/poll"
)

// bigSpec is spec() with room for many small concurrent requests.
func bigSpec() ledger.PoolSpec {
	s := spec()
	for i := range s.Engines {
		s.Engines[i].KVTokens, s.Engines[i].Slots = 10000, 64
	}
	return s
}

func (f *fixture) blockConfig(t *testing.T) lease.Config {
	t.Helper()
	if _, err := f.fault.Configure(ctxT(t, 5*time.Second), bigSpec()); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	cfg := f.fastConfig()
	cfg.Reconfigure = func(ctx context.Context, p ledger.PoolID) error {
		_, err := f.fault.Configure(ctx, bigSpec())
		return err
	}
	cfg.Block = lease.BlockConfig{KVTokens: 2000, Slots: 16, Idle: 300 * time.Millisecond, Backoff: 50 * time.Millisecond}
	return cfg
}

// checkCapacity fails the test if any engine's reserved KV or slots
// exceed its capacity in the ledger.
func checkCapacity(t *testing.T, l ledger.Ledger) {
	t.Helper()
	for _, e := range ledgerStats(t, l).Engines {
		if e.ReservedKV > e.Spec.KVTokens || e.ReservedSlots > e.Spec.Slots {
			t.Errorf("engine %s reserved kv=%d slots=%d over capacity kv=%d slots=%d",
				e.Spec.ID, e.ReservedKV, e.ReservedSlots, e.Spec.KVTokens, e.Spec.Slots)
		}
	}
}

// subOf waits until Admit answers from a block (the first calls trigger
// the background block acquisition and are acquired on their own).
func subOf(t *testing.T, m *lease.Manager, req ledger.AcquireRequest) *lease.Sub {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		tk, err := m.Admit(ctxT(t, 5*time.Second), req)
		if err != nil {
			t.Fatalf("Admit: %v", err)
		}
		if s, ok := tk.(*lease.Sub); ok {
			return s
		}
		_ = tk.Release(ledger.Usage{})
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no block lease within 5s")
	return nil
}

// Off by default: Admit acquires every request on its own.
func TestBlocksOffByDefault(t *testing.T) {
	fx := newFixture(t, backends()[0])
	m := newManager(t, fx.fastConfig())
	for i := range 20 {
		tk, err := m.Admit(ctxT(t, 5*time.Second), request(10))
		if err != nil {
			t.Fatalf("Admit %d: %v", i, err)
		}
		if _, ok := tk.(*lease.Held); !ok {
			t.Fatalf("Admit %d = %T, want *lease.Held", i, tk)
		}
		_ = tk.Release(ledger.Usage{})
	}
	st := m.Stats()
	if got := fx.fault.acquires.Load(); got != 20 {
		t.Errorf("ledger Acquire calls = %d, want 20", got)
	}
	if st.Blocks != 0 || st.Counters.LocalAdmits != 0 || st.Counters.BlockAcquires != 0 || len(m.Blocks()) != 0 {
		t.Errorf("blocks with Config.Block unset: blocks=%d local=%d acquired=%d", st.Blocks, st.Counters.LocalAdmits, st.Counters.BlockAcquires)
	}
}

// Many concurrent small requests: far fewer ledger calls, a block's
// sub-requests never exceed it, and engines never exceed capacity.
func TestBlocksConcurrentExactAndFewerCalls(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		cfg := fx.blockConfig(t)
		// Small blocks, so that they fill up and the limits are hit.
		cfg.Block.KVTokens, cfg.Block.Slots, cfg.Block.MaxPerEngine = 600, 8, 3
		m := newManager(t, cfg)
		const workers, perWorker = 24, 150

		// inUse is the test's own count per block: added after Admit
		// returns, taken before Release, so it never exceeds what the
		// Manager has admitted against the block at that moment.
		var (
			inUseMu    sync.Mutex // guards inUseKV, inUseSlots, blockSize
			inUseKV    = map[ledger.LeaseID]int64{}
			inUseSlots = map[ledger.LeaseID]int64{}
			blockSize  = map[ledger.LeaseID][2]int64{}
		)
		var admitted, local, rejected atomic.Int64
		stopChecks := poll.Every(5*time.Millisecond, func() {
			checkCapacity(t, fx.fault)
			for _, b := range m.Blocks() {
				if b.UsedKV > b.Lease.KVTokens || b.UsedSlots > b.Lease.Slots || b.UsedKV < 0 || b.UsedSlots < 0 {
					t.Errorf("block %s used kv=%d slots=%d of kv=%d slots=%d", b.Lease.ID, b.UsedKV, b.UsedSlots, b.Lease.KVTokens, b.Lease.Slots)
				}
			}
		})
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perWorker {
					req := request(int64(10 + mrand.IntN(90)))
					if mrand.IntN(2) == 0 {
						req.Candidates = []ledger.EngineID{"gpu-1", "gpu-0"}
					}
					req.RequestID = ledger.RequestID(fmt.Sprintf("w%d-%d", w, i))
					tk, err := m.Admit(ctxT(t, 5*time.Second), req)
					if ledger.AsRejection(err) != nil {
						rejected.Add(1)
						continue
					}
					if err != nil {
						t.Errorf("Admit: %v", err)
						return
					}
					admitted.Add(1)
					s, isSub := tk.(*lease.Sub)
					var id ledger.LeaseID
					if isSub {
						local.Add(1)
						bl := s.Block()
						id = bl.ID
						inUseMu.Lock()
						blockSize[id] = [2]int64{bl.KVTokens, bl.Slots}
						inUseKV[id] += req.KVTokens
						inUseSlots[id] += req.Slots
						if inUseKV[id] > bl.KVTokens || inUseSlots[id] > bl.Slots {
							t.Errorf("block %s: sub-requests kv=%d slots=%d exceed the block kv=%d slots=%d",
								id, inUseKV[id], inUseSlots[id], bl.KVTokens, bl.Slots)
						}
						inUseMu.Unlock()
					}
					time.Sleep(time.Duration(mrand.IntN(1500)) * time.Microsecond)
					if isSub {
						inUseMu.Lock()
						inUseKV[id] -= req.KVTokens
						inUseSlots[id] -= req.Slots
						inUseMu.Unlock()
					}
					if err := tk.Release(ledger.Usage{PromptTokens: 1}); err != nil {
						t.Errorf("Release: %v", err)
					}
				}
			}()
		}
		wg.Wait()
		stopChecks()

		st := m.Stats().Counters
		calls := fx.fault.acquires.Load()
		n := admitted.Load()
		t.Logf("requests=%d admitted=%d (local %d) rejected=%d; ledger Acquire calls=%d Release calls=%d; blocks acquired=%d released=%d; saved (gross)=%d",
			workers*perWorker, n, local.Load(), rejected.Load(), calls, fx.fault.releases.Load(),
			st.BlockAcquires, st.BlockReleases, st.LedgerCallsSaved)
		if st.LocalAdmits != uint64(local.Load()) {
			t.Errorf("LocalAdmits = %d, test saw %d", st.LocalAdmits, local.Load())
		}
		if calls*5 > int64(workers*perWorker) {
			t.Errorf("ledger Acquire calls = %d for %d requests, want under a fifth", calls, workers*perWorker)
		}
		if st.BlockAcquires == 0 || st.LedgerCallsSaved != 2*st.LocalAdmits {
			t.Errorf("counters: %+v", st)
		}
		for id, v := range inUseKV {
			if v != 0 || inUseSlots[id] != 0 {
				t.Errorf("block %s: test count kv=%d slots=%d after all releases", id, v, inUseSlots[id])
			}
		}
		if got := m.Stats().BlockSubs; got != 0 {
			t.Errorf("BlockSubs = %d after all releases, want 0", got)
		}
		checkCapacity(t, fx.fault)
		// Idle blocks are released.
		poll.Eventually(t, 5*time.Second, "idle blocks released", func() bool {
			return len(m.Blocks()) == 0 && ledgerStats(t, fx.fault).Leases == 0
		})
		if st := m.Stats().Counters; st.BlockReleases != st.BlockAcquires {
			t.Errorf("blocks released %d, acquired %d", st.BlockReleases, st.BlockAcquires)
		}
	})
}

// While the ledger is unreachable but the session still confirmed, held
// blocks keep admitting without a ledger call; once the session fences,
// every sub-request's Done closes and nothing is admitted.
func TestBlocksFenceClosesSubs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		cfg := fx.blockConfig(t)
		m := newManager(t, cfg)
		first := subOf(t, m, request(10))

		fx.fault.down.Store(true)
		before := fx.fault.acquires.Load()
		tk, err := m.Admit(ctxT(t, 5*time.Second), request(10))
		if err != nil {
			t.Fatalf("Admit with the ledger unreachable, session confirmed: %v", err)
		}
		second, ok := tk.(*lease.Sub)
		if !ok {
			t.Fatalf("Admit with the ledger unreachable = %T, want a *lease.Sub", tk)
		}
		if got := fx.fault.acquires.Load(); got != before {
			t.Errorf("local admission called the ledger %d times", got-before)
		}

		for _, s := range []*lease.Sub{first, second} {
			ended(t, "sub-request after the session fenced", s, 3*cfg.SessionTTL, lease.ErrFenced)
		}
		before = fx.fault.acquires.Load()
		if _, err := m.Admit(ctxT(t, 5*time.Second), request(10)); !errors.Is(err, lease.ErrFenced) {
			t.Errorf("Admit while fenced = %v, want ErrFenced", err)
		}
		if got := fx.fault.acquires.Load(); got != before {
			t.Errorf("Admit while fenced reached the ledger (%d calls)", got-before)
		}

		fx.fault.down.Store(false)
		poll.Eventually(t, 5*time.Second, "session confirmed again", func() bool { return m.Confirmed(pool) })
		_ = first.Release(ledger.Usage{})
		_ = second.Release(ledger.Usage{})
		poll.Eventually(t, 5*time.Second, "fenced block gone from the ledger", func() bool {
			return ledgerStats(t, fx.fault).Leases == 0
		})
		if got := len(m.Blocks()); got != 0 {
			t.Errorf("live blocks after fencing = %d, want 0", got)
		}
	})
}

// A block carves only while the session's last confirmation is younger
// than CarveWithin, though the session stays confirmed longer: after a
// ledger loss no sub-request starts on pre-loss capacity past the
// ledger's dispatch grace (docs/design.md, "Recovery after ledger loss").
func TestBlocksCarveOnlyWhileRecentlyConfirmed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		cfg := fx.blockConfig(t)
		cfg.Block.CarveWithin = 200 * time.Millisecond // fenced 700ms after the last confirmation
		m := newManager(t, cfg)
		first := subOf(t, m, request(10))
		defer func() { _ = first.Release(ledger.Usage{}) }()

		fx.fault.down.Store(true)
		time.Sleep(cfg.Block.CarveWithin + 50*time.Millisecond)
		if !m.Confirmed(pool) {
			t.Skipf("the session fenced within %s of going down (a loaded machine): nothing left to tell apart", cfg.Block.CarveWithin+50*time.Millisecond)
		}
		tk, err := m.Admit(ctxT(t, 100*time.Millisecond), request(10))
		if err == nil {
			_ = tk.Release(ledger.Usage{})
			t.Fatalf("Admit %s after the last confirmation, ledger unreachable = %T granted, want no local admission (an error from the unreachable ledger)", cfg.Block.CarveWithin, tk)
		}
		if !m.Confirmed(pool) {
			t.Logf("the session fenced while Admit waited; the refusal above may be the fence's")
		}
		fx.fault.down.Store(false)
		poll.Eventually(t, 5*time.Second, "local admission after a fresh confirmation", func() bool {
			tk, err := m.Admit(ctxT(t, 5*time.Second), request(10))
			if err != nil {
				return false
			}
			_ = tk.Release(ledger.Usage{})
			_, ok := tk.(*lease.Sub)
			return ok
		})
	})
}

// A block of an epoch the ledger lost is re-asserted (its running
// sub-requests are real load) but carves nothing more, and goes back to
// the ledger when its last sub-request ends.
func TestBlocksOfALostEpochStopCarving(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		cfg := fx.blockConfig(t)
		m := newManager(t, cfg)
		first := subOf(t, m, request(10))
		old := first.Block()

		fx.wipe(t)
		poll.Eventually(t, 5*time.Second, "the old block re-asserted in a new epoch", func() bool {
			ls, err := fx.fault.List(ctxT(t, time.Second), ledger.Filter{Pool: pool})
			if err != nil {
				return false
			}
			for _, l := range ls {
				if l.ID == old.ID && l.Reasserted {
					return fx.fault.session().Epoch != old.Fence.Epoch
				}
			}
			return false
		})
		for i := range 20 {
			tk, err := m.Admit(ctxT(t, 5*time.Second), request(10))
			if err != nil {
				t.Fatalf("Admit %d in the new epoch: %v", i, err)
			}
			if s, ok := tk.(*lease.Sub); ok && s.Block().ID == old.ID {
				t.Errorf("Admit %d carved from block %s of the lost epoch %d", i, old.ID, old.Fence.Epoch)
			}
			_ = tk.Release(ledger.Usage{})
		}
		if err := first.Release(ledger.Usage{}); err != nil {
			t.Errorf("release the old block's last sub-request: %v", err)
		}
		poll.Eventually(t, 5*time.Second, "the old block released", func() bool {
			ls, err := fx.fault.List(ctxT(t, time.Second), ledger.Filter{Pool: pool})
			if err != nil {
				return false
			}
			for _, l := range ls {
				if l.ID == old.ID {
					return false
				}
			}
			return true
		})
	})
}

// Close releases blocks and closes their sub-requests.
func TestBlocksReleasedOnClose(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		cfg := fx.blockConfig(t)
		m, err := lease.New(cfg)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if err := m.WaitReady(ctxT(t, 5*time.Second)); err != nil {
			t.Fatalf("WaitReady: %v", err)
		}
		s := subOf(t, m, request(10))
		if got := ledgerStats(t, fx.fault).Leases; got == 0 {
			t.Fatal("no block lease in the ledger")
		}
		if err := m.Close(ctxT(t, 5*time.Second)); err != nil {
			t.Fatalf("Close: %v", err)
		}
		ended(t, "sub-request after Close", s, 0, lease.ErrClosed)
		wantLedgerLeases(t, fx, "after Close", 0)
		_ = s.Release(ledger.Usage{})
	})
}

// A block is an ordinary lease of one tenant: the tenant's quota bounds
// it, and requests that do not get a block are acquired on their own.
func TestBlocksRespectTenantQuota(t *testing.T) {
	fx := newFixture(t, backends()[0])
	cfg := fx.blockConfig(t)
	sp := bigSpec()
	sp.Tenants = []ledger.TenantSpec{{Name: "acme", KVShare: 0.05}} // 1000 of 20000 kv tokens
	if _, err := fx.fault.Configure(ctxT(t, 5*time.Second), sp); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	m := newManager(t, cfg) // blocks of 2000 kv tokens: never within the quota
	for range 10 {
		tk, err := m.Admit(ctxT(t, 5*time.Second), request(50))
		if err != nil {
			t.Fatalf("Admit: %v", err)
		}
		if _, ok := tk.(*lease.Held); !ok {
			t.Errorf("Admit = %T, want *lease.Held (no block fits the quota)", tk)
		}
		_ = tk.Release(ledger.Usage{})
		time.Sleep(60 * time.Millisecond) // past the block backoff
	}
	st := m.Stats().Counters
	if st.BlockAcquires != 0 || st.BlockRefusals == 0 {
		t.Errorf("block acquisitions = %d, refusals = %d; want 0 and > 0", st.BlockAcquires, st.BlockRefusals)
	}
}

// A request charging a rate window (Tokens > 0) is never admitted from a
// block: only the ledger checks the tenant's budget across routers, so
// a block's sub-requests would pass it uncharged. Its tenant gets no
// block either, and the budget holds.
func TestBlocksSkipRatedRequests(t *testing.T) {
	fx := newFixture(t, backends()[0])
	cfg := fx.blockConfig(t)
	sp := bigSpec()
	sp.Tenants = []ledger.TenantSpec{{Name: "acme", KVShare: 1, TokensPerMinute: 5000}}
	if _, err := fx.fault.Configure(ctxT(t, 5*time.Second), sp); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	m := newManager(t, cfg)
	var granted, refused int
	for i := range 30 {
		r := request(50)
		r.Tokens = 400
		tk, err := m.Admit(ctxT(t, 5*time.Second), r)
		if rej := ledger.AsRejection(err); rej != nil && rej.Reason == ledger.ReasonTenantTokenRate {
			refused++
			continue
		}
		if err != nil {
			t.Fatalf("Admit %d: %v", i, err)
		}
		granted++
		if _, ok := tk.(*lease.Held); !ok {
			t.Errorf("Admit %d of a rated request = %T, want *lease.Held (charged by the ledger)", i, tk)
		}
		_ = tk.Release(ledger.Usage{})
		time.Sleep(10 * time.Millisecond) // time for a block refill, were one started
	}
	if granted != 12 || refused != 18 {
		t.Errorf("30 requests of 400 tokens on a 5000 budget: %d granted, %d refused tenant_token_rate; want 12 and 18", granted, refused)
	}
	if st := m.Stats().Counters; st.LocalAdmits != 0 || st.BlockAcquires != 0 {
		t.Errorf("local admissions = %d, block acquisitions = %d; want 0 and 0 for a rated tenant", st.LocalAdmits, st.BlockAcquires)
	}
}

func TestBlockConfigValidate(t *testing.T) {
	fx := newFixture(t, backends()[0])
	for _, tc := range []struct {
		name  string
		block lease.BlockConfig
		ok    bool
	}{
		{"off", lease.BlockConfig{}, true},
		{"on", lease.BlockConfig{KVTokens: 100, Slots: 2}, true},
		{"kv only", lease.BlockConfig{KVTokens: 100}, false},
		{"slots only", lease.BlockConfig{Slots: 2}, false},
		{"negative", lease.BlockConfig{KVTokens: -1, Slots: 2}, false},
		{"low water above 1", lease.BlockConfig{KVTokens: 100, Slots: 2, LowWater: 1.5}, false},
		{"carve within 1ms", lease.BlockConfig{KVTokens: 100, Slots: 2, CarveWithin: time.Millisecond}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fx.fastConfig()
			cfg.Block = tc.block
			if err := cfg.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
