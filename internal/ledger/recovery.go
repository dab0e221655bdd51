package ledger

import "time"

// This file is the recovery rule after a new epoch in one place
// (docs/design.md, "Recovery after ledger loss"): when an engine may take
// grants again while its pool's recovery window is open, and what an
// observation arriving in the window charges. Admit and AdmitGrowth apply
// the first (through Admission.RecoveringUntil and ObservedSince); every
// backend's Observe applies the second (CorrectionOf); the Lua scripts
// implement both and the conformance suite holds them to it.

// RecoverySince returns the instant an engine's observation must have
// been taken and have arrived at or after for the engine to recover: the
// epoch's start began plus the dispatch grace (Options.ConfirmGrace),
// rounded up to the millisecond as every backend stores it. By then every
// request granted before the loss has reached its engine (the design's
// assumption A1), so the observation shows it.
func RecoverySince(began time.Time, grace time.Duration) time.Time {
	return began.Add(CeilMillis(grace))
}

// Recovered reports whether e may take new grants and growth while its
// pool's recovery window is open at now: its last applied observation was
// taken (LastObservation.ObservedAt, the observer's stamp) and arrived
// (ArrivedAt, ledger clock) at or after since (RecoverySince), its
// telemetry is not stale at now, and, in a worst_case pool, it showed
// nothing running or waiting (an observation shows what a request holds,
// never the worst case it may grow to, so only an idle engine can be
// trusted there). An engine never observed has not recovered: it waits
// for the window's end.
func (e EngineState) Recovered(now, since time.Time, mode ReserveMode) bool {
	o := e.LastObservation
	if e.ArrivedAt.IsZero() || e.ArrivedAt.Before(since) || o.ObservedAt.Before(since) || e.Stale(now) {
		return false
	}
	return mode != ReserveWorstCase || o.Running+o.Waiting == 0
}

// recovering reports whether e refuses grants and growth for recovery:
// the pool's window is open and e has not recovered.
func (a Admission) recovering(e EngineState) bool {
	return a.Now.Before(a.RecoveringUntil) && !e.Recovered(a.Now, a.ObservedSince, a.Reserve)
}

// CorrectionOf returns the telemetry correction an applied observation
// sets on an engine with the given reservations. Normally that is what
// the engine shows beyond them, max(0, observed - reserved), for KV tokens
// and running sequences (Guarantee 7). While the pool's recovery window is
// open (inWindow: the observation arrived before RecoveringUntil) it is
// everything the engine shows, KV tokens used and running plus waiting
// sequences: requests whose leases were lost and not yet re-asserted are
// in the observation and nowhere else, and counting only what exceeds the
// reservations would let the unused part of re-asserted leases absorb
// them. Re-asserted requests the observation shows are then counted twice
// until the window ends, which errs safe.
func CorrectionOf(obs Observation, reservedKV, reservedSlots int64, inWindow bool) (kv, slots int64) {
	if inWindow {
		return obs.KVTokensUsed, obs.Running + obs.Waiting
	}
	return max(0, obs.KVTokensUsed-reservedKV), max(0, obs.Running-reservedSlots)
}

// recoveryHint is the retry-after hint of a rejection for reason r: for
// ReasonRecovering the pool's hint or the rest of the window, whichever is
// shorter (an engine may recover at its next observation); else retry.
func (a Admission) recoveryHint(r Reason, retry time.Duration) time.Duration {
	if r != ReasonRecovering {
		return retry
	}
	return min(retry, CeilMillis(a.RecoveringUntil.Sub(a.Now)))
}
