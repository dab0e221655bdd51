package waitq

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/internal/ledger"
)

// admitHarness runs Admit with a fake clock, counting tries and recording
// the waiters' entries and exits.
type admitHarness struct {
	q       *Queue
	clock   *clockwork.FakeClock
	entered chan struct{}
	left    chan string
}

func newAdmitHarness(timeout time.Duration, waits func(*ledger.Rejection) bool) *admitHarness {
	return newAdmitHarnessDepth(10, timeout, waits)
}

func newAdmitHarnessDepth(depth int, timeout time.Duration, waits func(*ledger.Rejection) bool) *admitHarness {
	h := &admitHarness{clock: clockwork.NewFakeClock(), entered: make(chan struct{}, 10), left: make(chan string, 10)}
	h.q = New(Config{Depth: depth, Timeout: timeout, Clock: h.clock, Waits: waits,
		OnEnter: func() { h.entered <- struct{}{} },
		OnLeave: func(outcome string, _ time.Duration) { h.left <- outcome }})
	return h
}

// admit runs Admit for k in a goroutine: try answers with each of answers
// in turn (nil: granted), the last one from then on.
func (h *admitHarness) admit(ctx context.Context, k Key, stopC chan struct{}, tries *atomic.Int32, answers ...error) chan error {
	done := make(chan error, 1)
	go func() {
		done <- h.q.Admit(ctx, k, stopC, func() (time.Time, error) { return time.Time{}, nil }, func() error {
			n := int(tries.Add(1))
			return answers[min(n, len(answers))-1]
		})
	}()
	return done
}

func TestAdmit(t *testing.T) {
	ctx := context.Background()
	quota := &ledger.Rejection{Reason: ledger.ReasonTenantKV, RetryAfter: time.Second}
	notQuota := func(r *ledger.Rejection) bool { return !r.Reason.Quota() }
	broken := errors.New("ledger down")

	t.Run("granted at once, no wait", func(t *testing.T) {
		h := newAdmitHarness(time.Minute, nil)
		var tries atomic.Int32
		if err := <-h.admit(ctx, Key{Tenant: "a"}, nil, &tries, nil); err != nil || tries.Load() != 1 || len(h.entered) != 0 {
			t.Errorf("Admit = %v after %d tries, %d entries; want nil, 1, 0", err, tries.Load(), len(h.entered))
		}
	})
	for _, c := range []struct {
		name    string
		depth   int
		timeout time.Duration
		answer  error
	}{
		{"an error is not waited", 10, time.Minute, broken},
		{"a refusal Waits refuses is not waited", 10, time.Minute, quota},
		{"no queue timeout: nothing waits", 10, 0, slots},
		{"depth 0: nothing waits, the refusal is the answer", 0, time.Minute, slots},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newAdmitHarnessDepth(c.depth, c.timeout, notQuota)
			var tries atomic.Int32
			if err := <-h.admit(ctx, Key{Tenant: "a"}, nil, &tries, c.answer); !errors.Is(err, c.answer) || len(h.entered) != 0 {
				t.Errorf("Admit = %v with %d entries, want %v at once", err, len(h.entered), c.answer)
			}
		})
	}
	t.Run("refused, then granted at its turn", func(t *testing.T) {
		h := newAdmitHarness(time.Minute, notQuota)
		var tries atomic.Int32
		done := h.admit(ctx, Key{Tenant: "a"}, nil, &tries, slots, nil)
		<-h.entered
		h.q.Notify() // a release
		if err := <-done; err != nil || tries.Load() != 2 {
			t.Fatalf("Admit = %v after %d tries, want nil after 2", err, tries.Load())
		}
		if got := <-h.left; got != OutcomeGranted || h.q.Len() != 0 {
			t.Errorf("left %q, queue %d; want granted, empty", got, h.q.Len())
		}
	})
	t.Run("a newcomer behind a waiter waits for its turn", func(t *testing.T) {
		h := newAdmitHarness(time.Minute, nil)
		old, err := h.q.Enter(Key{Tenant: "a"}, slots)
		if err != nil {
			t.Fatal(err)
		}
		var tries atomic.Int32
		done := h.admit(ctx, Key{Tenant: "b"}, nil, &tries, nil)
		// It enters without trying, hands the turn to the older waiter and
		// awaits (both deadlines and its retry timer are set).
		<-h.entered
		if err := h.clock.BlockUntilContext(ctx, 3); err != nil {
			t.Fatal(err)
		}
		if !turned(old) || tries.Load() != 0 {
			t.Fatalf("the older waiter has no turn (or the newcomer tried %d times)", tries.Load())
		}
		h.q.Missed(old, slots) // the older waiter was refused: its place is kept
		h.q.Notify()
		if !turned(old) {
			t.Fatal("the turn after a miss did not go back to the older waiter")
		}
		h.q.Leave(old, true)
		h.q.Notify() // the older waiter's release
		if err := <-done; err != nil || tries.Load() != 1 {
			t.Errorf("newcomer's Admit = %v after %d tries, want nil after 1", err, tries.Load())
		}
	})
	t.Run("a higher class does not wait behind a lower one", func(t *testing.T) {
		h := newAdmitHarness(time.Minute, nil)
		low, _ := h.q.Enter(Key{Tenant: "a", Rank: 1}, slots)
		defer h.q.Leave(low, false)
		var tries atomic.Int32
		if err := <-h.admit(ctx, Key{Tenant: "b", Rank: 0}, nil, &tries, nil); err != nil || tries.Load() != 1 || len(h.entered) != 0 {
			t.Errorf("Admit = %v after %d tries, %d entries; want nil at once", err, tries.Load(), len(h.entered))
		}
	})
	t.Run("the queue timeout answers the latest refusal", func(t *testing.T) {
		h := newAdmitHarness(time.Minute, nil)
		var tries atomic.Int32
		done := h.admit(ctx, Key{Tenant: "a"}, nil, &tries, slots)
		<-h.entered
		if err := h.clock.BlockUntilContext(ctx, 2); err != nil { // its deadline and retry timer
			t.Fatal(err)
		}
		h.clock.Advance(time.Minute)
		err := <-done
		if !errors.Is(err, slots) || <-h.left != OutcomeRejected {
			t.Errorf("Admit = %v, want the refusal %v, left rejected", err, slots)
		}
	})
	t.Run("stopped", func(t *testing.T) {
		h := newAdmitHarness(time.Minute, nil)
		stop := make(chan struct{})
		var tries atomic.Int32
		done := h.admit(ctx, Key{Tenant: "a"}, stop, &tries, slots)
		<-h.entered
		close(stop)
		if err := <-done; !errors.Is(err, ErrStopped) || <-h.left != OutcomeCancelled {
			t.Errorf("Admit = %v, want ErrStopped, left cancelled", err)
		}
	})
	t.Run("a full queue refuses with queue_full", func(t *testing.T) {
		h := newAdmitHarness(time.Minute, nil)
		for range 10 {
			if _, err := h.q.Enter(Key{Tenant: "x", Rank: 1}, slots); err != nil {
				t.Fatal(err)
			}
		}
		var tries atomic.Int32
		err := <-h.admit(ctx, Key{Tenant: "a", Rank: 1}, nil, &tries, nil)
		if rej := ledger.AsRejection(err); !errors.Is(err, ErrFull) || rej == nil || rej.Reason != ReasonQueueFull || tries.Load() != 0 {
			t.Errorf("Admit = %v after %d tries, want ErrFull with queue_full and no try", err, tries.Load())
		}
	})
}
