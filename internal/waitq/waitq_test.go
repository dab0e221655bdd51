package waitq

import "testing"

// A full queue admits no one; notify wakes the oldest waiter not already
// woken, once; a waiter that left is not woken.
func TestQueueOrderAndDepth(t *testing.T) {
	q := &Queue{Depth: 2}
	a, b := q.Enter(), q.Enter()
	if a == nil || b == nil {
		t.Fatal("queue of depth 2 refused one of its first two waiters")
	}
	if c := q.Enter(); c != nil {
		t.Fatalf("full queue admitted a third waiter; len %d", q.Len())
	}
	woken := func(e any) bool {
		select {
		case <-e.(chan struct{}):
			return true
		default:
			return false
		}
	}
	q.Notify()
	if !woken(a.Value) || woken(b.Value) {
		t.Error("notify did not wake the oldest waiter alone")
	}
	q.Leave(a)
	q.Notify()
	if !woken(b.Value) {
		t.Error("notify after the oldest left did not wake the next")
	}
	q.Leave(b)
	if got := q.Len(); got != 0 {
		t.Errorf("len %d after every waiter left, want 0", got)
	}
	q.Notify() // no waiters: a no-op
}
