// Package capacity is Leasehold's capacity model and the simulated run that
// checks it (docs/operations.md, "Capacity model").
//
// The model (model.go) turns a deployment (pools, engines, routers, the
// request rate, the intervals of keepalives, fleet views, telemetry,
// sweeps and re-application) into the ledger calls per second each kind
// of call makes, and, with each call's measured cost in store CPU, the
// store CPU the deployment needs: how many Redis shards, and how one pool
// (one shard at most) bounds a pool's grant rate.
//
// The simulated run (sim.go) runs such a deployment at the largest scale
// one machine holds, with real parts where they matter: routers are
// lease.Managers (holder sessions, renewals, block leases) over a real
// ledger; a reserver's loops observe, sweep and re-configure every pool;
// every router polls Stats for every pool as its fleet view does. Engines
// are lightweight: each is a counter of the slots and KV tokens its
// granted requests hold, the ground truth an over-admission would show
// in, observed into the ledger like a scraped engine. Every ledger call is
// counted by kind (Counted, a pass-through Ledger), so a run reports the
// rates the model predicts next to the ones that happened, and the store
// CPU it measured next to the CPU the model predicts from them.
//
// The package owns the goroutines of a run and stops them before Run
// returns; it owns no store: callers pass the ledger and a probe of the
// store's CPU.
package capacity
