// Package fleet owns the fleet file: the one YAML file every reserver and
// router loads to learn the pools, engines, tenants, priority classes and
// lease timings (docs/design.md, "Fleet file").
//
// Parse and Load decode the file strictly — an unknown or repeated field is
// an error naming it and its line — fill in defaults, and run Validate,
// which reports every problem at once, each naming the field path and the
// allowed values (`pools[0].engines[1].kv_tokens: must be > 0`).
//
// API keys are hashed (SHA-256) as the file is read; a Fleet never holds a
// plaintext key. TenantForKey authenticates a bearer key in constant time
// over all configured keys.
//
// An engine's kv_tokens may be omitted: its capacity is then discovered from
// its metrics (telemetry.Reconciler.Discovered) and scaled by its headroom.
// Engine.KVFromMetrics marks such engines, and PoolSpecs, which builds the
// ledger.PoolSpec for each pool, takes the discovered capacities and fails,
// naming the engine, when one has neither. PartialPoolSpec instead builds a
// pool's spec from the engines whose capacity is known and lists the ones
// still waiting, so that one engine that is down does not keep its pool
// unconfigured; a pool with no known engine is still an error. Tenant
// quotas follow the configured engines and grow as waiting engines join.
//
// A pool's max_model_len (the engines' context length) may be omitted too:
// routers then discover it from the engines (internal/route). Pool.MaxModelLen
// is 0 then.
//
// The package only reads configuration; applying it (ledger.Configure on
// start and on every new epoch) is the caller's job.
package fleet
