package ledger

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Backends wrap them with what was in progress; callers
// check them with errors.Is.
var (
	// ErrInvalidArgument: a malformed request (bad amount, empty id, ...).
	ErrInvalidArgument = errors.New("ledger: invalid argument")
	// ErrUnknownPool: the pool is not configured (or its state was lost).
	ErrUnknownPool = errors.New("ledger: unknown pool")
	// ErrUnknownEngine: a candidate or observed engine is not configured.
	ErrUnknownEngine = errors.New("ledger: unknown engine")
	// ErrUnknownTenant: the tenant is not configured in the pool.
	ErrUnknownTenant = errors.New("ledger: unknown tenant")
	// ErrUnknownPriority: the priority class is not configured in the pool.
	ErrUnknownPriority = errors.New("ledger: unknown priority")
	// ErrNoSession: the holder has no live session in the pool.
	ErrNoSession = errors.New("ledger: no live holder session")
	// ErrSessionExpired: the holder's session died; use a new holder id or
	// wait until its leases have been swept.
	ErrSessionExpired = errors.New("ledger: holder session expired")
	// ErrLeaseNotFound: the lease is gone (released, expired or lost).
	ErrLeaseNotFound = errors.New("ledger: lease not found")
	// ErrNotHolder: the lease belongs to another holder.
	ErrNotHolder = errors.New("ledger: lease held by another holder")
	// ErrRejected: capacity or quota refused; the error is a *Rejection.
	ErrRejected = errors.New("ledger: rejected")
	// ErrClosed: the ledger was closed.
	ErrClosed = errors.New("ledger: closed")
	// ErrPermissionDenied: the caller may not make this call, or not for
	// this holder (a reserver's authorization, through the remote backend).
	// Declared here, where the contract lives, so callers test it without
	// importing a transport.
	ErrPermissionDenied = errors.New("ledger: permission denied")
	// ErrFenceExhausted: the pool cannot mint a fresh fencing token: its
	// sequence reached MaxFenceSeq, or the next lease id is already taken
	// (state no grant can have written). Nothing was changed; retrying does
	// not help, a new epoch does (re-create the pool).
	ErrFenceExhausted = errors.New("ledger: no fresh fencing token")
)

// Reason is why an acquisition or growth was refused.
type Reason string

// Rejection reasons, in the order Acquire checks them.
const (
	ReasonRecovering  Reason = "recovering"        // new epoch, recovery window
	ReasonTooLarge    Reason = "too_large"         // can never fit: don't retry
	ReasonTenantKV    Reason = "tenant_kv_quota"   // tenant's pool-wide KV quota
	ReasonTenantSlots Reason = "tenant_slot_quota" // tenant's pool-wide slot quota
	// ReasonTenantTokenRate: the tenant's tokens_per_minute in the pool
	// (rate.go); RetryAfter is when its window frees enough.
	ReasonTenantTokenRate Reason = "tenant_token_rate"
	// ReasonTenantRequestRate: the tenant's requests_per_minute.
	ReasonTenantRequestRate Reason = "tenant_request_rate"
	ReasonDraining          Reason = "draining"
	// ReasonBreakerOpen: the engine's circuit breaker is open, or
	// half-open with its probe budget taken (see breaker.go).
	ReasonBreakerOpen      Reason = "breaker_open"
	ReasonTelemetryStale   Reason = "telemetry_stale"
	ReasonPriorityHeadroom Reason = "priority_headroom" // fits only above max_fill
	ReasonEngineKV         Reason = "engine_kv"
	ReasonEngineSlots      Reason = "engine_slots"
)

// Reasons lists every Reason, for metrics and validation.
var Reasons = []Reason{
	ReasonRecovering, ReasonTooLarge, ReasonTenantKV, ReasonTenantSlots,
	ReasonTenantTokenRate, ReasonTenantRequestRate, ReasonDraining, ReasonBreakerOpen, ReasonTelemetryStale, ReasonPriorityHeadroom,
	ReasonEngineKV, ReasonEngineSlots,
}

// Quota reports whether r is a tenant-quota reason (HTTP 429) rather than a
// capacity reason (HTTP 503): a KV or slot quota, or a rate budget.
func (r Reason) Quota() bool {
	return r == ReasonTenantKV || r == ReasonTenantSlots || r.Rate()
}

// Rate reports whether r is a rate-budget reason: its RetryAfter is when
// the tenant's window frees enough for the request, and no release
// before then makes room (a true-up may, rarely).
func (r Reason) Rate() bool { return r == ReasonTenantTokenRate || r == ReasonTenantRequestRate }

// Valid reports whether r is one of Reasons.
func (r Reason) Valid() bool {
	for _, x := range Reasons {
		if r == x {
			return true
		}
	}
	return false
}

// Rejection is the error Acquire, Resize and Reassert return when capacity or
// quota refuses them.
type Rejection struct {
	Reason Reason
	// Engine is the candidate whose reason is reported; empty for pool-wide
	// reasons.
	Engine EngineID
	// RetryAfter is a hint, not jittered; 0 for ReasonTooLarge.
	RetryAfter time.Duration
	Epoch      Epoch
}

func (r *Rejection) Error() string {
	if r.Engine != "" {
		return fmt.Sprintf("ledger: rejected: %s on engine %s (retry after %s)", r.Reason, r.Engine, r.RetryAfter)
	}
	return fmt.Sprintf("ledger: rejected: %s (retry after %s)", r.Reason, r.RetryAfter)
}

// Is makes errors.Is(err, ErrRejected) hold for a *Rejection.
func (r *Rejection) Is(target error) bool { return target == ErrRejected }

// AsRejection returns the *Rejection in err's chain, or nil.
func AsRejection(err error) *Rejection {
	if err == nil {
		return nil // without the escaping target below: most calls are on a grant
	}
	var r *Rejection
	if errors.As(err, &r) {
		return r
	}
	return nil
}
