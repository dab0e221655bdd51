package ledger

import (
	"context"
	"time"
)

// Ledger is the shared reservation ledger. See the package documentation for
// the semantics every implementation provides; the conformance suite in
// ledgertest checks them.
//
// Every method is safe for concurrent use and atomic. Errors are either a
// *Rejection (errors.Is ErrRejected), one of the package sentinels wrapped
// with context, or a transport/backend failure: after a backend failure the
// outcome is unknown, and retrying is safe (Acquire is idempotent on
// (holder, request id), Release on the lease id).
type Ledger interface {
	// Configure applies a pool's spec idempotently and returns its epoch.
	Configure(ctx context.Context, spec PoolSpec) (Epoch, error)
	// SetDraining drains (no new grants) or undrains an engine.
	SetDraining(ctx context.Context, pool PoolID, engine EngineID, draining bool) error

	// KeepAlive creates or extends the holder's session in a pool.
	KeepAlive(ctx context.Context, pool PoolID, holder HolderID, ttl time.Duration) (Session, error)
	// Acquire grants capacity on the first fitting candidate.
	Acquire(ctx context.Context, req AcquireRequest) (Grant, error)
	// Renew extends a lease's deadline to now+ttl.
	Renew(ctx context.Context, ref LeaseRef, ttl time.Duration) (Renewal, error)
	// Resize sets a lease's KV tokens; growth must fit.
	Resize(ctx context.Context, ref LeaseRef, kvTokens int64) (Renewal, error)
	// Grow raises an elastic lease's KV tokens to what its engine already
	// holds for it; never refused for capacity (see "Reservation modes").
	Grow(ctx context.Context, ref LeaseRef, kvTokens int64) (Renewal, error)
	// Release ends a lease; idempotent.
	Release(ctx context.Context, ref LeaseRef, usage Usage) (Released, error)
	// Reassert re-inserts a lease its live holder still uses after ledger
	// loss, with deadline now+ttl.
	Reassert(ctx context.Context, lease Lease, ttl time.Duration) (Grant, error)

	// Observe records engine telemetry.
	Observe(ctx context.Context, obs Observation) (Observed, error)
	// Sweep removes up to max expired leases and dead sessions' leases.
	Sweep(ctx context.Context, pool PoolID, max int) (Swept, error)

	// Pools lists configured pools, sorted.
	Pools(ctx context.Context) ([]PoolID, error)
	// List returns outstanding leases matching f, including expired ones not
	// yet swept, ordered by pool then fence.
	List(ctx context.Context, f Filter) ([]Lease, error)
	// Stats returns a pool's totals.
	Stats(ctx context.Context, pool PoolID) (PoolStats, error)

	// Close releases the backend's resources (not the leases).
	Close() error
}

// Clock is the ledger's time source where a backend keeps its own clock
// (the memory backend). Backends on a store use the store's clock.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Defaults shared by backends.
const (
	// DefaultRetryAfter is the capacity-rejection hint when a pool sets none.
	DefaultRetryAfter = time.Second
	// DefaultRecoveryWindow is how long a new epoch's recovery window
	// lasts when Options leave it 0: the default session TTL, which is what
	// the window must cover (docs/design.md, "Recovery after ledger loss").
	// Deployments set it to their own session TTL (fleet.Lease).
	DefaultRecoveryWindow = 10 * time.Second
	// DefaultSweepBatch bounds the expired items removed per call.
	DefaultSweepBatch = 64
	// MaxAmount bounds KV tokens and slots per lease (exact in float64).
	MaxAmount = int64(1) << 40
	// MaxCandidates bounds the candidate list of one Acquire.
	MaxCandidates = 256
	// MaxIDLen bounds every identifier's length in bytes.
	MaxIDLen = 256
	// DefaultConfirmWithin is Options.ConfirmWithin's default.
	DefaultConfirmWithin = 30 * time.Second
	// DefaultConfirmGrace is Options.ConfirmGrace's default.
	DefaultConfirmGrace = time.Second
)

// Options are the settings every backend shares. The zero value is the
// defaults.
type Options struct {
	// RecoveryWindow is how long after a new epoch an engine takes new
	// grants and growth only once telemetry shows what it holds (see the
	// package doc, "Recovery"); at its end every engine takes them again.
	// 0 means DefaultRecoveryWindow, negative means no window.
	RecoveryWindow time.Duration
	// SweepBatch bounds expired leases and dead sessions handled per call;
	// 0 means DefaultSweepBatch.
	SweepBatch int
	// OrphanHold is how long a lease the ledger ends on an observed engine
	// stays charged at its full amounts however observations read (see
	// the package doc, "Observe"); 0, the default, charges it until the
	// next observation only. Negative is 0.
	OrphanHold time.Duration
	// ConfirmWithin bounds how long a lease reasserted on an engine that
	// has telemetry may stay Unconfirmed: its deadline (at Reassert and at
	// every Renew) is never set past its reassert time plus ConfirmWithin
	// until an observation of its engine confirms it (see the package doc,
	// "Reassert"). 0 means DefaultConfirmWithin; negative is the default.
	ConfirmWithin time.Duration
	// ConfirmGrace is the dispatch grace: how long after its grant a lease
	// may still be missing from its engine's report (dispatch and scrape
	// latency). An observation arriving less than ConfirmGrace after a
	// lease was granted does not expect to see it, one arriving less than
	// ConfirmGrace after a reassert does not confirm it, and after a new
	// epoch only an observation taken ConfirmGrace after the epoch began
	// ends an engine's recovery (RecoverySince). 0 means
	// DefaultConfirmGrace; negative is the default.
	ConfirmGrace time.Duration
}

// WithDefaults returns o with zero fields set to their defaults.
func (o Options) WithDefaults() Options {
	if o.RecoveryWindow == 0 {
		o.RecoveryWindow = DefaultRecoveryWindow
	}
	if o.RecoveryWindow < 0 {
		o.RecoveryWindow = 0
	}
	if o.SweepBatch <= 0 {
		o.SweepBatch = DefaultSweepBatch
	}
	o.OrphanHold = max(o.OrphanHold, 0)
	if o.ConfirmWithin <= 0 {
		o.ConfirmWithin = DefaultConfirmWithin
	}
	if o.ConfirmGrace <= 0 {
		o.ConfirmGrace = DefaultConfirmGrace
	}
	return o
}
