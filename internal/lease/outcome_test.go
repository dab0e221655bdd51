package lease_test

import (
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/poll"
)

// Release hands the dispatch's outcome (the breaker's evidence) to the
// ledger, on its first send and on a release retried in the background
// after the ledger was unreachable.
func TestReleaseCarriesOutcome(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		cfg := fx.fastConfig()
		cfg.ReleaseTimeout = 200 * time.Millisecond
		m := newManager(t, cfg)

		h := acquire(t, m, 10)
		if err := h.Release(ledger.Usage{Outcome: ledger.OutcomeStatus5xx}); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if got, want := fx.fault.outcomes(), []ledger.Outcome{ledger.OutcomeStatus5xx}; !slices.Equal(got, want) {
			t.Fatalf("released outcomes %v, want %v", got, want)
		}

		h = acquire(t, m, 10)
		fx.fault.down.Store(true)
		if err := h.Release(ledger.Usage{Outcome: ledger.OutcomeReset}); err == nil {
			t.Fatalf("Release with the ledger unreachable succeeded")
		}
		fx.fault.down.Store(false)
		want := []ledger.Outcome{ledger.OutcomeStatus5xx, ledger.OutcomeReset}
		poll.Eventually(t, 5*time.Second, "the retried release applied", func() bool { return len(fx.fault.outcomes()) == 2 })
		if got := fx.fault.outcomes(); !slices.Equal(got, want) {
			t.Errorf("released outcomes %v, want %v (the retry keeps the outcome)", got, want)
		}
	})
}

// A block lease's release reports no outcome, whatever its sub-requests
// came to: the ledger counts one outcome per lease.
func TestBlockReleaseReportsNoOutcome(t *testing.T) {
	fx := newFixture(t, backends()[0])
	m := newManager(t, fx.blockConfig(t))
	s := subOf(t, m, request(10))
	before := len(fx.fault.outcomes())
	if err := s.Release(ledger.Usage{Outcome: ledger.OutcomeConnect}); err != nil {
		t.Fatalf("Sub.Release: %v", err)
	}
	// The idle block goes back to the ledger (Idle 300ms).
	poll.Eventually(t, 5*time.Second, "the idle block released", func() bool { return len(fx.fault.outcomes()) > before })
	for _, o := range fx.fault.outcomes() {
		if o != ledger.OutcomeNone {
			t.Errorf("a release reported %q; want none (only block leases and evidence-free releases here)", o)
		}
	}
}
