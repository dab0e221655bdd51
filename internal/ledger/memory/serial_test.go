package memory

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/leasehold/leasehold/internal/ledger"
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

// testDB is an empty database of the ledger's schema.
func testDB(t *testing.T) *memdb.MemDB {
	t.Helper()
	db, err := memdb.NewMemDB(newSchema())
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// poolNames lists the pool rows db holds.
func poolNames(t *testing.T, db *memdb.MemDB) []string {
	t.Helper()
	it, err := db.Txn(false).Get(tablePools, indexID)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for raw := it.Next(); raw != nil; raw = it.Next() {
		names = append(names, string(raw.(*poolRow).Name))
	}
	return names
}

// TestSerializerBatches queues update jobs behind a running write: the
// combiner runs them in one transaction, each seeing the ones before it,
// and commits it before any caller returns. A job that reports a store
// failure (or panics) aborts the batch: every job of it runs again alone,
// so the others' writes are committed and the failed one's are not.
func TestSerializerBatches(t *testing.T) {
	tests := []struct {
		name string
		// fail is the job (by index) that reports a store failure, -1 none;
		// panics makes it panic instead.
		fail   int
		panics bool
		want   []string
		// wantBatches is how many transactions the jobs ran in, in all.
		wantBatches int
	}{
		{"shared", -1, false, []string{"p0", "p1", "p2", "p3"}, 1},
		{"a store failure", 2, false, []string{"p0", "p1", "p3"}, 1 + 4},
		{"a panic", 1, true, []string{"p0", "p2", "p3"}, 1 + 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &serializer{db: testDB(t)}
			release := holdWrites(s)
			const n = 4
			var (
				mu      sync.Mutex // guards batches and seen
				batches = map[*batch]bool{}
				seen    [n]int // rows visible to job i in its transaction, last run
			)
			var wg sync.WaitGroup
			panicked := make(chan any, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { panicked <- recover() }()
					s.doIn(func(b *batch) bool {
						it, _ := b.txn.Get(tablePools, indexID)
						rows := 0
						for raw := it.Next(); raw != nil; raw = it.Next() {
							rows++
						}
						mu.Lock()
						batches[b], seen[i] = true, rows
						mu.Unlock()
						if err := b.txn.Insert(tablePools, &poolRow{Name: ledger.PoolID(fmt.Sprint("p", i))}); err != nil {
							t.Error(err)
						}
						if i == tc.fail && tc.panics {
							panic("boom")
						}
						return i != tc.fail
					})
				}()
				waitQueued(s, i+1) // queued in order
			}
			close(release)
			wg.Wait()
			close(panicked)
			var got []any
			for p := range panicked {
				if p != nil {
					got = append(got, p)
				}
			}
			if wantPanic := tc.panics; (len(got) == 1 && got[0] == "boom") != wantPanic || (!wantPanic && len(got) > 0) {
				t.Errorf("callers recovered %v, want a panic: %v", got, wantPanic)
			}
			if names := poolNames(t, s.db); !slices.Equal(names, tc.want) {
				t.Errorf("committed pools %v, want %v", names, tc.want)
			}
			if len(batches) != tc.wantBatches {
				t.Errorf("jobs ran in %d transactions, want %d", len(batches), tc.wantBatches)
			}
			if tc.fail < 0 {
				for i, rows := range seen {
					if rows != i {
						t.Errorf("job %d saw %d rows in its batch, want the %d written before it", i, rows, i)
					}
				}
			}
		})
	}
}
