package waitq

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/ledger"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var slots = &ledger.Rejection{Reason: ledger.ReasonEngineSlots, RetryAfter: 2 * time.Second}

func newQueue(depth int) *Queue {
	return New(Config{Depth: depth, Timeout: time.Hour, Clock: clockwork.NewFakeClock()})
}

func enter(t *testing.T, q *Queue, k Key) *Waiter {
	t.Helper()
	w, err := q.Enter(k, slots)
	if err != nil {
		t.Fatalf("Enter(%+v): %v", k, err)
	}
	return w
}

// turned takes w's turn if one was handed to it.
func turned(w *Waiter) bool {
	select {
	case <-w.turnC:
		return true
	default:
		return false
	}
}

// whoseTurn hands one turn and returns the waiter of ws that got it, -1
// when none did.
func whoseTurn(q *Queue, ws []*Waiter) int {
	q.Notify()
	got := -1
	for i, w := range ws {
		if turned(w) {
			if got >= 0 {
				panic("two waiters got one turn")
			}
			got = i
		}
	}
	return got
}

// Strict priority between classes; first come first served within a
// tenant; a waiter holding a turn takes no other, and one whose attempt
// missed keeps its place.
func TestOrder(t *testing.T) {
	q := newQueue(10)
	b1 := enter(t, q, Key{Tenant: "a", Rank: 1})
	b2 := enter(t, q, Key{Tenant: "a", Rank: 1})
	i1 := enter(t, q, Key{Tenant: "a", Rank: 0})
	ws := []*Waiter{b1, b2, i1}
	steps := []struct {
		do   func()
		want int
	}{
		{nil, 2},                            // the interactive waiter first, though it came last
		{nil, 0},                            // it holds its turn: the next class's oldest
		{nil, 1},                            // then the next in that tenant's line
		{nil, -1},                           // every waiter holds a turn
		{func() { q.Missed(b1, slots) }, 0}, // b1 missed: it is due again, before b2
		{func() { q.Leave(i1, true); q.Missed(b1, slots); q.Missed(b2, slots) }, 0},
	}
	for n, s := range steps {
		if s.do != nil {
			s.do()
		}
		if got := whoseTurn(q, ws); got != s.want {
			t.Fatalf("step %d: turn went to waiter %d, want %d", n, got, s.want)
		}
	}
}

// runFair keeps every tenant backlogged (a granted waiter is replaced by a
// new one of its tenant, and each tenant has backlog[t] waiters) and
// returns each tenant's share of grants over n turns.
func runFair(t *testing.T, weights map[ledger.TenantID]float64, backlog map[ledger.TenantID]int, n int) map[ledger.TenantID]float64 {
	t.Helper()
	q := newQueue(1000)
	var ws []*Waiter
	for tenant, b := range backlog {
		for range b {
			ws = append(ws, enter(t, q, Key{Tenant: tenant, Weight: weights[tenant]}))
		}
	}
	grants := map[ledger.TenantID]int{}
	for range n {
		i := whoseTurn(q, ws)
		if i < 0 {
			t.Fatal("no waiter got the turn")
		}
		w := ws[i]
		q.Leave(w, true)
		grants[w.key.Tenant]++
		ws[i] = enter(t, q, w.key)
	}
	share := map[ledger.TenantID]float64{}
	for tenant, g := range grants {
		share[tenant] = float64(g) / float64(n)
	}
	return share
}

// Weighted fair sharing within a class: grants follow the weights, not
// the backlogs (FIFO would give the light tenant 1/11 here).
func TestFairShare(t *testing.T) {
	cases := []struct {
		name    string
		weights map[ledger.TenantID]float64
		backlog map[ledger.TenantID]int
		want    map[ledger.TenantID]float64
	}{
		{"equal weights, 10x backlog", nil, map[ledger.TenantID]int{"heavy": 40, "light": 4},
			map[ledger.TenantID]float64{"heavy": 0.5, "light": 0.5}},
		{"weights 3:1", map[ledger.TenantID]float64{"a": 3, "b": 1}, map[ledger.TenantID]int{"a": 5, "b": 5},
			map[ledger.TenantID]float64{"a": 0.75, "b": 0.25}},
		{"three tenants", nil, map[ledger.TenantID]int{"a": 1, "b": 10, "c": 30},
			map[ledger.TenantID]float64{"a": 1. / 3, "b": 1. / 3, "c": 1. / 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := runFair(t, c.weights, c.backlog, 1200)
			for tenant, want := range c.want {
				if d := got[tenant] - want; d > 0.01 || d < -0.01 {
					t.Errorf("tenant %s: share %.3f, want %.3f", tenant, got[tenant], want)
				}
			}
		})
	}
}

// Turns held count against a tenant: with two turns out at once they go to
// different tenants, whatever the backlogs.
func TestTurnsInFlightAreCharged(t *testing.T) {
	q := newQueue(10)
	a1 := enter(t, q, Key{Tenant: "a"})
	a2 := enter(t, q, Key{Tenant: "a"})
	b1 := enter(t, q, Key{Tenant: "b"})
	ws := []*Waiter{a1, a2, b1}
	if got := whoseTurn(q, ws); got != 0 {
		t.Fatalf("first turn to %d, want the oldest (0)", got)
	}
	if got := whoseTurn(q, ws); got != 2 {
		t.Fatalf("second turn to %d, want tenant b's (2): a holds one already", got)
	}
}

// A tenant that stops waiting banks no credit: when it comes back it
// shares from then on, it does not take every turn until it catches up.
func TestIdleTenantBanksNoCredit(t *testing.T) {
	q := newQueue(100)
	var ws []*Waiter
	for range 3 {
		ws = append(ws, enter(t, q, Key{Tenant: "busy"}))
	}
	for range 50 { // busy alone: 50 grants
		i := whoseTurn(q, ws)
		q.Leave(ws[i], true)
		ws[i] = enter(t, q, Key{Tenant: "busy"})
	}
	ws = append(ws, enter(t, q, Key{Tenant: "back"}))
	counts := map[ledger.TenantID]int{}
	for range 10 {
		i := whoseTurn(q, ws)
		w := ws[i]
		counts[w.key.Tenant]++
		q.Leave(w, true)
		ws[i] = enter(t, q, w.key)
	}
	if counts["back"] < 4 || counts["back"] > 6 {
		t.Errorf("after busy's 50 grants alone, the returning tenant got %d of the next 10, want about 5", counts["back"])
	}
}

// The pool's bound and the tenant's; both refuse with ReasonQueueFull.
func TestBounds(t *testing.T) {
	q := newQueue(3)
	enter(t, q, Key{Tenant: "a", MaxQueued: 2})
	enter(t, q, Key{Tenant: "a", MaxQueued: 2})
	_, err := q.Enter(Key{Tenant: "a", MaxQueued: 2}, slots)
	if !errors.Is(err, ErrTenantFull) || errors.Is(err, ErrFull) {
		t.Fatalf("tenant a's third waiter: %v, want ErrTenantFull", err)
	}
	if rej := ledger.AsRejection(err); rej == nil || rej.Reason != ReasonQueueFull || rej.RetryAfter != slots.RetryAfter {
		t.Errorf("tenant bound refusal %+v, want ReasonQueueFull with the hint %s", rej, slots.RetryAfter)
	}
	enter(t, q, Key{Tenant: "b", Rank: 1}) // other tenants still enter
	_, err = q.Enter(Key{Tenant: "c"}, nil)
	if !errors.Is(err, ErrFull) {
		t.Fatalf("fourth waiter in a queue of depth 3: %v, want ErrFull", err)
	}
	if rej := ledger.AsRejection(err); rej == nil || rej.Reason != ReasonQueueFull || rej.RetryAfter != time.Second {
		t.Errorf("pool bound refusal without a hint %+v, want ReasonQueueFull, 1s", rej)
	}
	if q.Len() != 3 {
		t.Errorf("Len %d after refusals, want 3", q.Len())
	}
	got := map[string]int{}
	q.Queued(func(t ledger.TenantID, rank, n int) { got[fmt.Sprintf("%s/%d", t, rank)] = n })
	if len(got) != 2 || got["a/0"] != 2 || got["b/1"] != 1 {
		t.Errorf("Queued = %v, want a/0:2 b/1:1", got)
	}
	if zero := New(Config{}); zero.Len() != 0 {
		t.Error("empty queue not empty")
	} else if _, err := zero.Enter(Key{Tenant: "a"}, nil); !errors.Is(err, ErrFull) {
		t.Errorf("depth 0: %v, want ErrFull", err)
	}
}

// A waiter that leaves with a turn it did not take passes it on; one that
// left is never handed a turn; Busy sees only its class and those above.
func TestLeaveAndBusy(t *testing.T) {
	q := newQueue(10)
	if q.Busy(5) {
		t.Fatal("empty queue busy")
	}
	a := enter(t, q, Key{Tenant: "a", Rank: 1})
	b := enter(t, q, Key{Tenant: "b", Rank: 1})
	if !q.Busy(1) || !q.Busy(2) || q.Busy(0) {
		t.Errorf("Busy(0,1,2) = %v %v %v, want false true true", q.Busy(0), q.Busy(1), q.Busy(2))
	}
	q.Notify() // a's turn, not taken
	q.Leave(a, false)
	if !turned(b) {
		t.Fatal("the turn a left untaken did not pass to b")
	}
	q.Leave(b, false)
	if q.Len() != 0 || q.Busy(1) {
		t.Errorf("Len %d busy %v after everyone left", q.Len(), q.Busy(1))
	}
	q.Notify() // nobody: a no-op
}

// A waiter refused for its own tenant's quota is parked: the others get
// the turns; it retries on its own timer; a capacity refusal unparks it.
func TestParked(t *testing.T) {
	q := newQueue(10)
	a := enter(t, q, Key{Tenant: "a"})
	b := enter(t, q, Key{Tenant: "b"})
	ws := []*Waiter{a, b}
	if got := whoseTurn(q, ws); got != 0 {
		t.Fatalf("turn to %d, want a (0)", got)
	}
	q.Missed(a, &ledger.Rejection{Reason: ledger.ReasonTenantKV})
	if got := whoseTurn(q, ws); got != 1 {
		t.Fatalf("turn to %d after a was parked, want b (1)", got)
	}
	if got := whoseTurn(q, ws); got != -1 {
		t.Fatalf("turn to %d with a parked and b holding one, want none", got)
	}
	if !q.ownRetry(a) || q.ownRetry(b) {
		t.Error("a parked retries on its own timer; b does not")
	}
	q.Missed(a, slots)
	if got := whoseTurn(q, ws); got != 0 {
		t.Fatalf("turn to %d after a's capacity refusal, want a (0)", got)
	}
	if q.Last() != slots {
		t.Errorf("Last = %v, want the latest refusal", q.Last())
	}
	q.Leave(a, false)
	q.Leave(b, false)
}

// Await: a turn returns at once; the retry timer hands a turn to whoever
// is due (here the other waiter), not to itself; the queue timeout, ctx
// and stop end the wait.
func TestAwait(t *testing.T) {
	clock := clockwork.NewFakeClock()
	q := New(Config{Depth: 10, Timeout: time.Minute, Clock: clock})
	a := enter(t, q, Key{Tenant: "a"})
	b := enter(t, q, Key{Tenant: "b"})
	ctx := context.Background()

	q.Notify() // a's
	if err := q.Await(ctx, a, time.Second, time.Time{}, nil); err != nil {
		t.Fatalf("Await with a turn handed: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- q.Await(ctx, b, time.Second, time.Time{}, nil) }()
	if err := clock.BlockUntilContext(ctx, 3); err != nil { // a's and b's deadlines, b's retry timer
		t.Fatal(err)
	}
	clock.Advance(1600 * time.Millisecond) // past the retry timer: a turn, due to b (a holds one)
	if err := <-done; err != nil {
		t.Fatalf("b's Await after its retry timer: %v", err)
	}

	stop := make(chan struct{})
	cctx, cancel := context.WithCancel(ctx)
	q.Missed(a, slots)
	q.Missed(b, slots)
	for _, c := range []struct {
		name string
		ctx  context.Context
		end  func()
		want error
	}{
		{"cancelled", cctx, cancel, context.Canceled},
		{"stopped", ctx, func() { close(stop) }, ErrStopped},
	} {
		go func() { done <- q.Await(c.ctx, a, time.Hour, time.Time{}, stop) }()
		if err := clock.BlockUntilContext(ctx, 3); err != nil {
			t.Fatal(err)
		}
		c.end()
		if err := <-done; !errors.Is(err, c.want) {
			t.Errorf("%s: Await = %v, want %v", c.name, err, c.want)
		}
	}
	go func() { done <- q.Await(ctx, b, time.Hour, time.Time{}, nil) }()
	if err := clock.BlockUntilContext(ctx, 3); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	if err := <-done; !errors.Is(err, ErrTimeout) {
		t.Errorf("past the queue timeout: Await = %v, want ErrTimeout", err)
	}
	if d := q.Leave(b, false); d != time.Minute+1600*time.Millisecond {
		t.Errorf("b waited %s, want 1m1.6s", d)
	}
	q.Leave(a, false)
}

// Await returns when until (the class's TTFT objective) passes, so the
// router re-plans.
func TestAwaitUntil(t *testing.T) {
	clock := clockwork.NewFakeClock()
	q := New(Config{Depth: 10, Timeout: time.Minute, Clock: clock})
	a := enter(t, q, Key{Tenant: "a"})
	b := enter(t, q, Key{Tenant: "b"})
	q.Notify() // a holds the turn: b's timer cannot be its own turn
	done := make(chan error, 1)
	go func() {
		done <- q.Await(context.Background(), b, time.Hour, clock.Now().Add(300*time.Millisecond), nil)
	}()
	if err := clock.BlockUntilContext(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	clock.Advance(300 * time.Millisecond)
	if err := <-done; err != nil {
		t.Errorf("Await past until = %v, want nil (re-plan)", err)
	}
	q.Leave(a, false)
	q.Leave(b, false)
}
