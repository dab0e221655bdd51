// Package rank orders the candidate engines of one request (the router's
// step 4, docs/design.md, "A request's way through the router"). The
// ledger decides what fits; the order only says where to try first, and
// which engines not to try at all.
//
// Exclusion and tiers come first, whatever the capacity:
//
//   - an engine whose circuit breaker is open, or that is draining, is no
//     candidate (the ledger would refuse it);
//   - then half-open engines: the ledger grants at most the pool's
//     breaker probes on them fleet-wide and passes over them to the next
//     candidate in the same Acquire once those are out, so trying them
//     first costs at most that many requests a failover, and an engine
//     that healed closes again at once instead of waiting for the healthy
//     ones to fill up (ranked last, a recovered engine stayed half-open
//     through the whole engine-failure scenario while one engine of four
//     carried the load);
//   - then healthy engines, then engines this router saw fail recently
//     (internal/enginehealth: a crashed engine fails fast, frees its
//     leases and looks the emptiest).
//
// Within a tier the score is free capacity, the smaller of the free KV and
// free slot fractions as the router sees them (its own leases and the
// fleet view's totals), plus AffinityBonus for the engine the prompt's
// leading bytes prefer by rendezvous hashing (highest hash of prefix and
// engine id: requests sharing a prefix go to the same engine while it has
// room, where its prefix cache may hold them), less a latency penalty:
// TTFTWeight × (estimate − best estimate) / max(best estimate, 50 ms),
// at most TTFTWeight, so an engine whose estimated time to first token is
// half again the best one's gives up a quarter of its free capacity.
// Ties are broken by the rendezvous order, so the choice is stable.
package rank
