package readiness

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
)

// Pools is what the fleet applier knows (fleetapply.Applier).
type Pools interface {
	// Fleet is the fleet applied, whose pools the router serves.
	Fleet() *fleet.Fleet
	// Pending returns the pools not configured in the ledger, with why.
	Pending() map[ledger.PoolID]string
	// Waiting returns, per applied pool, the engines left out of it.
	Waiting() map[ledger.PoolID][]fleet.WaitingEngine
}

// Sessions is what the holder sessions know (lease.Manager).
type Sessions interface {
	// Confirmed reports whether pool's session is confirmed (not fenced).
	Confirmed(pool ledger.PoolID) bool
	// Recovering returns how much longer pool's ledger refuses every new
	// grant for its recovery window, 0 if it does not.
	Recovering(pool ledger.PoolID) time.Duration
}

// Why returns why a router with these pools and sessions cannot grant now,
// one cause a line, each pool's first cause in the fleet's order, then the
// engines waiting outside their pools; nil when every pool is configured,
// confirmed and out of its recovery window (waiting engines alone do not
// make a router unready: it admits on the others).
func Why(p Pools, s Sessions) []string {
	var why []string
	pending := p.Pending()
	for _, pool := range p.Fleet().Pools {
		if reason, ok := pending[pool.Name]; ok {
			why = append(why, fmt.Sprintf("pool %s not configured in the ledger: %s", pool.Name, reason))
		} else if !s.Confirmed(pool.Name) {
			why = append(why, fmt.Sprintf("pool %s holder session not confirmed (starting, or fenced: the ledger did not answer its keepalive in time)", pool.Name))
		} else if d := s.Recovering(pool.Name); d > 0 {
			why = append(why, fmt.Sprintf("pool %s recovering: the ledger refuses every new grant for at most %s more (its recovery_window after a new epoch, while holders re-assert their leases; an engine takes grants again as soon as fresh telemetry shows what it holds)", pool.Name, (d+99*time.Millisecond).Truncate(100*time.Millisecond)))
		}
	}
	if len(why) == 0 {
		return nil
	}
	waiting := p.Waiting()
	for _, pool := range slices.Sorted(maps.Keys(waiting)) {
		for _, w := range waiting[pool] {
			why = append(why, fmt.Sprintf("pool %s engine %s waiting (not a candidate): %s", pool, w.ID, w.Err))
		}
	}
	return why
}
