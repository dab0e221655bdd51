package ledgertest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

func (s *suite) testSessions(t *testing.T) {
	t.Run("AcquireWithoutSession", s.testNoSession)
	t.Run("KeepAliveExtends", s.testKeepAliveExtends)
	t.Run("ExpiryReleasesLeases", s.testSessionExpiry)
	t.Run("KeepAliveOnDeadSession", s.testKeepAliveDead)
	t.Run("LiveHolders", s.testLiveHolders)
	t.Run("BoundedSweep", s.testBoundedSweep)
}

func (s *suite) testNoSession(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4)), noWindow)
	before := snapshot(f.stats())
	_, err := f.l.Acquire(f.ctx, f.req("ghost", 1, 1, e1))
	wantErr(t, "Acquire without KeepAlive", err, ledger.ErrNoSession)
	if got := snapshot(f.stats()); got.String() != before.String() {
		t.Errorf("Acquire without a session changed the pool:\n got %s\nwant %s", got, before)
	}
}

func (s *suite) testKeepAliveExtends(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4)), noWindow)
	before := f.ledgerNow()
	short := f.ttl(300 * time.Millisecond)
	s1 := f.keepAlive("hx", short)
	if s1.Pool != pool || s1.Holder != "hx" {
		t.Errorf("KeepAlive session = %s/%s, want %s/hx", s1.Pool, s1.Holder, pool)
	}
	if s1.Expires.Before(before.Add(short - time.Millisecond)) {
		t.Errorf("KeepAlive(%s) Expires = %s, want at least %s", short, s1.Expires.Format(time.StampMilli), before.Add(short).Format(time.StampMilli))
	}
	s2 := f.keepAlive("hx", short+3*time.Second+f.slack())
	if !s2.Expires.After(s1.Expires) {
		t.Errorf("second KeepAlive(3s) Expires = %s, want after the first %s", s2.Expires.Format(time.StampMilli), s1.Expires.Format(time.StampMilli))
	}
	f.waitPast(s1.Expires)
	f.sweepAll()
	f.acquire(f.req("hx", 1, 1, e1), e1)
}

func (s *suite) testSessionExpiry(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4)), noWindow)
	sess := f.keepAlive("hx", f.ttl(300*time.Millisecond))
	f.acquire(f.req("hx", 600, 2, e1), e1)
	f.acquire(f.req("hx", 600, 2, e2), e2)
	kept := f.acquire(f.req(h1, 400, 1, e1), e1)
	f.waitPast(sess.Expires)
	sw := f.sweepAll()
	switch {
	case !f.bg && sw.Revoked != 2:
		t.Errorf("Sweep after session expiry Revoked = %d, want 2 (the dead holder's leases)", sw.Revoked)
	case f.bg && sw.Revoked > 2:
		t.Errorf("Sweep after session expiry Revoked = %d, want at most 2 (the dead holder's leases)", sw.Revoked)
	}
	if !f.bg && sw.Holders < 1 {
		t.Errorf("Sweep after session expiry Holders = %d, want at least 1", sw.Holders)
	}
	if sw.Expired != 0 {
		t.Errorf("Sweep after session expiry Expired = %d, want 0 (no deadline passed)", sw.Expired)
	}
	f.wantReserved(e1, 400, 1, 1)
	f.wantReserved(e2, 0, 0, 0)
	ls := f.list(ledger.Filter{Pool: pool})
	if len(ls) != 1 || ls[0].ID != kept.ID {
		t.Errorf("List after session expiry = %d leases, want only %s of the live holder", len(ls), kept.ID)
	}
	f.wantCounters("", map[string]int64{ledger.CounterRevoked: 2})
	// The freed capacity can be granted again.
	f.acquire(f.req(h2, 1000, 4, e2), e2)
	// Swept, by whichever sweeper: the holder id may start a fresh session.
	f.keepAlive("hx", longTTL)
}

func (s *suite) testKeepAliveDead(t *testing.T) {
	// SweepBatch 2 and six leases: no single call can finish the dead
	// session, so it stays dead-but-unswept across the next calls.
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 10)), ledger.Options{RecoveryWindow: -1, SweepBatch: 2})
	sess := f.keepAlive("hx", f.ttl(300*time.Millisecond))
	for range 6 {
		f.acquire(f.req("hx", 10, 1, e1), e1)
	}
	f.waitPast(sess.Expires)
	_, err := f.l.KeepAlive(f.ctx, pool, "hx", time.Minute)
	switch {
	case f.bg && err == nil:
		// A background sweeper got there first: a fresh session may start
		// only once every lease of the dead one is gone.
		if ls := f.list(ledger.Filter{Pool: pool, Holder: "hx"}); len(ls) != 0 {
			t.Errorf("KeepAlive on a dead session started a fresh one while %d of its leases remain", len(ls))
		}
		f.wantReserved(e1, 0, 0, 0)
	default:
		wantErr(t, "KeepAlive on a dead, unswept session", err, ledger.ErrSessionExpired)
		_, err = f.l.Acquire(f.ctx, f.req("hx", 1, 1, e1))
		if !errors.Is(err, ledger.ErrSessionExpired) && !errors.Is(err, ledger.ErrNoSession) {
			t.Errorf("Acquire by a dead holder error = %v, want ErrSessionExpired or ErrNoSession", err)
		}
	}
	f.sweepAll()
	f.wantReserved(e1, 0, 0, 0)
	f.wantCounters("the dead holder's leases", map[string]int64{ledger.CounterRevoked: 6})
	// Swept: the holder id may start a fresh session.
	f.keepAlive("hx", time.Minute)
	f.acquire(f.req("hx", 1, 1, e1), e1)
}

func (s *suite) testLiveHolders(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4)), noWindow) // h1 and h2 live
	if got := f.keepAlive(h1, longTTL).LiveHolders; got != 2 {
		t.Errorf("KeepAlive LiveHolders = %d, want 2", got)
	}
	sess := f.keepAlive("hx", f.ttl(300*time.Millisecond))
	if sess.LiveHolders != 3 {
		t.Errorf("KeepAlive(hx) LiveHolders = %d, want 3", sess.LiveHolders)
	}
	if got := f.stats().LiveHolders; got != 3 {
		t.Errorf("Stats LiveHolders = %d, want 3", got)
	}
	f.waitPast(sess.Expires)
	// A dead session is not live, swept or not.
	if got := f.stats().LiveHolders; got != 2 {
		t.Errorf("Stats LiveHolders after hx expired = %d, want 2", got)
	}
	if got := f.keepAlive(h2, longTTL).LiveHolders; got != 2 {
		t.Errorf("KeepAlive LiveHolders after hx expired = %d, want 2", got)
	}
}

func (s *suite) testBoundedSweep(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 20)), noWindow)
	var last time.Time
	for i := range 10 {
		r := f.shortReq(500*time.Millisecond, h1, 10, 1, e1)
		r.RequestID = ledger.RequestID(fmt.Sprintf("exp-%d", i))
		last = f.acquire(r, e1).Deadline
	}
	f.waitPast(last)
	left := len(f.list(ledger.Filter{Pool: pool}))
	swept := 0
	// Without background sweeping every Sweep(3) must make progress; with
	// it, a call may find its work taken, so the loop is bounded instead.
	for i := 0; left > 0; i++ {
		if i == 100 {
			t.Fatalf("after 100 calls of Sweep(3) %d expired leases are left", left)
		}
		sw, err := f.l.Sweep(f.ctx, pool, 3)
		if err != nil {
			t.Fatalf("Sweep(3) error = %v, want nil", err)
		}
		n := sw.Expired + sw.Revoked
		if n > 3 || (!f.bg && n < 1) {
			t.Fatalf("Sweep(3) with %d expired leases left removed %d (%+v), want 1..3", left, n, sw)
		}
		now := len(f.list(ledger.Filter{Pool: pool}))
		switch {
		case !f.bg && now != left-n:
			t.Fatalf("Sweep(3) reported %d removed but List went from %d to %d", n, left, now)
		case f.bg && now > left-n:
			t.Fatalf("Sweep(3) reported %d removed but List went from %d to %d, want at most %d", n, left, now, left-n)
		}
		left, swept = now, swept+n
	}
	if swept == 0 && !f.bg {
		t.Errorf("Sweep removed no lease, want every expired lease removed by Sweep")
	}
	f.wantReserved(e1, 0, 0, 0)
	f.wantCounters("", map[string]int64{ledger.CounterExpired: 10})
}
