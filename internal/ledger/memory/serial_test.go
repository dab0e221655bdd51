package memory

import (
	"runtime"
	"sync"
	"testing"
)

// TestSerializerExcludes runs many concurrent callers through one
// serializer: every f runs exactly once, never two at a time (the race
// detector watches the plain counters), and every caller returns only
// after its own f ran, including callers whose f another caller ran and
// callers handed the queue after maxCombined.
func TestSerializerExcludes(t *testing.T) {
	var (
		s       serializer
		inside  int // callers inside f at once; must stay 0 or 1
		total   int
		maxSeen int
	)
	const callers, each = 32, 500
	ran := make([][]bool, callers)
	var wg sync.WaitGroup
	for c := range callers {
		ran[c] = make([]bool, each)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				s.do(func() {
					inside++
					maxSeen = max(maxSeen, inside)
					total++
					ran[c][i] = true
					inside--
				})
				if !ran[c][i] {
					t.Errorf("caller %d returned before its call %d ran", c, i)
					return
				}
			}
		}()
	}
	wg.Wait()
	if total != callers*each || maxSeen != 1 {
		t.Fatalf("ran %d calls (want %d), at most %d at once (want 1)", total, callers*each, maxSeen)
	}
	if s.running || len(s.queue) != 0 {
		t.Fatalf("idle serializer: running %v, %d queued", s.running, len(s.queue))
	}
}

// TestSerializerHandsOn queues more than maxCombined calls behind a
// running one: the combiner runs maxCombined of them and hands the rest to
// the next caller, and every call still runs once.
func TestSerializerHandsOn(t *testing.T) {
	var s serializer
	release := holdWrites(&s)
	const queued = 3*maxCombined + 5
	var wg sync.WaitGroup
	var mu sync.Mutex
	count := 0
	for range queued {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.do(func() { mu.Lock(); count++; mu.Unlock() })
		}()
	}
	// Wait until every caller is queued, then let the first call end.
	waitQueued(&s, queued)
	close(release)
	wg.Wait()
	if count != queued {
		t.Fatalf("%d of %d queued calls ran", count, queued)
	}
}

// TestSerializerPanic: a write that panics raises the panic in its own
// caller, whoever ran it, and the serializer goes on serving the others.
func TestSerializerPanic(t *testing.T) {
	var s serializer
	release := holdWrites(&s)
	got := make(chan any, 1)
	go func() {
		defer func() { got <- recover() }()
		s.do(func() { panic("boom") })
	}()
	ran := make(chan struct{})
	go s.do(func() { close(ran) })
	waitQueued(&s, 2)
	close(release) // the first caller runs both queued writes
	if p := <-got; p != "boom" {
		t.Fatalf("the panicking caller recovered %v, want boom", p)
	}
	<-ran
	done := make(chan struct{})
	go s.do(func() { close(done) })
	<-done
}

// holdWrites starts a write on s that runs until the returned channel is
// closed, so that later calls queue behind it.
func holdWrites(s *serializer) chan struct{} {
	release := make(chan struct{})
	started := make(chan struct{})
	go s.do(func() { close(started); <-release })
	<-started
	return release
}

// waitQueued waits until n calls are queued on s.
func waitQueued(s *serializer, n int) {
	for {
		s.mu.Lock()
		q := len(s.queue)
		s.mu.Unlock()
		if q == n {
			return
		}
		runtime.Gosched()
	}
}
