package route

// Engine ranking (internal/rank) and the class's TTFT objective
// (internal/ttft), taken again at every admission attempt of a request:
// the order changes as engines fill, fail and queue, and the time left
// to meet an SLO shrinks while the request waits.

import (
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/rank"
)

// engineView is one engine's capacity and what is known to be used.
type engineView struct {
	id        ledger.EngineID
	capKV     int64
	capSlots  int64
	usedKV    int64
	usedSlots int64
}

// plan returns req's candidates, best first: the pool's engines ranked by
// health, free capacity, estimated TTFT and prefix affinity, those whose
// context cannot hold it left out (exact prompt) or last, and, for a
// class with a ttft_slo, only those that can still meet it. until is the
// latest time one of them still can (zero: no bound). No candidate left
// is a *ledger.Rejection: breaker_open or draining, or ttft.ReasonSLO.
func (r *Router) plan(p *poolRT, req *request) (cands []ledger.EngineID, until time.Time, err error) {
	views := r.adm.views(req.model)
	rv := make([]rank.View, len(views))
	for i, v := range views {
		rv[i] = rank.View{ID: v.id, CapKV: v.capKV, CapSlots: v.capSlots, UsedKV: v.usedKV, UsedSlots: v.usedSlots,
			Health: r.health.Of(req.model, v.id), TTFT: r.ttft.Estimate(req.model, v.id, req.promptEst).Expected}
	}
	ids, reason := rank.Order(rv, rank.Options{Prefix: req.prefix, AffinityBonus: r.cfg.AffinityBonus})
	if reason != "" {
		return nil, time.Time{}, &ledger.Rejection{Reason: reason, RetryAfter: p.pool.RetryAfter}
	}
	ids = r.lens.Get(req.model).Fit(ids, req.promptEst+max(req.maxTokens, 1), req.promptTokens > 0)
	return r.ttft.Admissible(req.model, ids, req.class, req.promptEst, req.arrived)
}
