// Package lease owns the router's side of leasing: its holder sessions,
// the local table of leases it holds, their renewal and re-assertion, and
// self-fencing. The router's HTTP proxy calls Manager.Acquire before it
// dispatches, selects on Held.Done while it streams, and calls
// Held.Release with the actual usage when the request ends.
//
// # Sessions and self-fencing
//
// A Manager keeps one holder session per pool (Config.Pools) alive with
// one loop each: the cost is per router, not per request. Holder ids are
// "<HolderName>/<tag>.<nonce>", fresh per Manager and after the ledger
// reports the session expired: tag is derived from Config.HolderKey, the
// secret a reserver checks them against (internal/ledger/holderkey), and
// the nonce is random. A KeepAlive that succeeds confirms the session as
// of its local send time S (monotonic clock); without a later confirmation
// the pool fences itself at S+SessionTTL-SafetyMargin, before the ledger
// can expire the session by its own clock: every held lease's Done closes
// with ErrFenced, and Acquire fails with ErrFenced without calling the
// ledger (fail-closed). The next successful KeepAlive lifts the fence; the
// fenced leases stay closed.
//
// # Renewal and ledger loss
//
// Leases get a deadline of LeaseTTL (jittered) and are renewed in the
// background, in bounded batches, once half of it has passed. When the
// ledger loses state (a new epoch seen by KeepAlive, ErrUnknownPool after
// which Config.Reconfigure re-applies the pool, or ErrLeaseNotFound on a
// renewal while the session is confirmed) the Manager re-asserts the
// leases it holds; a lease that cannot be re-asserted is lost (Done closes
// with ErrLeaseLost).
//
// # Local table
//
// Held leases are rows of a map by (pool, id) under one mutex (table.go:
// every request writes it twice, and only background work reads it whole,
// so it is not a go-memdb table). Rows are immutable; Snapshot is a
// consistent copy for metrics, the audit and the background scans. What
// this router holds per engine, read on every request for ranking, is kept
// up to date with each write (HeldByEngine) rather than scanned.
//
// # Block leases
//
// Optional (Config.Block; off by default). Admit carves small requests
// out of block leases: ordinary leases of Config.Block's size, one per
// (pool, engine, tenant, priority) so the ledger checks capacity,
// max_fill and the tenant's quota when a block is granted. A request
// that fits a live block's free part is admitted locally (a *Sub, no
// ledger call) and gives its share back on Release; anything else is
// acquired on its own. Blocks are renewed, re-asserted and fenced like
// any lease (a fenced block closes Done of every sub-request), refilled
// in the background below a low-water mark (bounded per engine), and
// released when idle or on Close. While the ledger is unreachable, held
// blocks keep admitting for Block.CarveWithin after the last confirmed
// KeepAlive (the Manager keeps alive at least every CarveWithin/2 with
// blocks on), the only capacity this router uses then; a block of an
// epoch the ledger lost admits nothing more, so no sub-request starts on
// lost capacity later than the ledger's dispatch grace after the loss
// (docs/design.md, "Recovery after ledger loss"). See block.go.
//
// # Not here
//
// Token estimation, engine ranking, queueing and the HTTP mapping of
// rejections belong to internal/route. The Manager exports counters
// (Stats) but registers no metrics itself.
package lease
