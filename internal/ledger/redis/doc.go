// Package redis is the Redis backend of ledger.Ledger: every operation is
// one Lua script (scripts/lua, embedded by package lua) run with EVALSHA,
// falling back to EVAL when the server lost its script cache. The scripts
// use the server's clock (TIME), so routers' clocks never matter.
//
// # Key schema
//
// keySchema in keys.go owns every key name. With prefix P (default "lh") and
// pool p, all of a pool's keys share the {p} hash tag, so a pool is one
// Redis Cluster slot:
//
//	P:{p}:meta          HASH epoch (TIME µs at creation), seq (fencing
//	                         sequence), recovering_until (ms), created (ms),
//	                         cap_kv, cap_slots, retry_after (ms),
//	                         priority_order
//	P:{p}:engines       SET  engine ids that have a hash
//	P:{p}:engine:<id>   HASH configured, url, kv, slots, stale_ns, policy,
//	                         draining, rkv, rslots, nleases (reservations),
//	                         ckv, cslots (telemetry correction), obs_* (last
//	                         observation), obs_arrived (ms)
//	P:{p}:tenants       SET  tenant names that have a hash
//	P:{p}:tenant:<name> HASH configured, kv_share, slot_share, rkv, rslots,
//	                         nleases
//	P:{p}:priorities    HASH priority name -> max_fill
//	P:{p}:lease:<id>    HASH id, engine, tenant, priority, kv, slots, holder,
//	                         req, created, deadline, fence_epoch, fence_seq,
//	                         reasserted
//	P:{p}:deadlines     ZSET lease id, score deadline (ms): every
//	                         outstanding lease, and the expiry index
//	P:{p}:holders       ZSET holder id, score session expiry (ms)
//	P:{p}:holder:<h>    SET  lease ids held by h
//	P:{p}:req           HASH "<holder> <request id>" -> lease id
//	P:{p}:counters      HASH ledger.Counter* names and "rejections:<reason>"
//	P:pools             SET  pool names (written after Configure; Pools keeps
//	                         only those whose meta exists)
//
// Acquire, Renew and Release touch O(1) keys plus O(log n) sorted-set
// updates; every mutating script first sweeps at most Options.SweepBatch
// expired leases and dead sessions' leases.
//
// # Ledger loss
//
// A pool whose meta hash is missing (FLUSHALL, restart without persistence,
// failover that lost it) is unknown: every call fails with
// ledger.ErrUnknownPool until Configure runs again, which starts a new epoch
// (TIME in microseconds) and its recovery window.
//
// # Choices where the contract leaves room
//
//   - Every new epoch, including a pool's first, starts a recovery window:
//     the store cannot tell a new pool from a lost one.
//   - A session already dead when KeepAlive, Acquire or Reassert arrives
//     reports ledger.ErrSessionExpired even if that call's sweep removes it;
//     later calls see no session and KeepAlive starts a fresh one.
//   - Renew and Resize of a lease whose holder's session is not live fail
//     with ledger.ErrLeaseNotFound: the lease has ended.
//   - Release of a lease that has already ended removes it as expired or
//     revoked and reports Released=false.
//   - Acquire fails with ledger.ErrUnknownEngine if any candidate is not
//     configured.
//   - List of a pool that does not exist returns no leases and no error.
//   - Reassert takes the fence from the lease id (the id is the lease's
//     identity) and refuses, with ledger.ErrInvalidArgument, a current-epoch
//     sequence of 2^53 or more, which the pool's counter could not carry.
//   - Durations are sent in whole milliseconds, rounded up.
package redis
