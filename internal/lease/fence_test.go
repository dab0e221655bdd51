package lease_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/holderkey"
	"github.com/leasehold/leasehold/internal/testutil/poll"
	"github.com/leasehold/leasehold/internal/testutil/syncbuf"
)

// When the ledger becomes unreachable the router fences itself before
// its session can expire in the ledger, refuses new grants without
// calling the ledger, and recovers once the ledger answers again.
func TestSelfFenceWhenLedgerUnreachable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		cfg := fx.fastConfig()
		cfg.HolderKey = holderkey.New()
		m := newManager(t, cfg)
		h := acquire(t, m, 100)
		oldHolder := h.Lease().Holder

		fx.fault.down.Store(true)
		select {
		case <-h.Done():
		case <-time.After(3 * cfg.SessionTTL):
			t.Fatal("Done not closed while the ledger is unreachable")
		}
		fencedAt := time.Now()
		st := m.Stats()
		if limit := st.Pools[0].ConfirmedAt.Add(cfg.SessionTTL); !fencedAt.Before(limit) {
			t.Errorf("fenced at %s, not before last confirmed send + SessionTTL %s", fencedAt, limit)
		}
		if exp := fx.fault.session().Expires; !fencedAt.Before(exp) {
			t.Errorf("fenced at %s, not before the ledger's session expiry %s", fencedAt, exp)
		}
		if !errors.Is(h.Err(), lease.ErrFenced) {
			t.Errorf("Err = %v, want ErrFenced", h.Err())
		}
		if st.Pools[0].Confirmed || st.Counters.Fences != 1 || st.Counters.FencedLeases != 1 || st.Fenced != 1 {
			t.Errorf("stats after fence: confirmed=%v fences=%d fenced leases=%d fenced rows=%d, want false, 1, 1, 1",
				st.Pools[0].Confirmed, st.Counters.Fences, st.Counters.FencedLeases, st.Fenced)
		}

		before := fx.fault.acquires.Load()
		if _, err := m.Acquire(ctxT(t, 5*time.Second), request(100)); !errors.Is(err, lease.ErrFenced) {
			t.Errorf("Acquire while fenced = %v, want ErrFenced", err)
		}
		if got := fx.fault.acquires.Load(); got != before {
			t.Errorf("Acquire while fenced reached the ledger (%d calls)", got-before)
		}
		if got := m.Stats().Counters.Rejections[lease.RejectFenced]; got != 1 {
			t.Errorf("rejections[fenced] = %d, want 1", got)
		}

		// Stay away until the ledger has expired the session.
		time.Sleep(time.Until(fx.fault.session().Expires) + 100*time.Millisecond)
		fx.fault.down.Store(false)
		poll.Eventually(t, 5*time.Second, "session confirmed again", func() bool { return m.Confirmed(pool) })

		h2 := acquire(t, m, 100) // after recovery
		st = m.Stats()
		if st.Counters.ExpiredSessions == 1 && h2.Lease().Holder == oldHolder {
			t.Errorf("holder %s reused after its session expired", oldHolder)
		}
		for _, h := range []ledger.HolderID{oldHolder, h2.Lease().Holder} {
			if name, err := holderkey.Verify(h, cfg.HolderKey); err != nil || name != cfg.HolderName {
				t.Errorf("holder %s: Verify = %q, %v; want it derived from Config.HolderKey under %q", h, name, err, cfg.HolderName)
			}
		}
		if st.Counters.Recoveries+st.Counters.ExpiredSessions == 0 {
			t.Errorf("neither a recovery nor a new incarnation was counted: %+v", st.Counters)
		}
		if err := h.Release(ledger.Usage{}); err != nil {
			t.Errorf("Release of the fenced lease: %v", err)
		}
		if err := h2.Release(ledger.Usage{}); err != nil {
			t.Errorf("Release: %v", err)
		}
		if got := m.Stats().Held; got != 0 {
			t.Errorf("held after releases = %d, want 0", got)
		}
		poll.Eventually(t, 5*time.Second, "ledger empty", func() bool { return ledgerStats(t, fx.fault).Leases == 0 })
	})
}

// Until the first KeepAlive succeeds nothing is admitted.
func TestFailClosedBeforeFirstKeepAlive(t *testing.T) {
	fx := newFixture(t, backends()[0])
	fx.fault.down.Store(true)
	m, err := lease.New(fx.fastConfig())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer m.Close(context.Background())
	if err := m.WaitReady(ctxT(t, 300*time.Millisecond)); !errors.Is(err, lease.ErrNotReady) {
		t.Errorf("WaitReady = %v, want ErrNotReady", err)
	}
	if _, err := m.Acquire(ctxT(t, time.Second), request(1)); !errors.Is(err, lease.ErrFenced) {
		t.Errorf("Acquire = %v, want ErrFenced", err)
	}
	if got := fx.fault.acquires.Load(); got != 0 {
		t.Errorf("%d Acquire calls reached the ledger, want 0", got)
	}
	fx.fault.down.Store(false)
	if err := m.WaitReady(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("WaitReady after the ledger came back: %v", err)
	}
	if got := m.Stats().Counters.Fences; got != 0 {
		t.Errorf("fences = %d, want 0 (never confirmed is not a fence)", got)
	}
}

// A failing keepalive is logged once per change of error, not on every
// retry: an operator sees why the pool is fenced or unready (here the
// ledger is unreachable) without a line a second.
func TestKeepAliveFailureLoggedOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		var buf syncbuf.Buffer
		cfg := fx.fastConfig()
		cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
		m := newManager(t, cfg)
		fx.fault.down.Store(true)
		poll.Eventually(t, 5*time.Second, "four failed keepalives", func() bool { return m.Stats().Counters.KeepAliveFails >= 4 })
		fx.fault.down.Store(false)
		if got := strings.Count(buf.String(), "keepalive failed"); got != 1 {
			t.Errorf("%d keepalive-failure lines for one unchanged error over %d failures, want 1:\n%s",
				got, m.Stats().Counters.KeepAliveFails, buf.String())
		}
		if !strings.Contains(buf.String(), "unreachable") {
			t.Errorf("the line does not say why:\n%s", buf.String())
		}
	})
}
