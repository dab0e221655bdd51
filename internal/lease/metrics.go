package lease

import (
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Rejection reasons the Manager adds to ledger.Reasons in
// Counters.Rejections.
const (
	// RejectFenced: Acquire refused locally because the session is not
	// confirmed (fail-closed).
	RejectFenced = "fenced"
	// RejectError: the ledger failed with something other than a
	// capacity or quota rejection (transport, unknown tenant, ...).
	RejectError = "error"
)

// Counters are the Manager's monotonic counters, for the router to export
// (leasehold_router_lease_*_total). Read them with Manager.Stats.
type Counters struct {
	Grants  uint64 // leases granted (replays included)
	Replays uint64 // grants that were idempotent replays
	// AcquireRetries counts re-sends of the same request after a
	// transport error.
	AcquireRetries uint64
	// Rejections by reason: every ledger.Reason plus RejectFenced and
	// RejectError. Every key is present.
	Rejections      map[string]uint64
	Releases        uint64 // Release calls that reached the ledger
	ReleaseFailures uint64 // releases left to retry in the background
	Renewals        uint64
	RenewFailures   uint64
	Reasserts       uint64 // leases re-inserted after ledger loss
	ReassertFailed  uint64 // leases that could not be re-inserted
	Lost            uint64 // leases whose Done closed with ErrLeaseLost
	Fences          uint64 // times a pool's session fenced itself
	FencedLeases    uint64 // leases whose Done closed with ErrFenced
	Recoveries      uint64 // fenced pools confirmed again
	KeepAlives      uint64
	KeepAliveFails  uint64
	ExpiredSessions uint64 // sessions the ledger reported expired
	EpochChanges    uint64
	Reconfigures    uint64 // Reconfigure hook calls

	// Block leases (Config.Block). LocalAdmits counts requests admitted
	// against a block without a ledger call; LedgerCallsSaved the
	// Acquire and Release calls they avoided (2 each), before the blocks'
	// own BlockAcquires and BlockReleases calls (and renewals).
	// BlockRefusals counts block acquisitions that failed (also counted
	// in Rejections).
	LocalAdmits      uint64
	LedgerCallsSaved uint64
	BlockAcquires    uint64
	BlockReleases    uint64
	BlockRefusals    uint64
}

// PoolStatus is the session state of one pool.
type PoolStatus struct {
	Pool   ledger.PoolID
	Holder ledger.HolderID
	Epoch  ledger.Epoch
	// Confirmed is false while fenced.
	Confirmed bool
	// ConfirmedAt is the local send time of the last successful KeepAlive;
	// FenceAt is when the pool fences itself without another one.
	ConfirmedAt time.Time
	FenceAt     time.Time
	// Held counts its leases in the local table, Reasserted those the
	// ledger flagged as re-asserted, Fenced those whose Done closed.
	Held, Reasserted, Fenced int
}

// Stats is a point-in-time view of the Manager.
type Stats struct {
	Counters Counters
	Pools    []PoolStatus
	// Held, Reasserted and Fenced total the pools' (block leases are
	// held leases).
	Held, Reasserted, Fenced int
	// Blocks counts live block leases, BlockSubs the sub-requests
	// admitted against them and not yet released.
	Blocks, BlockSubs int
}

// rejectKeys are the keys of Counters.Rejections, in a fixed order.
var rejectKeys = func() []string {
	keys := make([]string, 0, len(ledger.Reasons)+2)
	for _, r := range ledger.Reasons {
		keys = append(keys, string(r))
	}
	return append(keys, RejectFenced, RejectError)
}()

// counters are the live atomics behind Counters.
type counters struct {
	grants, replays, acquireRetries             atomic.Uint64
	rejections                                  []atomic.Uint64 // by rejectKeys index
	releases, releaseFailures                   atomic.Uint64
	renewals, renewFailures                     atomic.Uint64
	reasserts, reassertFailed, lost             atomic.Uint64
	fences, fencedLeases, recoveries            atomic.Uint64
	keepAlives, keepAliveFails, expiredSessions atomic.Uint64
	epochChanges, reconfigures                  atomic.Uint64
	localAdmits, blockAcquires, blockReleases   atomic.Uint64
	blockRefusals                               atomic.Uint64
}

func newCounters() *counters {
	return &counters{rejections: make([]atomic.Uint64, len(rejectKeys))}
}

func (c *counters) reject(key string) {
	for i, k := range rejectKeys {
		if k == key {
			c.rejections[i].Add(1)
			return
		}
	}
	c.rejections[len(rejectKeys)-1].Add(1) // RejectError
}

func (c *counters) snapshot() Counters {
	out := Counters{
		Grants: c.grants.Load(), Replays: c.replays.Load(), AcquireRetries: c.acquireRetries.Load(),
		Rejections: make(map[string]uint64, len(rejectKeys)),
		Releases:   c.releases.Load(), ReleaseFailures: c.releaseFailures.Load(),
		Renewals: c.renewals.Load(), RenewFailures: c.renewFailures.Load(),
		Reasserts: c.reasserts.Load(), ReassertFailed: c.reassertFailed.Load(), Lost: c.lost.Load(),
		Fences: c.fences.Load(), FencedLeases: c.fencedLeases.Load(), Recoveries: c.recoveries.Load(),
		KeepAlives: c.keepAlives.Load(), KeepAliveFails: c.keepAliveFails.Load(),
		ExpiredSessions: c.expiredSessions.Load(),
		EpochChanges:    c.epochChanges.Load(), Reconfigures: c.reconfigures.Load(),
		LocalAdmits: c.localAdmits.Load(), LedgerCallsSaved: 2 * c.localAdmits.Load(),
		BlockAcquires: c.blockAcquires.Load(), BlockReleases: c.blockReleases.Load(),
		BlockRefusals: c.blockRefusals.Load(),
	}
	for i, k := range rejectKeys {
		out.Rejections[k] = c.rejections[i].Load()
	}
	return out
}
