package lease_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/memory"
	"github.com/leasehold/leasehold/internal/testutil/poll"
)

// TestRecoveringFollowsTheWindow: Recovering is what is left of the
// ledger's recovery window, as its confirmed keepalive reported it: above
// 0 while every Acquire is refused with ReasonRecovering, 0 once the
// window ends, and then Acquire is granted (the local end is never before
// the ledger's).
func TestRecoveringFollowsTheWindow(t *testing.T) {
	const window = 2 * time.Second
	l := memory.New(ledger.Options{RecoveryWindow: window}, nil)
	f := &fixture{fault: newFault(l), wipe: func(*testing.T) {}}
	t.Cleanup(func() { _ = f.fault.Close() })
	if _, err := f.fault.Configure(ctxT(t, 5*time.Second), spec()); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	m := newManager(t, f.fastConfig())
	if d := m.Recovering(pool); d <= 0 || d > window {
		t.Fatalf("Recovering right after the first keepalive = %s, want in (0, %s]", d, window)
	}
	if got := m.Recovering("no-such-pool"); got != 0 {
		t.Errorf("Recovering(a pool not held) = %s, want 0", got)
	}
	_, err := m.Acquire(ctxT(t, 5*time.Second), request(10))
	if rej := ledger.AsRejection(err); rej == nil || rej.Reason != ledger.ReasonRecovering {
		t.Fatalf("Acquire while Recovering > 0: %v, want %s", err, ledger.ReasonRecovering)
	}
	poll.Eventually(t, 3*window, "Recovering 0", func() bool { return m.Recovering(pool) == 0 })
	h, err := m.Acquire(ctxT(t, 5*time.Second), request(10))
	if err != nil {
		t.Fatalf("Acquire once Recovering is 0: %v, want granted", err)
	}
	if err := h.Release(ledger.Usage{}); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// TestRecoveringEndsWhenAnEngineRecovers: once an observation taken a
// dispatch grace after the epoch began shows an engine (it takes grants
// again), the next keepalive reports it and Recovering is 0 though the
// window is still open; Acquire on that engine is granted.
func TestRecoveringEndsWhenAnEngineRecovers(t *testing.T) {
	const window, grace = time.Minute, 100 * time.Millisecond
	l := memory.New(ledger.Options{RecoveryWindow: window, ConfirmGrace: grace}, nil)
	f := &fixture{fault: newFault(l), wipe: func(*testing.T) {}}
	t.Cleanup(func() { _ = f.fault.Close() })
	if _, err := f.fault.Configure(ctxT(t, 5*time.Second), spec()); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	m := newManager(t, f.fastConfig())
	if d := m.Recovering(pool); d <= 0 {
		t.Fatalf("Recovering right after the first keepalive = %s, want > 0 (no engine observed)", d)
	}
	eng := spec().Engines[0].ID
	time.Sleep(grace + 10*time.Millisecond)
	obs := ledger.Observation{Pool: pool, Engine: eng, ObservedAt: time.Now()}
	if r, err := f.fault.Observe(ctxT(t, 5*time.Second), obs); err != nil || !r.Applied {
		t.Fatalf("Observe(%s) = %+v, %v; want applied", eng, r, err)
	}
	poll.Eventually(t, 5*time.Second, "Recovering 0 with an engine recovered", func() bool { return m.Recovering(pool) == 0 })
	if s := f.fault.session(); s.Recovered != 1 || s.RecoveringUntil.IsZero() {
		t.Errorf("last keepalive = recovered %d, window until %s; want 1 engine recovered in the open window", s.Recovered, s.RecoveringUntil)
	}
	req := request(10)
	req.Candidates = []ledger.EngineID{eng}
	h, err := m.Acquire(ctxT(t, 5*time.Second), req)
	if err != nil {
		t.Fatalf("Acquire on the recovered engine: %v, want granted", err)
	}
	if err := h.Release(ledger.Usage{}); err != nil {
		t.Errorf("Release: %v", err)
	}
}
