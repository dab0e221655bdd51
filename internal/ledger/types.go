package ledger

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// PoolID names a pool: the engines serving one model. It is the OpenAI
// "model" a request names.
type PoolID string

// EngineID names one GPU engine replica within a pool.
type EngineID string

// TenantID names a consumer with a fleet-wide quota.
type TenantID string

// PriorityName names a priority class such as "interactive" or "batch".
type PriorityName string

// HolderID names one holder session: one per router process incarnation.
type HolderID string

// NoHolder is the zero HolderID.
const NoHolder HolderID = ""

// RequestID is the caller's idempotency key for Acquire.
type RequestID string

// LeaseID identifies a lease within its pool. It is unique across epochs:
// "<epoch hex>-<sequence hex>".
type LeaseID string

// NoLease is the zero LeaseID.
const NoLease LeaseID = ""

// Epoch identifies one incarnation of a pool's ledger state. It changes when
// the state was lost and the pool configured again. It is the ledger clock in
// microseconds when the state was created, so a later epoch compares greater.
type Epoch uint64

// NoEpoch is the zero Epoch.
const NoEpoch Epoch = 0

// Fence is a fencing token: compare (Epoch, Seq) lexicographically. Seq
// strictly increases per pool within an epoch.
type Fence struct {
	Epoch Epoch
	Seq   uint64
}

// Less reports whether f was issued before g.
func (f Fence) Less(g Fence) bool {
	if f.Epoch != g.Epoch {
		return f.Epoch < g.Epoch
	}
	return f.Seq < g.Seq
}

// SortByFence sorts leases by fence, the order List returns a pool's leases in.
func SortByFence(leases []Lease) {
	slices.SortFunc(leases, func(a, b Lease) int {
		switch {
		case a.Fence.Less(b.Fence):
			return -1
		case b.Fence.Less(a.Fence):
			return 1
		}
		return 0
	})
}

// String formats f as "<epoch>.<seq>".
func (f Fence) String() string { return fmt.Sprintf("%d.%d", f.Epoch, f.Seq) }

// MakeLeaseID returns the lease id for a fencing token.
func MakeLeaseID(f Fence) LeaseID {
	return LeaseID(strconv.FormatUint(uint64(f.Epoch), 16) + "-" + strconv.FormatUint(f.Seq, 16))
}

// ParseLeaseID returns the fencing token a lease id was made from.
func ParseLeaseID(id LeaseID) (Fence, error) {
	e, s, ok := strings.Cut(string(id), "-")
	if !ok {
		return Fence{}, fmt.Errorf("%w: malformed lease id %q", ErrInvalidArgument, id)
	}
	ep, err1 := strconv.ParseUint(e, 16, 64)
	seq, err2 := strconv.ParseUint(s, 16, 64)
	if err1 != nil || err2 != nil {
		return Fence{}, fmt.Errorf("%w: malformed lease id %q", ErrInvalidArgument, id)
	}
	return Fence{Epoch: Epoch(ep), Seq: seq}, nil
}

// StalePolicy says what Acquire does when an engine's telemetry is stale.
type StalePolicy string

const (
	// StaleHold keeps the last telemetry correction (the default).
	StaleHold StalePolicy = "hold"
	// StaleBlock refuses new grants on the engine until telemetry is fresh.
	StaleBlock StalePolicy = "block"
	// StaleIgnore drops the correction and admits on reservations alone.
	StaleIgnore StalePolicy = "ignore"
)

// EngineSpec is an engine's configuration within a pool.
type EngineSpec struct {
	ID EngineID
	// URL is where the engine serves; informational for the ledger.
	URL string
	// KVTokens is the admissible KV-cache capacity in tokens (> 0).
	KVTokens int64
	// Slots is the admissible number of concurrent sequences (> 0).
	Slots int64
	// StaleAfter is how long after the last Observe telemetry counts as
	// stale; 0 means the engine is not expected to report telemetry.
	StaleAfter time.Duration
	// StalePolicy applies while telemetry is stale; empty means StaleHold.
	StalePolicy StalePolicy
}

// TenantSpec is a tenant's quota within a pool.
type TenantSpec struct {
	Name TenantID
	// KVShare is the tenant's share of the pool's KV tokens, in (0, 1].
	KVShare float64
	// SlotShare is the tenant's share of the pool's slots, in [0, 1];
	// 0 means no slot quota.
	SlotShare float64
	// TokensPerMinute is the tenant's token budget in this pool per rate
	// window (PoolSpec.RateWindow, a minute): the tokens its grants may
	// charge in any window, 0..MaxAmount; 0 means none. See rate.go.
	TokensPerMinute int64
	// RequestsPerMinute is the tenant's request budget in this pool per
	// rate window, 0..MaxAmount; 0 means none.
	RequestsPerMinute int64
}

// Rated reports whether t has a token or request budget: its grants are
// then charged to its rate window.
func (t TenantSpec) Rated() bool { return t.TokensPerMinute > 0 || t.RequestsPerMinute > 0 }

// PrioritySpec is a priority class.
type PrioritySpec struct {
	Name PriorityName
	// MaxFill is the fraction of an engine's KV tokens and slots that leases
	// of this class may fill, in (0, 1].
	MaxFill float64
}

// PoolSpec is everything Configure applies for one pool.
type PoolSpec struct {
	Name       PoolID
	Engines    []EngineSpec
	Tenants    []TenantSpec
	Priorities []PrioritySpec
	// RetryAfter is the hint returned with capacity rejections; 0 means 1s.
	RetryAfter time.Duration
	// Reserve is how leases in the pool reserve KV tokens; empty means
	// ReserveElastic. See the package doc, "Reservation modes".
	Reserve ReserveMode
	// GrowthHeadroom is the fraction of each engine's KV capacity that new
	// grants and Resize growth leave free for Grow, in [0, 0.5]; elastic
	// pools only (0 in worst_case pools).
	GrowthHeadroom float64
	// Breaker is the pool's circuit-breaker thresholds, for every engine
	// of the pool (see breaker.go); the zero value is the defaults.
	Breaker BreakerSpec
	// RateWindow is the window the tenants' TokensPerMinute and
	// RequestsPerMinute are counted over; 0 means DefaultRateWindow (a
	// minute). Else a multiple of RateBuckets milliseconds in
	// MinRateWindow..MaxRateWindow: shorter windows are for tests.
	RateWindow time.Duration
}

// Lease is one outstanding reservation.
type Lease struct {
	ID        LeaseID
	Pool      PoolID
	Engine    EngineID
	Tenant    TenantID
	Priority  PriorityName
	KVTokens  int64
	Slots     int64
	Holder    HolderID
	RequestID RequestID
	// Created and Deadline are ledger-clock times, millisecond precision.
	Created  time.Time
	Deadline time.Time
	Fence    Fence
	// Reasserted marks a lease re-inserted by its holder after ledger loss.
	Reasserted bool
	// Overgrown marks a lease whose Grow took its engine above capacity or
	// its tenant above quota: load the ledger records but did not admit.
	Overgrown bool
	// Unconfirmed marks a reasserted lease on an engine that has telemetry
	// whose engine has not yet shown it (see the package doc, "Reassert"):
	// its deadline never passes its reassert time plus
	// Options.ConfirmWithin. Ignored by Reassert.
	Unconfirmed bool
	// Probe marks a lease granted on a half-open engine: its outcome
	// decides the engine's breaker (see breaker.go).
	Probe bool
	// Tokens is what the grant charged to its tenant's rate window
	// (AcquireRequest.ChargedTokens); 0 when the tenant had no rate
	// budget in the pool, and for a reasserted lease (not charged again).
	// Release trues it up to the usage (RateTrueUp). Ignored by Reassert.
	Tokens int64
}

// Ref returns the reference used to renew, resize or release l.
func (l Lease) Ref() LeaseRef { return LeaseRef{Pool: l.Pool, ID: l.ID, Holder: l.Holder} }

// LeaseRef names a lease and the holder acting on it.
type LeaseRef struct {
	Pool   PoolID
	ID     LeaseID
	Holder HolderID
}

// AcquireRequest asks for capacity on the first fitting candidate.
type AcquireRequest struct {
	Pool       PoolID
	Candidates []EngineID // in the caller's order of preference; non-empty
	Tenant     TenantID
	Priority   PriorityName
	KVTokens   int64 // >= 1
	Slots      int64 // >= 1
	Holder     HolderID
	RequestID  RequestID     // idempotency key, non-empty
	TTL        time.Duration // lease deadline = now + TTL; >= 1ms
	// Tokens is the most tokens the request can use (prompt plus every
	// completion token it may generate), charged to the tenant's token
	// budget at grant when the tenant has a rate budget; 0..MaxAmount,
	// 0 means KVTokens. See rate.go.
	Tokens int64
}

// ChargedTokens is what a grant of r charges to its tenant's rate window:
// r.Tokens, or r.KVTokens when Tokens is 0.
func (r AcquireRequest) ChargedTokens() int64 {
	if r.Tokens > 0 {
		return r.Tokens
	}
	return r.KVTokens
}

// Grant is a successful Acquire or Reassert.
type Grant struct {
	Lease Lease
	// Replayed is set when the lease already existed (idempotent retry).
	Replayed bool
	Epoch    Epoch
}

// Session describes a holder session after KeepAlive.
type Session struct {
	Pool    PoolID
	Holder  HolderID
	Expires time.Time // ledger clock
	// LiveHolders counts live sessions in the pool, this one included.
	LiveHolders int
	Epoch       Epoch
	// RecoveringUntil is the end of the recovery window, zero if none.
	RecoveringUntil time.Time
	// Recovered counts, while the recovery window is open, the pool's
	// configured engines that have recovered (EngineState.Recovered: they
	// take grants again); 0 when none has and after the window. While it
	// is 0 in an open window the pool refuses every new grant.
	Recovered int
}

// Renewal is the result of Renew, Resize and Grow.
type Renewal struct {
	Lease Lease
	Epoch Epoch
}

// Usage is what a request actually consumed, reported on release.
type Usage struct {
	PromptTokens     int64
	CompletionTokens int64
	// Finished: the engine's answer was read to its end, so
	// CompletionTokens is a whole completion's length, one sample of the
	// pool's completion-length histogram (CompletionCounters). A failed,
	// cut or aborted answer, a release before any answer and a block
	// lease's summed usage leave it false: their lengths would teach the
	// learned estimates lengths no answer had.
	Finished bool
	// Outcome is what the dispatch came to: the circuit breaker's
	// evidence (see breaker.go). OutcomeNone reports nothing.
	Outcome Outcome
}

// Released is the result of Release.
type Released struct {
	// Released is false when the lease was already gone.
	Released bool
	Epoch    Epoch
}

// Observation is engine telemetry for reconciliation.
type Observation struct {
	Pool   PoolID
	Engine EngineID
	// KVTokensUsed is the KV-cache tokens the engine reports in use.
	KVTokensUsed int64
	// KVTokensTotal is the engine's reported KV capacity; 0 if unknown.
	KVTokensTotal int64
	Running       int64
	Waiting       int64
	// ObservedAt orders observations; older or equal ones are ignored.
	ObservedAt time.Time
}

// Observed is the result of Observe.
type Observed struct {
	// Applied is false when a newer observation was already recorded.
	Applied bool
	Epoch   Epoch
}

// Swept counts what one Sweep call removed.
type Swept struct {
	Expired int // leases past their deadline
	Revoked int // leases of dead holder sessions
	Holders int // dead sessions fully removed
}

// Filter selects leases for List; zero fields match everything.
type Filter struct {
	Pool   PoolID
	Engine EngineID
	Holder HolderID
	Tenant TenantID
	// Limit caps the number of leases returned; 0 means no cap.
	Limit int
}

// Match reports whether l passes f (Limit aside).
func (f Filter) Match(l Lease) bool {
	return (f.Pool == "" || f.Pool == l.Pool) &&
		(f.Engine == "" || f.Engine == l.Engine) &&
		(f.Holder == "" || f.Holder == l.Holder) &&
		(f.Tenant == "" || f.Tenant == l.Tenant)
}

// Cap sorts leases by fence and keeps the first f.Limit of them: List's
// result from every matching lease.
func (f Filter) Cap(leases []Lease) []Lease {
	SortByFence(leases)
	if f.Limit > 0 && len(leases) > f.Limit {
		leases = leases[:f.Limit]
	}
	return leases
}

// EngineStats is one engine's state.
type EngineStats struct {
	Spec            EngineSpec
	Draining        bool
	ReservedKV      int64
	ReservedSlots   int64
	Leases          int64
	CorrectionKV    int64
	CorrectionSlots int64
	// LastObservation is the last applied observation; zero if none.
	LastObservation Observation
	// ObservedAt is the ledger time the last observation arrived.
	ObservedAt time.Time
	Stale      bool
	// Removed marks an engine no longer configured that still has leases.
	Removed bool
	// OrphanKV and OrphanSlots are the part of the correction charged for
	// leases the ledger ended on the engine, cleared by the first
	// observation that arrives at or after OrphanUntil (see the package
	// doc and Options.OrphanHold); a zero OrphanUntil means the next one.
	OrphanKV, OrphanSlots int64
	OrphanUntil           time.Time
	// Breaker is the engine's circuit breaker as it reads at Now (an open
	// breaker past its cooldown reads half-open).
	Breaker Breaker
}

// TenantStats is one tenant's usage in a pool.
type TenantStats struct {
	Spec          TenantSpec
	QuotaKV       int64
	QuotaSlots    int64 // 0 means no slot quota
	ReservedKV    int64
	ReservedSlots int64
	Leases        int64
	// Removed marks a tenant no longer configured that still has leases:
	// it gets no new grants, and its Spec is the last one configured
	// where the backend keeps it (memory, Redis, etcd), else only its name.
	Removed bool
	// Rates is the tenant's rate window as it counts at PoolStats.Now:
	// the buckets still counted, oldest first (RateUse sums them); empty
	// while nothing is charged.
	Rates []RateBucket
}

// Counter names in PoolStats.Counters.
const (
	CounterGrants         = "grants"
	CounterReplays        = "replays"
	CounterRejections     = "rejections" // plus "rejections:<reason>"
	CounterReleases       = "releases"
	CounterExpired        = "expired"
	CounterRevoked        = "revoked"
	CounterReasserts      = "reasserts"
	CounterFailovers      = "failovers"                // epochs a store started on a promoted replica (Redis)
	CounterReleasedKV     = "released_kv_tokens"       // KV tokens reserved by released leases
	CounterActualPrompt   = "actual_prompt_tokens"     // from Release usage
	CounterActualComplete = "actual_completion_tokens" // from Release usage
	CounterGrowths        = "growths"                  // Grow calls that raised a lease
	CounterOvergrowths    = "overgrowths"              // of those, growths past capacity or quota
	CounterGrownKV        = "grown_kv_tokens"          // KV tokens added by Grow
)

// EndedByLedger reports whether a lease ended with counter (expired, or
// revoked with its holder's session) was ended by the ledger rather than
// released by its holder: the engine may still run its request, so on an
// engine that has telemetry its amounts stay charged to the engine's
// correction until the next applied observation measures them (see the
// package doc, "Observe").
func EndedByLedger(counter string) bool {
	return counter == CounterExpired || counter == CounterRevoked
}

// PoolStats is a pool's state, for audit.
type PoolStats struct {
	Pool            PoolID
	Epoch           Epoch
	Now             time.Time // ledger clock when read
	RecoveringUntil time.Time
	CapacityKV      int64
	CapacitySlots   int64
	// Reserve is the pool's reservation mode as configured, the default
	// filled in (PoolSpec.Mode(): never empty).
	Reserve ReserveMode
	// GrowthHeadroom is the pool's PoolSpec.GrowthHeadroom.
	GrowthHeadroom float64
	Engines        []EngineStats // sorted by ID
	Tenants        []TenantStats // sorted by name
	Priorities     []PrioritySpec
	LiveHolders    int
	Leases         int64
	Counters       map[string]int64
}
