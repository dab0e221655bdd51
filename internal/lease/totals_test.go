package lease_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/poll"
)

// HeldByEngine, the per-engine totals kept from each commit, always ends
// equal to a scan of the table (Snapshot().Engines): after concurrent
// grants, resizes and releases, after fencing (rows rewritten), after the
// session expired (rows of the old incarnation dropped), and when empty.
func TestHeldByEngineMatchesTable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		cfg := fx.fastConfig()
		m := newManager(t, cfg)
		same := func(when string) {
			t.Helper()
			got, want := m.HeldByEngine(pool), m.Snapshot().Engines(pool)
			if !maps.Equal(got, want) {
				t.Errorf("%s: HeldByEngine = %v, table scan = %v", when, got, want)
			}
		}
		var (
			mu   sync.Mutex
			kept []*lease.Held
			wg   sync.WaitGroup
		)
		for w := range 8 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 7))
				for range 25 {
					h, err := m.Acquire(ctxT(t, 5*time.Second), request(int64(10+rng.IntN(90))))
					if err != nil {
						continue // capacity: 8 slots for 8 workers keeping some
					}
					if rng.IntN(3) == 0 {
						_ = h.Resize(ctxT(t, 5*time.Second), h.Lease().KVTokens+int64(rng.IntN(20)))
					}
					if rng.IntN(4) == 0 {
						mu.Lock()
						kept = append(kept, h)
						mu.Unlock()
						continue
					}
					if err := h.Release(ledger.Usage{}); err != nil {
						t.Errorf("Release: %v", err)
					}
				}
			})
		}
		wg.Wait()
		same("after concurrent grants, resizes and releases")
		if len(kept) == 0 {
			t.Fatal("no lease kept: the test checks nothing held")
		}
		if got := m.HeldByEngine(pool); len(got) == 0 {
			t.Fatalf("HeldByEngine empty with %d leases kept", len(kept))
		}

		fx.fault.down.Store(true)
		for _, h := range kept {
			<-h.Done()
		}
		same("after fencing")
		time.Sleep(time.Until(fx.fault.session().Expires) + 100*time.Millisecond)
		fx.fault.down.Store(false)
		poll.Eventually(t, 5*time.Second, "session confirmed again", func() bool { return m.Confirmed(pool) })
		same(fmt.Sprintf("after the session expired (%d expiries)", m.Stats().Counters.ExpiredSessions))
		for _, h := range kept {
			_ = h.Release(ledger.Usage{})
		}
		same("after releasing everything")
		if got := m.HeldByEngine(pool); len(got) != 0 {
			t.Errorf("HeldByEngine = %v with nothing held, want empty", got)
		}
	})
}
