package roundtrip

import (
	"sync"
	"testing"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/ledgertest"
	"github.com/leasehold/leasehold/internal/ledger/memory"
	"github.com/leasehold/leasehold/internal/ledger/remote"
	"github.com/leasehold/leasehold/internal/reserver/rpc"
)

// served is what a client in the conformance suite talks to.
type served struct {
	r    *reserver
	opts ledger.Options
}

// TestConformance runs the shared suite through the wire: each ledger is a
// fresh memory ledger behind its own reserver on a loopback TCP port, reached
// by Dial with the shared token. Losing the ledger restarts the reserver on
// the same port with a fresh memory ledger, and the client reconnects.
func TestConformance(t *testing.T) {
	var mu sync.Mutex // guards servers
	servers := map[*remote.Ledger]served{}
	ledgertest.Run(t, ledgertest.Backend{
		Name: "remote(memory)",
		New: func(t testing.TB, opts ledger.Options) ledger.Ledger {
			r := startReserver(t, memory.New(opts, nil), rpc.Config{Token: testToken})
			c := dial(t, r, remote.Options{Token: testToken})
			mu.Lock()
			servers[c] = served{r: r, opts: opts}
			mu.Unlock()
			return c
		},
		Lose: func(t testing.TB, l ledger.Ledger) ledger.Ledger {
			c := l.(*remote.Ledger)
			mu.Lock()
			s := servers[c]
			mu.Unlock()
			s.r.restart(memory.New(s.opts, nil), c)
			return c
		},
	})
}
