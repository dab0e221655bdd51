package ttft

// Per-class objectives (fleet file priorities[].ttft_slo). A request of a
// class with an SLO may be granted on an engine only while
//
//	now − arrived + Upper(engine) ≤ ttft_slo
//
// that is, until the engine's deadline arrived + ttft_slo − Upper. A cold
// engine (neither seeded nor observed warmSamples times) is never refused
// on a guess: its deadline is arrived + ttft_slo. When no candidate meets
// its deadline now the request is refused with ReasonSLO at once: waiting
// cannot help, since work ahead drains no faster than the budget does.
// A capacity rejection may still wait in the router's queue, but only
// until the latest deadline of the candidates that met theirs.

import (
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// SLORetryAfter is the retry hint of a ReasonSLO refusal.
const SLORetryAfter = time.Second

// SLO returns class's ttft_slo, 0 when it has none.
func (e *Estimator) SLO(class ledger.PriorityName) time.Duration { return e.cfg.SLOs[class] }

// Breached reports whether observed, a time to first token of a request of
// class measured from the dispatch to the engine (Inflight.FirstToken),
// is above the class's ttft_slo: the dispatch outcome
// ledger.OutcomeTTFTBreach. Always false for a class without one.
func (e *Estimator) Breached(class ledger.PriorityName, observed time.Duration) bool {
	slo := e.cfg.SLOs[class]
	return slo > 0 && observed > slo
}

// Admissible keeps, in their order, the candidates that can still give a
// request of class that arrived at arrived, with prompt tokens, its first
// token within the class's ttft_slo, and returns until, the latest time
// one of them still can (zero: no SLO, no bound). With none left it
// returns a *ledger.Rejection with ReasonSLO. A class without an SLO keeps
// every candidate.
func (e *Estimator) Admissible(pool ledger.PoolID, cands []ledger.EngineID, class ledger.PriorityName, prompt int64, arrived time.Time) (kept []ledger.EngineID, until time.Time, err error) {
	slo := e.cfg.SLOs[class]
	if slo <= 0 || len(cands) == 0 {
		return cands, time.Time{}, nil
	}
	now := e.clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	kept = make([]ledger.EngineID, 0, len(cands))
	for _, c := range cands {
		est := e.estimateLocked(pool, e.engineLocked(key{pool, c}), prompt, now)
		deadline := arrived.Add(slo)
		if est.Warm {
			deadline = deadline.Add(-est.Upper)
		}
		if now.After(deadline) {
			continue
		}
		kept = append(kept, c)
		if deadline.After(until) {
			until = deadline
		}
	}
	if len(kept) == 0 {
		return nil, time.Time{}, &ledger.Rejection{Reason: ReasonSLO, RetryAfter: SLORetryAfter}
	}
	return kept, until, nil
}
