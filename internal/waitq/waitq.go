// Package waitq is the router's per-pool wait queue.
//
// The wait queue. A request refused for capacity (and, with QueueQuota,
// for quota) waits in its pool's bounded queue instead of failing at once:
// it retries when this router releases a lease in the pool (one waiter is
// woken per release, oldest first, and a waiter that then succeeds passes
// the wake-up on, since one release may make room for several) or after
// the ledger's retry hint, jittered, whichever comes first, until
// QueueTimeout. Releases by other routers are heard through the fleet view
// (internal/fleetview): a poll that finds the pool's reserved totals lower wakes
// a waiter the same way. A full queue rejects at once. Newcomers try the ledger before
// queueing, so the queue is not strictly FIFO.
package waitq

import (
	"container/list"
	"sync"
)

// Queue is one pool's queue. Safe for concurrent use.
type Queue struct {
	// Depth is the most waiters (--queue-depth); a full queue admits none.
	Depth int

	// mu guards waiters.
	mu      sync.Mutex
	waiters list.List // of chan struct{} (cap 1), oldest first
}

// Enter adds a waiter; nil when the queue is full.
func (q *Queue) Enter() *list.Element {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.waiters.Len() >= q.Depth {
		return nil
	}
	return q.waiters.PushBack(make(chan struct{}, 1))
}

// Leave removes a waiter.
func (q *Queue) Leave(e *list.Element) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.waiters.Remove(e)
}

// Notify wakes the oldest waiter not already woken.
func (q *Queue) Notify() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for e := q.waiters.Front(); e != nil; e = e.Next() {
		select {
		case e.Value.(chan struct{}) <- struct{}{}:
			return
		default:
		}
	}
}

// Len is the number of waiters.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.waiters.Len()
}
