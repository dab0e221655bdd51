// Package enginehealth is what one router knows of each engine's health,
// for ranking (internal/rank): the engine's circuit breaker and drain
// flag as the ledger last showed them (fleet-view polls of Stats,
// fleet-wide), and the dispatch failures this router saw itself
// (connect errors, resets, 5xx, first-byte timeouts), which demote the
// engine below healthy ones for a decaying period.
//
// The failure score of an engine gains 1 per failure, is halved by a
// success, and halves every HalfLife; the engine is demoted while it is at
// least 1/2. One failure thus demotes it for one HalfLife, a run of them
// for longer, and successes (a demoted engine still gets requests when the
// healthy ones are full) shorten it. The dispatch code reports with
// Failure and Success; nothing here is shared with other routers (the
// breaker in the ledger is).
//
// It decides nothing: an engine whose breaker is open is left out of the
// candidates by the ranking, and the ledger refuses it anyway
// (ledger.ReasonBreakerOpen); a half-open one is ranked last, and the
// ledger keeps its probe budget.
package enginehealth
