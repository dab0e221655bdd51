package memory

import (
	"sync"
	"testing"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/ledgertest"
)

// TestConformance runs the shared ledger suite. Losing the ledger's state is
// a reserver restart: the old Ledger is closed and a brand-new one with the
// same options and clock takes its place.
func TestConformance(t *testing.T) {
	var (
		mu sync.Mutex // guards given
		// given holds the options each ledger was made with, for Lose.
		given = map[*Ledger]ledger.Options{}
	)
	newLedger := func(opts ledger.Options) *Ledger {
		l := New(opts, nil)
		mu.Lock()
		given[l] = opts
		mu.Unlock()
		return l
	}
	ledgertest.Run(t, ledgertest.Backend{
		Name: "memory",
		New: func(t testing.TB, opts ledger.Options) ledger.Ledger {
			return newLedger(opts)
		},
		Lose: func(t testing.TB, l ledger.Ledger) ledger.Ledger {
			old := l.(*Ledger)
			if err := old.Close(); err != nil {
				t.Fatalf("close the lost ledger: %v", err)
			}
			mu.Lock()
			opts := given[old]
			mu.Unlock()
			return newLedger(opts)
		},
	})
}
