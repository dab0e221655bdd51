package lease_test

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/poll"
)

func TestAcquireReleaseRoundTrip(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		cfg := fx.fastConfig()
		cfg.LeaseTTL = 30 * time.Second
		cfg.RenewInterval = time.Second
		m := newManager(t, cfg)

		held := acquireAll(t, m, 100, 200, 300)
		if got := held[0].Lease().Holder; got != m.Stats().Pools[0].Holder {
			t.Errorf("lease holder = %q, want the pool's holder %q", got, m.Stats().Pools[0].Holder)
		}
		res := m.Snapshot().Engines(pool)
		if got, want := res["gpu-0"], (lease.Reserved{KVTokens: 600, Slots: 3, Leases: 3}); got != want {
			t.Errorf("Snapshot.Engines[gpu-0] = %+v, want %+v", got, want)
		}
		wantLedgerLeases(t, fx, "after three grants", 3)

		for _, h := range held {
			if err := h.Release(ledger.Usage{PromptTokens: 10, CompletionTokens: 5}); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if err := h.Release(ledger.Usage{}); err != nil {
				t.Fatalf("second Release: %v", err)
			}
			ended(t, "after Release", h, 0, lease.ErrReleased)
		}
		st := m.Stats()
		if st.Held != 0 || m.Snapshot().Len("") != 0 {
			t.Errorf("local table holds %d leases after release, want 0", st.Held)
		}
		if st.Counters.Grants != 3 || st.Counters.Releases != 3 {
			t.Errorf("counters grants=%d releases=%d, want 3 and 3", st.Counters.Grants, st.Counters.Releases)
		}
		ls := ledgerStats(t, fx.fault)
		if ls.Leases != 0 || ls.Engines[0].ReservedKV != 0 {
			t.Errorf("ledger after release: leases=%d reserved kv=%d, want 0", ls.Leases, ls.Engines[0].ReservedKV)
		}
		if got := ls.Counters[ledger.CounterActualPrompt]; got != 30 {
			t.Errorf("ledger actual prompt tokens = %d, want 30", got)
		}
	})
}

// HeldByEngine, the per-engine totals kept from each commit, always ends
// equal to a scan of the table (Snapshot().Engines): after concurrent
// grants, resizes and releases, after fencing (rows rewritten), after the
// session expired (rows of the old incarnation dropped), and when empty.
func TestHeldByEngineMatchesTable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		cfg := fx.fastConfig()
		m := newManager(t, cfg)
		same := func(when string) {
			t.Helper()
			got, want := m.HeldByEngine(pool), m.Snapshot().Engines(pool)
			if !maps.Equal(got, want) {
				t.Errorf("%s: HeldByEngine = %v, table scan = %v", when, got, want)
			}
			for _, e := range []ledger.EngineID{"gpu-0", "gpu-1"} {
				if got := m.HeldOn(pool, e); got != want[e] {
					t.Errorf("%s: HeldOn(%s) = %+v, table scan = %+v", when, e, got, want[e])
				}
			}
		}
		var (
			mu   sync.Mutex
			kept []*lease.Held
			wg   sync.WaitGroup
		)
		for w := range 8 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 7))
				for range 25 {
					h, err := m.Acquire(ctxT(t, 5*time.Second), request(int64(10+rng.IntN(90))))
					if err != nil {
						continue // capacity: 8 slots for 8 workers keeping some
					}
					if rng.IntN(3) == 0 {
						_ = h.Resize(ctxT(t, 5*time.Second), h.Lease().KVTokens+int64(rng.IntN(20)))
					}
					if rng.IntN(4) == 0 {
						mu.Lock()
						kept = append(kept, h)
						mu.Unlock()
						continue
					}
					if err := h.Release(ledger.Usage{}); err != nil {
						t.Errorf("Release: %v", err)
					}
				}
			})
		}
		wg.Wait()
		same("after concurrent grants, resizes and releases")
		if len(kept) == 0 {
			t.Fatal("no lease kept: the test checks nothing held")
		}
		if got := m.HeldByEngine(pool); len(got) == 0 {
			t.Fatalf("HeldByEngine empty with %d leases kept", len(kept))
		}

		fx.fault.down.Store(true)
		for _, h := range kept {
			<-h.Done()
		}
		same("after fencing")
		time.Sleep(time.Until(fx.fault.session().Expires) + 100*time.Millisecond)
		fx.fault.down.Store(false)
		poll.Eventually(t, 5*time.Second, "session confirmed again", func() bool { return m.Confirmed(pool) })
		same(fmt.Sprintf("after the session expired (%d expiries)", m.Stats().Counters.ExpiredSessions))
		for _, h := range kept {
			_ = h.Release(ledger.Usage{})
		}
		same("after releasing everything")
		if got := m.HeldByEngine(pool); len(got) != 0 {
			t.Errorf("HeldByEngine = %v with nothing held, want empty", got)
		}
	})
}

func TestAcquireRejectionCounted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		m := newManager(t, fx.fastConfig())
		_, err := m.Acquire(ctxT(t, 5*time.Second), request(5000))
		rej := ledger.AsRejection(err)
		if rej == nil || rej.Reason != ledger.ReasonTooLarge {
			t.Fatalf("Acquire(5000) = %v, want a too_large rejection", err)
		}
		if got := m.Stats().Counters.Rejections[string(ledger.ReasonTooLarge)]; got != 1 {
			t.Errorf("rejections[too_large] = %d, want 1", got)
		}
		if _, err := m.Acquire(ctxT(t, 5*time.Second), ledger.AcquireRequest{Pool: "other"}); !errors.Is(err, lease.ErrUnknownPool) {
			t.Errorf("Acquire in an unmanaged pool = %v, want ErrUnknownPool", err)
		}
	})
}

// A reply lost after the ledger granted is retried with the same request
// id and replayed: one reservation, not two.
func TestAcquireRetriesLostReplyOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		m := newManager(t, fx.fastConfig())
		fx.fault.dropAcquire.Store(1)
		h := acquire(t, m, 100)
		ls := ledgerStats(t, fx.fault)
		if ls.Leases != 1 || ls.Engines[0].ReservedKV != 100 {
			t.Errorf("ledger: leases=%d reserved kv=%d, want 1 and 100", ls.Leases, ls.Engines[0].ReservedKV)
		}
		c := m.Stats().Counters
		if c.AcquireRetries != 1 || c.Replays != 1 || c.Grants != 1 {
			t.Errorf("counters retries=%d replays=%d grants=%d, want 1, 1, 1", c.AcquireRetries, c.Replays, c.Grants)
		}
		if err := h.Release(ledger.Usage{}); err != nil {
			t.Fatalf("Release: %v", err)
		}
		wantLedgerLeases(t, fx, "after release", 0)
	})
}

// An Acquire whose first send was held in the network and whose retry was
// refused still leaves no reservation behind once the held send lands: a
// refusal of one attempt says nothing of an earlier one still on its way
// (the partition chaos scenario: a router's bytes held while its session
// expired, delivered after the session was renewed).
func TestHeldAcquireLandingAfterARefusalIsReleased(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		cfg := fx.fastConfig()
		cfg.LeaseTTL = time.Minute // the late grant must be released, not left to expire
		m := newManager(t, cfg)
		fx.fault.holdAcquire.Store(1)
		fx.fault.refuseAcquire.Store(1)
		if _, err := m.Acquire(ctxT(t, 5*time.Second), request(100)); !errors.Is(err, ledger.ErrNoSession) {
			t.Fatalf("Acquire = %v, want the retry's ErrNoSession", err)
		}
		for i, err := range fx.fault.deliverHeld(ctxT(t, 5*time.Second)) {
			if err != nil {
				t.Fatalf("held Acquire %d landing: %v, want a grant", i, err)
			}
		}
		if got := ledgerStats(t, fx.fault).Leases; got != 1 {
			t.Fatalf("ledger leases once the held send landed = %d, want 1", got)
		}
		poll.Eventually(t, 10*time.Second, "late grant released well before its lease TTL", func() bool {
			return ledgerStats(t, fx.fault).Leases == 0
		})
	})
}

// An Acquire abandoned with its outcome unknown (every reply lost) leaves
// no reservation behind: the manager finds the grant by request id and
// releases it in the background.
func TestAbandonedAcquireIsReleased(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		m := newManager(t, fx.fastConfig())
		fx.fault.dropAcquire.Store(3) // AcquireAttempts defaults to 3
		if _, err := m.Acquire(ctxT(t, 5*time.Second), request(100)); !errors.Is(err, errUnreachable) {
			t.Fatalf("Acquire = %v, want the transport error", err)
		}
		if got := ledgerStats(t, fx.fault).Leases; got != 1 {
			t.Fatalf("ledger leases after three lost replies = %d, want 1 (replayed, not tripled)", got)
		}
		poll.Eventually(t, 5*time.Second, "abandoned grant released", func() bool {
			return ledgerStats(t, fx.fault).Leases == 0
		})
		if c := m.Stats().Counters; c.Rejections[lease.RejectError] != 1 || c.AcquireRetries != 2 {
			t.Errorf("rejections[error]=%d retries=%d, want 1 and 2", c.Rejections[lease.RejectError], c.AcquireRetries)
		}
	})
}
