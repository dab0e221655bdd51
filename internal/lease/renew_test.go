package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/poll"
)

// After the ledger loses its state (memory: a fresh ledger; Redis:
// FLUSHALL) the manager reconfigures the pool and re-asserts what it holds.
func TestLedgerLossReassertsHeldLeases(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		cfg := fx.fastConfig()
		cfg.LeaseTTL, cfg.RenewInterval = 30*time.Second, time.Second // no renewal in the way
		m := newManager(t, cfg)
		held := acquireAll(t, m, 100, 200, 300)
		epoch := m.Stats().Pools[0].Epoch

		fx.wipe(t)
		poll.Eventually(t, 5*time.Second, "leases re-asserted", func() bool { return m.Stats().Reasserted == 3 })

		st := m.Stats()
		if st.Pools[0].Epoch == epoch {
			t.Errorf("epoch still %d after the ledger lost its state", epoch)
		}
		if st.Counters.EpochChanges != 1 || st.Counters.Reasserts != 3 || st.Counters.Reconfigures < 1 {
			t.Errorf("counters epoch changes=%d reasserts=%d reconfigures=%d, want 1, 3, >=1",
				st.Counters.EpochChanges, st.Counters.Reasserts, st.Counters.Reconfigures)
		}
		ls := ledgerStats(t, fx.fault)
		if ls.Leases != 3 || ls.Counters[ledger.CounterReasserts] != 3 || ls.Engines[0].ReservedKV != 600 {
			t.Errorf("ledger: leases=%d reasserts=%d reserved kv=%d, want 3, 3, 600",
				ls.Leases, ls.Counters[ledger.CounterReasserts], ls.Engines[0].ReservedKV)
		}
		for _, h := range held {
			if err := h.Err(); err != nil {
				t.Errorf("lease %s: Err = %v, want usable", h.Lease().ID, err)
			}
			if !h.Lease().Reasserted {
				t.Errorf("lease %s not flagged reasserted", h.Lease().ID)
			}
			if err := h.Release(ledger.Usage{}); err != nil {
				t.Errorf("Release: %v", err)
			}
		}
		wantLedgerLeases(t, fx, "after release", 0)
	})
}

// A renewal that finds the lease gone while the session is live (a
// failover that lost the write) re-asserts it.
func TestRenewReassertsLostLease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		m := newManager(t, fx.fastConfig())
		h := acquire(t, m, 100)
		// The ledger loses the lease behind the manager's back.
		if _, err := fx.fault.Release(ctxT(t, 5*time.Second), h.Lease().Ref(), ledger.Usage{}); err != nil {
			t.Fatalf("ledger Release: %v", err)
		}
		poll.Eventually(t, 5*time.Second, "lease re-asserted", func() bool { return h.Lease().Reasserted })
		if err := h.Err(); err != nil {
			t.Errorf("Err = %v, want usable", err)
		}
		leases, err := fx.fault.List(ctxT(t, 5*time.Second), ledger.Filter{Pool: pool})
		if err != nil || len(leases) != 1 || leases[0].ID != h.Lease().ID || !leases[0].Reasserted {
			t.Errorf("ledger List = %+v, %v; want the re-asserted lease %s", leases, err, h.Lease().ID)
		}
		if err := h.Release(ledger.Usage{}); err != nil {
			t.Errorf("Release: %v", err)
		}
	})
}

// Background renewal keeps a lease alive well past LeaseTTL.
func TestRenewKeepsLeasePastTTL(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		cfg := fx.fastConfig()
		m := newManager(t, cfg)
		h := acquire(t, m, 100)
		first := h.Lease().Deadline
		time.Sleep(5 * cfg.LeaseTTL / 2)
		if err := h.Err(); err != nil {
			t.Fatalf("lease ended after %s: %v", 5*cfg.LeaseTTL/2, err)
		}
		leases, err := fx.fault.List(ctxT(t, 5*time.Second), ledger.Filter{Pool: pool})
		if err != nil || len(leases) != 1 || !leases[0].Deadline.After(time.Now()) {
			t.Fatalf("ledger List = %+v, %v; want the lease with a future deadline", leases, err)
		}
		if !h.Lease().Deadline.After(first) {
			t.Errorf("deadline %s not extended past %s", h.Lease().Deadline, first)
		}
		if got := m.Stats().Counters.Renewals; got < 2 {
			t.Errorf("renewals = %d, want >= 2", got)
		}
		if err := h.Release(ledger.Usage{}); err != nil {
			t.Errorf("Release: %v", err)
		}
	})
}

func TestCloseReleasesEverything(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		m, err := lease.New(fx.fastConfig())
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if err := m.WaitReady(ctxT(t, 5*time.Second)); err != nil {
			t.Fatalf("WaitReady: %v", err)
		}
		held := acquireAll(t, m, 50, 50, 50, 50, 50)
		if err := m.Close(ctxT(t, 5*time.Second)); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := m.Close(context.Background()); err != nil {
			t.Errorf("second Close: %v", err)
		}
		for _, h := range held {
			if !errors.Is(h.Err(), lease.ErrClosed) {
				t.Errorf("Err = %v, want ErrClosed", h.Err())
			}
			if err := h.Release(ledger.Usage{}); err != nil {
				t.Errorf("Release after Close: %v", err)
			}
		}
		if st := m.Stats(); st.Held != 0 || st.Counters.Releases != 5 {
			t.Errorf("after Close: held=%d releases=%d, want 0 and 5", st.Held, st.Counters.Releases)
		}
		wantLedgerLeases(t, fx, "after Close", 0)
		if _, err := m.Acquire(ctxT(t, time.Second), request(1)); !errors.Is(err, lease.ErrClosed) {
			t.Errorf("Acquire after Close = %v, want ErrClosed", err)
		}
	})
}
