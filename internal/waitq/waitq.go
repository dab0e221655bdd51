// Package waitq is the router's per-pool wait queue: flow control for
// requests refused capacity.
//
// A request refused for capacity (and, with --queue-quota, for quota) waits
// in its pool's bounded queue instead of failing at once, until its turn
// comes or --queue-timeout passes. Waiters do not retry on their own: every
// event that would let one retry hands out one turn, and the queue chooses
// who gets it. The events are the wake-ups of before: a release by this
// router, a fleet-view poll that finds the pool's reserved totals lower
// (another router released), a waiter that was granted passing the wake-up
// on (one release may make room for several); and each waiter's retry timer
// (the ledger's hint, jittered), which hands a turn to whoever is due, not
// to itself. A newcomer behind waiters of its class or above enters the
// queue and hands out a turn too (Busy): it reaches the ledger at once only
// when it is due.
//
// Admit (admit.go) is a request's way through: an attempt at once, or
// after its turn; Enter, Await, Missed and Leave are its steps.
//
// # Who is due (Notify)
//
//  1. Strict priority: the waiters of the highest class (lowest Key.Rank)
//     that has a waiter able to take a turn.
//  2. Within a class, weighted fair sharing between tenants by virtual
//     time: each tenant has a virtual time that each grant advances by
//     1/Key.Weight; the turn goes to the tenant with the least virtual time
//     plus 1/Weight per turn it holds already, ties to the oldest waiter. A
//     tenant that starts waiting again starts at the class's virtual time
//     (that of the latest grant), so it banks no credit while idle.
//  3. Within a tenant, first come first served.
//
// A waiter holding a turn, or parked, takes no other. A waiter whose turn
// ends in a capacity refusal keeps its place (Missed): the next turn is its
// again, so a large request is not starved by smaller ones that fit
// sooner; it holds its class's turns until enough is free or its timeout
// passes. One refused for its own tenant's quota (Reason.Quota) is parked:
// it retries on its own timer, and the others get the turns meanwhile.
//
// # Bounds (Enter)
//
// Depth bounds the pool's waiters (--queue-depth), Key.MaxQueued the
// tenant's (tenants[].max_queued); a request that finds either full is
// refused with ReasonQueueFull (a *FullError: the router answers 503 for
// the pool's bound, 429 for the tenant's).
//
// # What it does not do
//
// It grants nothing: a turn is one attempt at the ledger, which decides.
// Its order holds among this router's waiters; routers do not share
// queues, so between routers it is as fair as their traffic is balanced.
package waitq

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/internal/ledger"
)

// ReasonQueueFull is the refusal reason when the pool's or the tenant's
// bound on waiting requests is reached.
const ReasonQueueFull ledger.Reason = "queue_full"

// Errors of Enter and Await, checked with errors.Is.
var (
	// ErrFull: the pool's queue holds Depth waiters.
	ErrFull = errors.New("waitq: the pool's wait queue is full")
	// ErrTenantFull: the tenant's waiters reached its Key.MaxQueued.
	ErrTenantFull = errors.New("waitq: the tenant's waiting requests reached its bound")
	// ErrTimeout: the waiter's Config.Timeout passed.
	ErrTimeout = errors.New("waitq: queue timeout")
	// ErrStopped: the stop channel given to Await closed.
	ErrStopped = errors.New("waitq: stopped")
)

// FullError is Enter's refusal at a bound: a *ledger.Rejection with
// ReasonQueueFull, and ErrFull or ErrTenantFull.
type FullError struct {
	// Rejection carries ReasonQueueFull and the retry hint.
	Rejection ledger.Rejection
	// Err is ErrFull or ErrTenantFull.
	Err error
}

func (e *FullError) Error() string {
	return fmt.Sprintf("%v (retry after %s)", e.Err, e.Rejection.RetryAfter)
}

// Unwrap makes errors.Is and errors.As see both the rejection and Err.
func (e *FullError) Unwrap() []error { return []error{&e.Rejection, e.Err} }

// Key is what orders a waiter.
type Key struct {
	Tenant ledger.TenantID
	// Rank is the priority class's rank, 0 the highest
	// (fleet.ClassRank): lower ranks are served first.
	Rank int
	// Weight is the tenant's share of its class's turns (tenants[].weight);
	// <= 0 means 1.
	Weight float64
	// MaxQueued bounds the tenant's waiters in this queue; 0: none but
	// Depth.
	MaxQueued int
}

// Config configures a Queue.
type Config struct {
	// Depth is the most waiters (--queue-depth); 0 admits none.
	Depth int
	// Timeout is how long a waiter waits at most (--queue-timeout).
	Timeout time.Duration
	// Clock runs the timers; nil means the real clock.
	Clock clockwork.Clock
	// Waits reports whether Admit waits after a refusal; nil: after every
	// one.
	Waits func(*ledger.Rejection) bool
	// OnEnter and OnLeave, when set, observe Admit's waiters: one entered;
	// one left with an outcome (Outcome*) after waiting so long.
	OnEnter func()
	OnLeave func(outcome string, waited time.Duration)
}

// Queue is one pool's queue. Safe for concurrent use.
type Queue struct {
	cfg Config

	// mu guards everything below and each Waiter's state fields.
	mu      sync.Mutex
	n       int
	seq     uint64
	classes map[int]*class
	ranks   []int // of classes, ascending
	last    *ledger.Rejection
}

// class is one priority class's waiters.
type class struct {
	rank int
	n    int
	// vt is the class's virtual time: the tenant virtual time of the
	// latest grant, before its charge.
	vt    float64
	flows map[ledger.TenantID]*flow
}

// flow is one tenant's waiters in one class.
type flow struct {
	vt      float64 // virtual service: grants / weight
	weight  float64
	turns   int       // waiters holding a turn
	waiters list.List // of *Waiter, oldest first
}

// Waiter is one request in the queue. The goroutine that entered it owns
// it: it calls Await, Missed and Leave, never concurrently.
type Waiter struct {
	key   Key
	seq   uint64
	turnC chan struct{} // cap 1: a turn was handed to it
	since time.Time
	// deadline fires at Config.Timeout.
	deadline clockwork.Timer
	// Guarded by Queue.mu.
	elem   *list.Element
	turn   bool // holds a turn (handed, and not yet Missed or Left)
	parked bool
}

// New returns an empty queue.
func New(cfg Config) *Queue {
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	return &Queue{cfg: cfg, classes: map[int]*class{}}
}

// Busy reports whether a waiter of rank or a higher class (a lower rank)
// is queued: a newcomer of rank then enters and waits for its turn.
func (q *Queue) Busy(rank int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, r := range q.ranks {
		if r > rank {
			break
		}
		if q.classes[r].n > 0 {
			return true
		}
	}
	return false
}

// Enter queues a waiter for k after rej (the refusal that made it wait; it
// becomes Last). It fails with a *FullError at a bound, its hint rej's.
func (q *Queue) Enter(k Key, rej *ledger.Rejection) (*Waiter, error) {
	if k.Weight <= 0 {
		k.Weight = 1
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	hint := time.Second
	if rej != nil && rej.RetryAfter > 0 {
		hint = rej.RetryAfter
	}
	if rej != nil {
		q.last = rej
	}
	c := q.classes[k.Rank]
	var f *flow
	if c != nil {
		f = c.flows[k.Tenant]
	}
	switch {
	case q.n >= q.cfg.Depth:
		return nil, &FullError{Rejection: ledger.Rejection{Reason: ReasonQueueFull, RetryAfter: hint}, Err: ErrFull}
	case k.MaxQueued > 0 && f != nil && f.waiters.Len() >= k.MaxQueued:
		return nil, &FullError{Rejection: ledger.Rejection{Reason: ReasonQueueFull, RetryAfter: hint}, Err: ErrTenantFull}
	}
	if c == nil {
		c = &class{rank: k.Rank, flows: map[ledger.TenantID]*flow{}}
		q.classes[k.Rank] = c
		q.ranks = insertSorted(q.ranks, k.Rank)
	}
	if f == nil {
		f = &flow{vt: c.vt}
		c.flows[k.Tenant] = f
	}
	if f.waiters.Len() == 0 {
		f.vt = max(f.vt, c.vt) // no credit banked while idle
	}
	f.weight = k.Weight
	q.seq++
	w := &Waiter{key: k, seq: q.seq, turnC: make(chan struct{}, 1), since: q.cfg.Clock.Now(),
		deadline: q.cfg.Clock.NewTimer(q.cfg.Timeout)}
	w.elem = f.waiters.PushBack(w)
	c.n++
	q.n++
	return w, nil
}

// Notify hands one turn to the waiter that is due (see the package
// documentation); none when no waiter can take one.
func (q *Queue) Notify() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.notifyLocked()
}

func (q *Queue) notifyLocked() {
	for _, r := range q.ranks {
		c := q.classes[r]
		if c.n == 0 {
			continue
		}
		var best *Waiter
		var bestF *flow
		var bestTag float64
		for _, f := range c.flows {
			w := f.next()
			if w == nil {
				continue
			}
			tag := f.vt + float64(f.turns)/f.weight
			if best == nil || tag < bestTag || (tag == bestTag && w.seq < best.seq) {
				best, bestF, bestTag = w, f, tag
			}
		}
		if best != nil {
			best.turn = true
			bestF.turns++
			best.turnC <- struct{}{} // empty: a waiter without a turn holds no token
			return
		}
	}
}

// next is f's oldest waiter able to take a turn, or nil.
func (f *flow) next() *Waiter {
	for e := f.waiters.Front(); e != nil; e = e.Next() {
		if w := e.Value.(*Waiter); !w.turn && !w.parked {
			return w
		}
	}
	return nil
}

// Await blocks until w may try the ledger: its turn came, or its own retry
// timer fired while it is parked, or until passed (the class's TTFT
// objective: the router re-plans, and refuses). Each other firing of the
// retry timer (hint jittered over 0.5-1.5×, 1s when hint <= 0) hands a turn
// to whoever is due. It returns ErrTimeout when the queue timeout passed,
// ErrStopped when stopC closed, ctx's error when ctx ended.
func (q *Queue) Await(ctx context.Context, w *Waiter, hint time.Duration, until time.Time, stopC <-chan struct{}) error {
	if hint <= 0 {
		hint = time.Second
	}
	for {
		wait := time.Duration(float64(hint) * (0.5 + rand.Float64()))
		if !until.IsZero() {
			wait = max(min(wait, until.Sub(q.cfg.Clock.Now())), 0)
		}
		retry := q.cfg.Clock.NewTimer(wait)
		select {
		case <-w.turnC:
			retry.Stop()
			return nil
		case <-retry.Chan():
			if q.ownRetry(w) || (!until.IsZero() && !q.cfg.Clock.Now().Before(until)) {
				return nil
			}
			q.Notify()
		case <-w.deadline.Chan():
			retry.Stop()
			return ErrTimeout
		case <-ctx.Done():
			retry.Stop()
			return ctx.Err()
		case <-stopC:
			retry.Stop()
			return ErrStopped
		}
	}
}

func (q *Queue) ownRetry(w *Waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return w.parked
}

// Missed records that w's attempt was refused with rej (which becomes
// Last): w keeps its place, parked when rej is its own tenant's (a quota
// or rate reason), and its turn ends unless another was handed to it
// meanwhile.
func (q *Queue) Missed(w *Waiter, rej *ledger.Rejection) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.last = rej
	w.parked = rej.Reason.Quota()
	if w.turn && len(w.turnC) == 0 {
		w.turn = false
		q.classes[w.key.Rank].flows[w.key.Tenant].turns--
	}
}

// Leave removes w, charging its tenant's virtual time when it was granted,
// and returns how long it waited. A turn handed to it and not taken goes
// to the next waiter due.
func (q *Queue) Leave(w *Waiter, granted bool) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	w.deadline.Stop()
	c := q.classes[w.key.Rank]
	f := c.flows[w.key.Tenant]
	f.waiters.Remove(w.elem)
	c.n--
	q.n--
	if w.turn {
		f.turns--
	}
	if granted {
		c.vt = max(c.vt, f.vt)
		f.vt += 1 / f.weight
	}
	if f.waiters.Len() == 0 && f.vt <= c.vt {
		delete(c.flows, w.key.Tenant) // nothing owed either way: forget it
	}
	if len(w.turnC) > 0 {
		<-w.turnC
		q.notifyLocked()
	}
	return q.cfg.Clock.Since(w.since)
}

// Last is the latest refusal a waiter met (Enter, Missed), nil before any:
// the answer of a newcomer whose queue timeout passes before its turn.
func (q *Queue) Last() *ledger.Rejection {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.last
}

// Len is the number of waiters.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// Queued calls fn with each tenant's waiters per class rank, for metrics.
func (q *Queue) Queued(fn func(t ledger.TenantID, rank, n int)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, r := range q.ranks {
		for t, f := range q.classes[r].flows {
			fn(t, r, f.waiters.Len())
		}
	}
}

func insertSorted(s []int, v int) []int {
	i := 0
	for i < len(s) && s[i] < v {
		i++
	}
	s = append(s, 0)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}
