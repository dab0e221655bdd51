package fleet

import (
	"log/slog"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/internal/ledger"
)

// UpdateWaiting records waiting as the engines pool's applied spec leaves
// out (PartialPoolSpec) in by, which the caller guards, and reports
// whether the set of their ids changed.
func UpdateWaiting(by map[ledger.PoolID][]WaitingEngine, pool ledger.PoolID, waiting []WaitingEngine) (changed bool) {
	prev := by[pool]
	if len(waiting) == 0 {
		delete(by, pool)
	} else {
		by[pool] = waiting
	}
	return !slices.EqualFunc(prev, waiting, func(a, b WaitingEngine) bool { return a.ID == b.ID })
}

// LogWaiting logs a changed waiting set of pool: a note when none is left,
// else a warning naming the engines and why; join says what happens when
// one reports its capacity.
func LogWaiting(log *slog.Logger, pool ledger.PoolID, waiting []WaitingEngine, join string) {
	if len(waiting) == 0 {
		log.Info("every engine of the pool is configured", "pool", pool)
		return
	}
	ids, why := make([]string, len(waiting)), make([]string, len(waiting))
	for i, w := range waiting {
		ids[i], why[i] = string(w.ID), w.Err.Error()
	}
	log.Warn("pool configured without engines whose capacity is unknown; "+join,
		"pool", pool, "waiting", strings.Join(ids, ","), "why", strings.Join(why, "; "))
}
