package memory

import (
	"sync"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/leasehold/leasehold/internal/ledger"
)

// serializer runs the ledger's write transactions one at a time by
// combining: a caller that finds no transaction running runs its own and
// then the ones queued behind it, instead of every caller contending for
// go-memdb's writer lock. Waiters sleep on their own channel and are woken
// once, with their result ready.
//
// Why not the lock alone: a contended sync.Mutex hands ownership to a
// parked waiter, which must first be scheduled, behind whatever else is
// runnable, before the next write can start. A router streaming hundreds
// of answers always has hundreds of goroutines runnable, and its leases'
// writes then ran one per scheduling delay. Measured with the mutex profile
// of a router on memory:// at 256 GPU-paced streams (8 s): goroutines
// waited 6.3 s in total for go-memdb's writer lock; with the combiner they
// wait 0.9 s for it. The combiner never waits for a waiter to run: it takes
// the queue whole. BenchmarkAcquireReleaseParallel compares the two.
//
// Batching: the calls the combiner takes together (update jobs, see
// doIn) share one write transaction, committed once before any of their
// callers is woken. A go-memdb write copies the radix path to each row it
// touches and a transaction copies each index's root and commits each
// index it changed; calls of one pool touch the same pool, engine and
// tenant rows and the same upper nodes, so in a batch most of that is
// done once rather than per call. Every call is still atomic and
// linearizable: the calls of a batch run one after the other, each seeing
// the ones before, and all take effect at the commit, before any returns.
// A call that hits a store failure or panics leaves the shared transaction
// half written: it is aborted and every call of the batch runs again, each
// in a transaction of its own, as without batching.
type serializer struct {
	// db is the database batches write; set by New.
	db *memdb.MemDB

	mu      sync.Mutex
	running bool   // a combiner is running jobs
	queue   []*job // jobs waiting for the combiner
	bypass  bool   // benchmarks only: run f at once (go-memdb's lock alone)
}

// batch is one write transaction shared by the update jobs a combiner runs
// together, and the pool rows it has written so far: no reader sees them
// before the commit, so a later job of the batch changes them in place
// rather than copying them again.
type batch struct {
	txn   *memdb.Txn
	pools map[ledger.PoolID]*poolRow
}

// job is one queued write; done receives true once it ran, or false when
// its caller is to become the combiner.
type job struct {
	// run is a write that runs alone, in its own transaction (Configure).
	run func()
	// in is a write that runs in a batch's transaction; false means a
	// store failure: the batch must be aborted.
	in   func(b *batch) bool
	done chan bool
	// panicked is what run or in panicked with: the panic is raised again
	// in the caller's goroutine, and the combiner goes on with the others.
	panicked any
}

// exec runs j alone (a batch of its own, for an update job), catching a
// panic for j's caller.
func (j *job) exec(db *memdb.MemDB) {
	j.panicked = nil
	if j.run != nil {
		defer func() { j.panicked = recover() }()
		j.run()
		return
	}
	b := &batch{txn: db.Txn(true)}
	defer b.txn.Abort() // no-op after the commit
	defer func() { j.panicked = recover() }()
	if j.in(b) {
		b.txn.Commit()
	}
}

// execIn runs update job j in b; false when b must be aborted (a store
// failure, or a panic, kept for j's caller).
func (j *job) execIn(b *batch) (ok bool) {
	j.panicked = nil
	defer func() {
		if p := recover(); p != nil {
			j.panicked, ok = p, false
		}
	}()
	return j.in(b)
}

// finish returns j to the pool and raises the panic its run raised.
func (j *job) finish() {
	p := j.panicked
	j.run, j.in, j.panicked = nil, nil, nil
	jobs.Put(j)
	if p != nil {
		panic(p)
	}
}

// maxCombined bounds how many other callers' writes one caller runs before
// it hands the queue on, so that no caller's own call waits without end.
// It also bounds a batch.
const maxCombined = 64

var jobs = sync.Pool{New: func() any { return &job{done: make(chan bool, 1)} }}

// do runs f alone, with every other write of s excluded, and returns when
// it ran.
func (s *serializer) do(f func()) {
	if s.bypass {
		f()
		return
	}
	j := jobs.Get().(*job)
	j.run = f
	s.submit(j)
}

// doIn runs f in a write transaction, with every other write of s
// excluded, possibly in a batch with others, and returns once it is
// committed. f returns false on a store failure (nothing of the batch is
// committed then, and f runs again alone); it may run more than once, so
// it only sets its results and writes in the transaction.
func (s *serializer) doIn(f func(b *batch) bool) {
	j := jobs.Get().(*job)
	j.in = f
	if s.bypass {
		j.exec(s.db)
		j.finish()
		return
	}
	s.submit(j)
}

// submit queues j, or runs it and the queue as the combiner.
func (s *serializer) submit(j *job) {
	s.mu.Lock()
	if s.running {
		s.queue = append(s.queue, j)
		s.mu.Unlock()
		if <-j.done {
			j.finish()
			return
		}
		// Handed the queue: this caller is the combiner now.
	} else {
		s.running = true
		s.mu.Unlock()
	}
	s.run([]*job{j}, j)
	s.combine(1)
	j.finish()
}

// combine runs queued jobs until the queue is empty, or until it ran
// maxCombined (ran so far) and hands the rest on to the first of them.
func (s *serializer) combine(ran int) {
	for {
		s.mu.Lock()
		q := s.queue
		if len(q) == 0 {
			s.running = false
			s.queue = q[:0:0]
			s.mu.Unlock()
			return
		}
		if ran >= maxCombined {
			s.queue = q[1:]
			s.mu.Unlock()
			q[0].done <- false
			return
		}
		batch := q[:min(len(q), maxCombined-ran)]
		s.queue = q[len(batch):]
		s.mu.Unlock()
		s.run(batch, nil)
		ran += len(batch)
	}
}

// run runs js in order, consecutive update jobs in one batch, and wakes
// each caller but own's once its job is committed.
func (s *serializer) run(js []*job, own *job) {
	wake := func(group []*job) {
		for _, j := range group {
			if j != own {
				j.done <- true
			}
		}
	}
	for i := 0; i < len(js); {
		if js[i].in == nil {
			js[i].exec(s.db)
			wake(js[i : i+1])
			i++
			continue
		}
		k := i + 1
		for k < len(js) && js[k].in != nil {
			k++
		}
		s.runBatch(js[i:k])
		wake(js[i:k])
		i = k
	}
}

// runBatch runs update jobs in one transaction and commits it; if one of
// them fails or panics, it aborts and runs each alone.
func (s *serializer) runBatch(group []*job) {
	if len(group) == 1 {
		group[0].exec(s.db)
		return
	}
	b := &batch{txn: s.db.Txn(true)}
	for _, j := range group {
		if !j.execIn(b) {
			b.txn.Abort()
			for _, j := range group {
				j.exec(s.db)
			}
			return
		}
	}
	b.txn.Commit()
}
