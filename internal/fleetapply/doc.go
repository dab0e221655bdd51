// Package fleetapply owns the one procedure that keeps the ledger configured
// as a fleet file says: the router (ledger admission) and the reserver both
// run it. It re-applies the fleet after the ledger lost its state, so it is a
// safety path; keep it in one place.
//
// # One pool's round (ApplyPool)
//
//  1. Discover: the discovery source (Config.Discover, pulled each round,
//     or Learn, pushed by a reconciler) adds engine capacities read from
//     engines' metrics.
//  2. Spec: fleet.PartialPoolSpec with the capacities known. An engine still
//     waiting is left out; a pool with no engine known is pending.
//  3. Keep configured: while some engine waits, Stats reads the ledger and
//     fleet.KeepConfigured keeps what the ledger already has (another
//     applier saw it), so a narrower view never removes an engine.
//  4. Compare: a pool already applied with the same spec and epoch is left
//     alone. The epoch comes from Config.Epoch (the router's holder
//     sessions) or, when that is nil, from Stats (the reserver), which also
//     notices a wiped store (ErrUnknownPool).
//  5. Configure, and record the pool as applied (Publish receives every
//     applied spec), its left-out engines as waiting.
//
// Rules:
//
//	applied(pool) ⇒ the ledger accepted exactly applied(pool).spec (Configure
//	                returned, or it was read back when adopted)
//	waiting engine ∉ applied(pool).spec.Engines
//	pending(pool) ⇒ ¬applied(pool)   (an applied pool keeps its spec when a
//	                later round fails: the ledger still has it)
//
// # Policy: configure or adopt
//
// When Config.MayNotConfigure says a Configure error means the principal may
// not configure (a router behind a reserver), the pool is adopted: the
// ledger's own configuration, restricted to the engines the fleet file lists
// for the pool, with the ledger's capacities (AdoptedSpec). A pool the ledger
// lacks stays pending (ErrAwaitingOwner) and is retried. Adopted pools are
// read again on the same triggers and, while fleet engines are missing from
// the ledger, every round.
//
// # Triggers and timing
//
// Start runs the loop of rounds: every Config.Recheck after a round that
// succeeded, after a jittered exponential backoff (BackoffMin..BackoffMax,
// ±20%) after one that failed, and at once on Kick. Reapply makes the next
// round configure every pool (the ledger refused a candidate). A caller with
// its own schedule (the reserver: a ticker, SIGHUP via Replace) calls
// ApplyAll instead. Every ledger call is bounded by CallTimeout.
//
// What it does not do: it never drains, removes leases or deletes a pool
// from the ledger; a pool dropped from the fleet file keeps its ledger state.
package fleetapply
