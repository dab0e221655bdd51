package memory

import "sync"

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
type serializer struct {
	mu      sync.Mutex
	running bool   // a combiner is running jobs
	queue   []*job // jobs waiting for the combiner
	bypass  bool   // benchmarks only: run f at once (go-memdb's lock alone)
}

// job is one queued write; done receives true once it ran, or false when
// its caller is to become the combiner.
type job struct {
	run  func()
	done chan bool
	// panicked is what run panicked with: the panic is raised again in
	// the caller's goroutine, and the combiner goes on with the others.
	panicked any
}

// exec runs j.run, catching a panic for j's caller.
func (j *job) exec() {
	defer func() { j.panicked = recover() }()
	j.run()
}

// finish returns j to the pool and raises the panic its run raised.
func (j *job) finish() {
	p := j.panicked
	j.run, j.panicked = nil, nil
	jobs.Put(j)
	if p != nil {
		panic(p)
	}
}

// maxCombined bounds how many other callers' writes one caller runs before
// it hands the queue on, so that no caller's own call waits without end.
const maxCombined = 64

var jobs = sync.Pool{New: func() any { return &job{done: make(chan bool, 1)} }}

// do runs f with every other f of s excluded, and returns when it ran.
func (s *serializer) do(f func()) {
	if s.bypass {
		f()
		return
	}
	j := jobs.Get().(*job)
	j.run = f
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
	j.exec()
	s.combine()
	j.finish()
}

// combine runs queued jobs until the queue is empty, or until it ran
// maxCombined and hands the rest on to the first of them.
func (s *serializer) combine() {
	ran := 0
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
		for _, j := range batch {
			j.exec()
			j.done <- true
		}
		ran += len(batch)
	}
}
