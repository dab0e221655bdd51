// Package memory is the embedded, in-process ledger backend: one reserver
// process owns the whole ledger in a hashicorp/go-memdb database, with no
// external service. It is the default behind `--ledger memory://`.
//
// # What it owns
//
// Every pool's configuration, counters, epoch and fencing sequence; engine
// and tenant totals; holder sessions; and the outstanding leases, in
// go-memdb tables (schema.go: pools, engines and tenants share one). Time is the injected ledger.Clock, read inside
// the write transaction and truncated to the millisecond, so the memory,
// Redis and etcd backends agree on every deadline. Argument validation, the
// closed check, error wrapping and the all-pools List are ledger.Checked's;
// this package is the store underneath (ledger.Store).
//
// # Concurrency
//
// Every mutating call (Configure and the calls that go through update) is
// one go-memdb write transaction, and all of them run one at a time through
// the store's combining serializer (serial.go): a caller that finds no
// write running runs its own and then up to maxCombined (64) queued behind
// it, so waiters are not parked on go-memdb's writer lock one scheduling
// delay at a time. The calls it takes together share one write
// transaction, committed before any of them returns (a call that fails in
// the store makes each run again alone). One write at a time makes each
// call atomic and linearizable. Reads (Pools, List, Stats) run on lock-free snapshots and
// never wait for the serializer. The database is itself a go-memdb
// snapshot (New): nothing watches it, and a snapshot skips the watch
// bookkeeping of every write.
//
// # Costs and sweeping
//
// Acquire, Renew, Resize, Grow, Release and Reassert are O(log n) in
// outstanding leases (plus the candidate list). Leases past their deadline and leases of
// dead holder sessions are removed lazily: every mutating call on a pool first
// sweeps at most Options.SweepBatch of them (skipped while the pool's
// SweepFrom, a lower bound on every deadline and expiry, lies ahead), and
// Sweep removes up to a given number. Until swept they keep counting against capacity, which is safe.
// A call that finds an ended lease it was asked about (Renew, Resize,
// Release, a replayed Acquire or Reassert) removes it on the spot.
//
// # Choices where the contract leaves room
//
// A lease or session has ended when the ledger clock reaches its deadline or
// expiry (now >= deadline, in milliseconds). A caller's session is judged
// before the call's own sweep, so KeepAlive on a dead session returns
// ErrSessionExpired at least once even if that call then sweeps it away.
// Release of a lease that had already ended (not yet swept) reports
// Released=false and counts it as expired or revoked, not released.
// Reassert takes the fencing token from the lease id, not from Lease.Fence.
// The pool's mode and growth headroom live in its row beside the
// priorities; an engine's reported capacity is its last applied
// observation's KVTokensTotal, read from the engine row at admission.
//
// # Hazards
//
// The state lives only in this process: a restart loses it. The next
// Configure of a pool then starts a new epoch (the ledger clock in
// microseconds) and a recovery window, during which holders re-assert what
// they still use. Counting live holders (KeepAlive, Stats) scans the pool's
// live sessions: cheap for one session per router, not meant for thousands.
package memory
