// Package etcd is the ledger backend on etcd v3 (go.etcd.io/etcd/client/v3).
// It owns the key schema below, the guarded transactions that implement
// every operation, and the sweeper that turns etcd lease expiries into
// released reservations. It is a ledger.Store under ledger.Checked, which
// validates arguments, refuses calls after Close, wraps errors and lists all
// pools.
//
// # Transactions
//
// Every mutating call reads the keys its decision depends on in one
// transaction (a consistent snapshot at one revision), decides — with
// ledger.Admit and ledger.AdmitGrowth for admission, ledger.GrowthOf for
// Grow — and commits one Txn
// whose If compares the ModRevision of every key read with what was read
// (0 for a key that was absent) and, for the engine range, that no engine
// record changed since. If any guard fails nothing is written and the call
// reads and decides again, at most Options.MaxAttempts times (then
// ErrContention). This is the pattern of etcd's concurrency.Mutex: two
// routers can never both take the last capacity, because the pool's
// sequence, the engines and the tenant are in every grant's guards. Within
// one process the attempts on a pool are also serialized by a striped mutex,
// so the guards only arbitrate between processes. Work per call is bounded:
// a handful of keys plus the pool's engine records; no call scans the
// leases except List and the full sweep.
//
// # Time
//
// The ledger's clock is etcd's: nothing ends because a local clock says so
// (but for the orphan hold, below).
// A holder session is an etcd lease (Grant, then one KeepAliveOnce per
// KeepAlive) carrying the holder's live marker. A lease's deadline is a
// marker key on an etcd lease that lives at least until the deadline; the
// recovery window is a marker on an etcd lease of the window's TTL; an
// engine's telemetry is fresh while its fresh marker, on an etcd lease of
// StaleAfter, exists. etcd counts whole seconds and checks expiry every
// 500ms, so every TTL is rounded up and a marker outlives its nominal time by
// up to about a second (plus Options.LeaseSlack where deadline markers share
// an etcd lease): capacity is freed a little late, never early. The recovery
// window is open exactly while its marker exists, and every call reports it
// that way: its nominal end, then, while the marker outlives it, when etcd
// should have deleted the marker; never a past time while it exists. The local
// clock (Options.Clock) only stamps the times reported (Created, Deadline,
// Expires, Now, RecoveringUntil, ObservedAt), mints epochs, orders the expiry
// indexes that bound the sweeps and times the orphan hold, the circuit
// breaker's cooldown below and tenants' rate windows (ledger/rate.go): a
// grant charges the bucket of its process's now and prunes by it, so
// processes whose clocks disagree by d may together admit, in one minute,
// what d more of the window admits beyond a budget (one clock: none).
//
// # Circuit breaker
//
// Each engine's breaker (ledger.Breaker) lives in its engine record, which
// every grant and every end of a lease on the engine writes anyway under
// the guards of its transaction: a grant on a half-open engine takes a
// probe slot, a Release carrying an outcome (or of a probe) applies
// ledger.Breaker.Report, a probe the ledger ends frees its slot, and each
// counts its transitions in the record's counters. Two routers reporting
// at once conflict on the record's guard and one decides again, so each
// transition happens once. The pool's breaker spec is part of the spec in
// its meta record. The cooldown is timed, like the orphan hold, by the
// local clock of the process that reads or writes the breaker: processes
// whose clocks disagree by d see the cooldown end up to d apart. So is the
// record's latest counted failure (failed_ms), against which a success's
// lease, Created by the clock of the process that granted it, is judged
// fresh or stale (ledger.Breaker.Fresh): a lease granted within d of the
// failure may be judged either way.
//
// # Telemetry
//
// An engine record keeps two charges from telemetry, and admission, stale
// policy ignore and Stats count their sum as the correction. The correction
// proper is what the last applied observation saw beyond the reservations.
// The orphan charge is the KV tokens and slots of leases the ledger ended
// (expired, revoked) while the engine had been observed, with the time it
// is held until: the latest end (local clock of the process that ended the
// lease) plus Options.OrphanHold. An applied observation that arrives (local
// clock of the observing process) at or after that time clears the charge;
// one that arrives earlier leaves it. The hold is thus timed by local
// clocks: processes whose clocks disagree by d make it up to d shorter or
// longer. With no hold the ending process sets no time, so the next applied
// observation clears the charge whatever the clocks say. The charge lives
// in the engine record, so it is lost or kept with the correction (a new
// epoch starts without either).
//
// A lease reasserted on an observed engine records its reassert time
// (local clock of the reasserting process) and marks the engine record
// (ReassertedMs). While marked, an applied observation reads every lease of
// the pool and, when it Confirms, moves the record's ConfirmedMs up to its
// arrival less ConfirmGrace: a lease is Unconfirmed while its reassert
// time is after ConfirmedMs, so confirming writes one record, not every
// lease. Like the orphan hold this is timed by local clocks: processes
// whose clocks disagree by more than ConfirmGrace can confirm a lease
// early or late by the difference. Every lease change on an engine writes
// its record, whose guard therefore covers the observation's decision.
// A grant's commit is also guarded by its new lease key being absent, so a
// grant never overwrites a lease (ledger.ErrFenceExhausted when the
// sequence is behind one).
//
// # Expiry and sweeping
//
// etcd deletes an expired marker but cannot decrement counters. A lease has
// ended when its deadline marker or its holder's live marker is gone; it
// keeps counting until swept. Sweeps happen (1) at the start of every
// mutating call and in Sweep, bounded by SweepBatch, through the
// time-ordered indexes byddl and hexp; (2) in a watch-driven worker started
// by New and stopped by Close, which sees markers deleted without their
// records (an expiry, not a release); (3) as a full sweep of every pool when
// that watch starts or restarts (after compaction, or when response headers
// show the store was wiped). Every sweep ends a lease with the same guarded
// transaction as Release, so concurrent sweepers in any process are
// idempotent.
//
// # Epochs
//
// Configure creates a pool when its meta record is missing (first use, or
// the data was lost): it clears the pool's keys, writes meta with a new
// epoch and starts the recovery window. The epoch is max(local clock in µs,
// the greatest epoch this process saw for the pool + 1): a number minted
// once, unique and increasing in practice; nothing compares it with a clock.
//
// # Key schema
//
// All keys live under Options.Prefix (P, default "/leasehold/"). Ids are
// path-escaped, so a '/' in a pool, engine, tenant, holder or request id
// never splits a key; lease ids are "<epoch hex>-<seq hex>"; times are
// 16-digit zero-padded Unix milliseconds so index keys sort by time.
// keys.go is the one file that builds or parses them.
//
//	P/meta/<pool>                        pool meta: epoch, created, spec (JSON)
//	P/pool/<pool>/seq                    last fencing sequence (decimal)
//	P/pool/<pool>/recovering             recovery window marker; value: "<until ms>,<gone ms>" (nominal end, expected deletion); etcd lease TTL = window
//	P/pool/<pool>/engine/<engine>        engine state: drain, circuit breaker, reserved kv/slots/leases, correction, orphan charge and its hold, last observation, counters, last spec once removed, reassert confirmation (JSON)
//	P/pool/<pool>/fresh/<engine>         telemetry freshness marker; etcd lease TTL = StaleAfter
//	P/pool/<pool>/tenant/<tenant>        tenant reserved kv/slots/leases, rejection counters, last spec once removed (JSON)
//	P/pool/<pool>/holder/<holder>        holder session: its etcd lease id, TTL, expiry (JSON); kept until its leases are swept
//	P/pool/<pool>/live/<holder>          holder live marker, on the session's etcd lease
//	P/pool/<pool>/hexp/<ms>/<holder>     index: session expiry time -> holder (bounded dead-session sweeps)
//	P/pool/<pool>/lease/<id>             lease record (JSON)
//	P/pool/<pool>/ddl/<id>               lease deadline marker, on an etcd lease outliving the deadline
//	P/pool/<pool>/byddl/<ms>/<id>        index: deadline -> lease (bounded expiry sweeps)
//	P/pool/<pool>/hl/<holder>/<id>       index: holder -> its leases (revocation when the session dies)
//	P/pool/<pool>/req/<holder>/<request> idempotency: (holder, request id) -> lease id
//
// Counters (PoolStats.Counters) are kept in the engine records (grants,
// replays, releases, expired, revoked, reasserts, released and actual
// tokens, completion lengths, growths) and tenant records (rejections by
// reason) that the counted operation writes anyway, and summed by Stats.
//
// # Elastic leases
//
// The pool's reservation mode and growth headroom are part of the spec in
// its meta record. Admission counts an engine's capacity as the smaller of
// its spec's and the one its last applied observation reported (kept in the
// engine record). Grow writes the lease, its engine's and its tenant's
// records in one guarded transaction, like Resize, and keeps the lease's
// Overgrown flag in its record. When Configure drops an engine or tenant
// that still has leases, it keeps the dropped spec in the record, so their
// growth is checked against the capacity they were granted on and Stats
// reports it.
//
// # What it does not do
//
// It does not make expiry exact: a lease, session, window or freshness
// ends up to about a second after its nominal time. It does not compact
// etcd or defragment it; run etcd with auto-compaction.
package etcd
