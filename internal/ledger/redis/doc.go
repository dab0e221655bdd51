// Package redis is the Redis backend of ledger.Ledger: every operation is
// one Lua function of one function library (scripts/lua, embedded and
// assembled by package lua) called with FCALL; a server that lacks the
// library (new, restarted without persistence, a Cluster master added
// since) answers "Function not found", and the store loads it (FUNCTION
// LOAD REPLACE, on every master of a Cluster) and calls again. The
// functions use the server's clock (TIME), so routers' clocks never
// matter. The
// package is a ledger.Store under ledger.Checked, which validates arguments,
// refuses calls after Close, wraps errors and lists all pools.
//
// # Key schema
//
// keySchema in keys.go owns every key name. With prefix P (default "lh") and
// pool p, all of a pool's keys share the {p} hash tag, so a pool is one
// Redis Cluster slot:
//
//	P:{p}:state         HASH the pool's state, one field per group of values
//	                         joined by spaces (ids never contain one):
//	  meta                   "epoch recovering_until cap_kv cap_slots
//	                         retry_after reserve growth_headroom gen" (epoch:
//	                         TIME µs at creation; its presence makes the
//	                         pool known; reserve elastic or worst_case;
//	                         gen the configuration generation, TIME µs or
//	                         one more than the last, new with every spec
//	                         Configure or SetDraining writes: Acquire keeps
//	                         the specs it read by meta, so change e:<id>,
//	                         t:<name> and p:<name> only through them)
//	  seq, sweep_at          fencing sequence; ms before which nothing can
//	                         have expired (a lower bound of every deadline
//	                         and session expiry, lowered by every write of
//	                         one, recomputed by each sweep)
//	  created, order         ms the epoch began (recovery reads it);
//	                         priority names joined by spaces
//	  breaker                "failures cooldown_ms probes successes": the
//	                         pool's breaker spec, defaults applied
//	                         (ledger.BreakerSpec; failures < 0: off)
//	  e:<id>                 "configured kv slots stale_ns policy draining"
//	  e:<id>:r, e:<id>:c     "rkv rslots nleases" (reservations), "ckv cslots
//	                         obs_arrived" (telemetry correction)
//	  e:<id>:o               "okv oslots until_ms": the orphan charge of
//	                         leases the ledger ended on an observed engine,
//	                         counted with the correction (and reported in
//	                         Stats as part of it) until an observation
//	                         arrives at or after until_ms, the latest end
//	                         plus Options.OrphanHold
//	  e:<id>:url, e:<id>:obs the URL; "used total running waiting sec nsec"
//	                         (total, when > 0 and below kv, is the
//	                         engine's capacity: see "Capacity truth" in
//	                         package ledger)
//	  e:<id>:u               "since slots n": since the ms of the latest
//	                         Reassert that left an unconfirmed lease on the
//	                         engine, slots and n the sums of the slots and
//	                         the count of its unconfirmed leases; while
//	                         present, observe.lua looks for leases to
//	                         confirm. Written before the sums it is since
//	                         alone (the next scan writes them)
//	  e:<id>:b               "state failures successes opened_ms probes
//	                         failed_ms": the engine's circuit breaker
//	                         (ledger.Breaker; state closed, open or
//	                         half_open, stored as last written: readers
//	                         apply Breaker.At; failed_ms LastFailureAt, 0
//	                         when none); absent reads closed, without
//	                         failed_ms reads 0
//	  t:<name>, t:<name>:r   "configured kv_share slot_share
//	                         tokens_per_minute requests_per_minute" (rate
//	                         budgets, 0: none); reservations
//	  t:<name>:w             a rated tenant's rate window (ledger/rate.go):
//	                         "at tokens requests ..." per bucket, oldest
//	                         first, at its start in ms (lib_rate.lua)
//	  rate_window            ms: PoolSpec.RateWindow; absent, a minute
//	  p:<name>               max_fill
//	  c:<name>               ledger.Counter* names, "rejections:<reason>"
//	                         and, written before n:<name>, the
//	                         completion-length counters
//	                         (ledger.CompletionCounters); c:failovers
//	                         counts epochs started by a promotion; the
//	                         total rejections is the sum of the
//	                         reasons' (c:rejections, written before,
//	                         is left as it is and not read)
//	  n:<name>               a tenant's completion-length counter
//	                         ("completions/<bound>/<tenant>"), which
//	                         counts for the pool's ("completions/<bound>")
//	                         too: Release adds one to it alone, Stats adds
//	                         it to both (and the older c: fields of each)
//	  g:<group>              the counters one operation adds to on every
//	                         call, in one field: "releases
//	                         released_kv_tokens actual_prompt_tokens
//	                         actual_completion_tokens" (g:release); Stats
//	                         adds a counter's c:<name>, which scripts
//	                         before groups wrote, to its place in a group
//	  repl                   "<master_replid> <node id or ->": the server
//	                         that last wrote the pool (see "Ledger loss")
//	  window                 the recovery window (ms) Configure was given
//	  hashtable              a fixed text longer than hash-max-listpack-value
//	                         (64 bytes by default), written by Configure and
//	                         read by nothing: it keeps the hash a hash table
//	                         (constant-time fields) instead of a listpack (a
//	                         scan per field); see lib.lua
//	P:{p}:engines       SET  engine ids with fields in state
//	P:{p}:tenants       SET  tenant names with fields in state
//	P:{p}:leases        HASH lease id -> "id engine tenant priority kv slots
//	                         holder req created deadline fence_epoch
//	                         fence_seq reasserted owns_req overgrown since
//	                         probe [tokens]" (since: the ms of the Reassert
//	                         that left the lease unconfirmed, 0 for every
//	                         other lease; probe: 1 for a probe lease on a
//	                         half-open engine; tokens: what the grant
//	                         charged to its tenant's rate window, written
//	                         only when not 0)
//	P:{p}:deadlines     ZSET lease id, score deadline (ms): every
//	                         outstanding lease, and the expiry index
//	P:{p}:holders       ZSET holder id, score session expiry (ms)
//	P:{p}:holder:<h>    SET  lease ids held by h
//	P:{p}:req           HASH "<holder> <request id>" -> lease id
//	P:pools             SET  pool names (written after Configure; Pools keeps
//	                         only those whose state exists)
//
// scripts/lua/lib.lua lists the same layout for the scripts. A hot script
// (Acquire, Renew, Resize, Release, KeepAlive) reads the pool in one HMGET
// of a few fields and writes it back in one HSET of absolute values; it
// touches O(1) keys plus O(log n) sorted-set updates. Every mutating script
// sweeps at most Options.SweepBatch expired leases and dead sessions' leases
// first, but only once the ledger clock reaches sweep_at: before then
// nothing can have expired and every session is live.
//
// The last two fields of meta and overgrown in a lease record came with
// reservation modes, since and e:<id>:u with bounded reasserts, breaker,
// e:<id>:b and probe with circuit breakers, and e:<id>:b's failed_ms with
// stale successes, the budgets of t:<name>, t:<name>:w, rate_window and
// tokens with rate budgets, meta's gen with the specs Acquire keeps, the
// sums of e:<id>:u with the marked engine's cheap observation. The
// scripts read a meta, a pool or a lease
// record written before them (elastic, no headroom, not overgrown,
// confirmed, the default breaker spec, every breaker closed, not a probe,
// no failure counted, no budget, nothing charged), but earlier scripts do not read what these write: keep
// every reserver and router on one version (docs/operations.md,
// "Upgrading without losing a lease").
//
// # Ledger loss
//
// A pool whose state has no meta field (FLUSHALL, restart without persistence,
// failover that lost it) is unknown: every call fails with
// ledger.ErrUnknownPool until Configure runs again, which starts a new epoch
// (TIME in microseconds) and its recovery window.
//
// A failover loses less, and silently: the promoted replica (Sentinel,
// redis+sentinel://; a Redis Cluster failover; REPLICAOF NO ONE) holds the
// pool as the old primary had it before the writes it had not replicated
// yet, and so does a primary restarted from its RDB or AOF. Grants it
// acknowledged may be gone (their engines still run them), the fencing
// sequence may have gone back (a later grant would reuse a lost lease's
// id), sessions may expire earlier. Every such server has another
// replication id than the one the pool records (field repl), so the first
// script there that writes the pool, release, grow and a shrinking resize
// aside, starts a new epoch in place (failover in lib.lua): later than the
// old one, with the pool's recovery window, every lease, session and spec
// the server holds kept. Holders see it at their next KeepAlive and
// re-assert what they hold, the lost leases among them (under their old
// fences: no id is reused). Not a new epoch: a Redis Cluster slot migrated to another
// master (MIGRATE moves whole keys), and, for a client with WaitReplicas > 0, a promoted replica of
// the recorded server (Sentinel and Redis Cluster promote the replica
// with the most replicated data, which has every acknowledged change): a
// Sentinel failover then refuses nothing. Every client of one store
// should use one wait_replicas setting: a waiting client keeps the epoch
// on a promotion that may have lost a non-waiting client's grant. Two
// promotions with no write to the pool between them (releases and growths
// aside) read as one, which only matters for a pool no router keeps
// alive. Each check costs one INFO replication (and CLUSTER MYID on a
// cluster) per writing script, about 3 µs of server time. Release and
// grow skip it: they admit nothing and mint no id, so on a promoted
// server they act on the leases it kept as in its new epoch, which the
// next script that admits or keeps a session starts.
//
// # Choices where the contract leaves room
//
//   - Every new epoch, including a pool's first, starts a recovery window:
//     the store cannot tell a new pool from a lost one.
//   - A session already dead when KeepAlive, Acquire or Reassert arrives
//     reports ledger.ErrSessionExpired even if that call's sweep removes it;
//     later calls see no session and KeepAlive starts a fresh one.
//   - Renew, Resize and Grow of a lease whose holder's session is not live
//     fail with ledger.ErrLeaseNotFound: the lease has ended.
//   - Grow's errors for a worst_case pool, a size below the lease's or
//     above the engine's capacity read as ledger.GrowthOf's; the pool's
//     name travels in the script's ARGV only for that message.
//   - Release of a lease that has already ended removes it as expired or
//     revoked and reports Released=false.
//   - Acquire fails with ledger.ErrUnknownEngine if any candidate is not
//     configured.
//   - List of a pool that does not exist returns no leases and no error.
//   - Reassert applies ledger.CheckReassert in reassert.lua (the fence and
//     the id agree: ledger.ValidateReassert checked them). Sequences and
//     epochs are exact Lua numbers: ledger.MaxFenceSeq is 2^53-1, and epochs
//     are TIME microseconds (below 2^53 for millennia); acquire.lua refuses a
//     grant at MaxFenceSeq, or onto an id a lease holds, with
//     ledger.ErrFenceExhausted.
//   - Confirming an unconfirmed lease (observe.lua) reads every lease of the
//     pool: only an observation of an engine marked e:<id>:u that may
//     confirm pays it, one showing at least as many sequences as the slots
//     of the engine's unconfirmed leases (every one of them is expected, so
//     fewer confirms nothing), until no unconfirmed lease is left on the
//     engine.
//   - CheckTotals is one read-only script (totals.lua).
//   - A breaker's cooldown is timed by Redis TIME, like every deadline.
//     A grant, a Release with an outcome or of a probe, and the end of a
//     probe lease store the breaker as read at that time
//     (ledger.Breaker.Advance), so "breaker:half_open" is counted by the
//     first of those after the cooldown; Stats reads it half-open at once.
//   - Durations are sent in whole milliseconds, rounded up.
package redis
