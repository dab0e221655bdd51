package ledger

import (
	"math"
	"time"
)

// This file is the admission rule in one place, as a pure function over a
// snapshot of a pool. The Go backends (memory, etcd) call it inside their
// atomic step; scripts/lua/acquire.lua implements the same rule and the
// conformance suite holds them to it.

// EngineState is an engine's admission-relevant state.
type EngineState struct {
	Spec            EngineSpec
	Draining        bool
	ReservedKV      int64
	ReservedSlots   int64
	CorrectionKV    int64
	CorrectionSlots int64
	// ObservedAt is the ledger time the last observation arrived; zero if
	// never observed.
	ObservedAt time.Time
	// ReportedKV is the KV capacity the engine's last applied observation
	// reported (Observation.KVTokensTotal); 0 if unknown.
	ReportedKV int64
	// Breaker is the engine's circuit breaker as stored (Admit reads it
	// with Breaker.At).
	Breaker Breaker
	// LastObservation is the last applied observation (zero if none) and
	// ArrivedAt the ledger time it arrived: what decides whether the
	// engine has recovered after a new epoch (Recovered). ObservedAt may
	// differ from ArrivedAt where a backend tracks only freshness in it.
	LastObservation Observation
	ArrivedAt       time.Time
}

// CapacityKV is the KV capacity admission counts on: the configured one,
// or the engine's own report when that is smaller (see "Capacity truth" in
// the package doc).
func (e EngineState) CapacityKV() int64 {
	if e.ReportedKV > 0 && e.ReportedKV < e.Spec.KVTokens {
		return e.ReportedKV
	}
	return e.Spec.KVTokens
}

// AdmissibleKV is how many KV tokens grants of a class with max_fill f may
// fill on e in a pool with growth headroom h: floor(cap*f) - floor(cap*h).
func (e EngineState) AdmissibleKV(f, h float64) int64 {
	c := e.CapacityKV()
	return Fill(c, f) - Fill(c, h)
}

// Stale reports whether the engine's telemetry is stale at now.
func (e EngineState) Stale(now time.Time) bool {
	if e.Spec.StaleAfter <= 0 {
		return false
	}
	return e.ObservedAt.IsZero() || now.Sub(e.ObservedAt) > e.Spec.StaleAfter
}

// Used returns the KV tokens and slots counted against the engine at now:
// reservations plus the telemetry correction, unless policy ignore drops a
// stale correction.
func (e EngineState) Used(now time.Time) (kv, slots int64) {
	kv, slots = e.ReservedKV, e.ReservedSlots
	if e.Spec.StalePolicy == StaleIgnore && e.Stale(now) {
		return kv, slots
	}
	return kv + e.CorrectionKV, slots + e.CorrectionSlots
}

// Fill returns floor(capacity * fraction), computed in float64 exactly as
// the Lua scripts do.
func Fill(capacity int64, fraction float64) int64 {
	return int64(math.Floor(float64(capacity) * fraction))
}

// TenantQuota returns a tenant's KV and slot quota in a pool of the given
// capacity; a zero slot quota means none.
func TenantQuota(t TenantSpec, capKV, capSlots int64) (kv, slots int64) {
	kv = Fill(capKV, t.KVShare)
	if t.SlotShare > 0 {
		slots = Fill(capSlots, t.SlotShare)
	}
	return kv, slots
}

// Admission is the input to Admit.
type Admission struct {
	Now             time.Time
	RecoveringUntil time.Time
	CapacityKV      int64 // the pool's total KV tokens
	CapacitySlots   int64 // the pool's total slots
	Tenant          TenantSpec
	TenantKV        int64 // reserved by the tenant in the pool
	TenantSlots     int64
	MaxFill         float64
	Candidates      []EngineState // in the caller's order
	KVTokens        int64
	Slots           int64
	RetryAfter      time.Duration // capacity hint; 0 means DefaultRetryAfter
	Epoch           Epoch
	// GrowthHeadroom is the pool's (PoolSpec.GrowthHeadroom): the share of
	// each engine's capacity grants and Resize growth leave to Grow.
	GrowthHeadroom float64
	// Breaker is the pool's (PoolSpec.Breaker): Admit reads each
	// candidate's breaker with it at Now. Growth ignores it.
	Breaker BreakerSpec
	// Tokens is what a grant charges to the tenant's rate window
	// (AcquireRequest.ChargedTokens); Rates is the window as stored and
	// RateWindow the pool's (PoolSpec.RateWindow). Only a Tenant with a
	// rate budget reads them (rate.go); growth ignores them.
	Tokens     int64
	Rates      []RateBucket
	RateWindow time.Duration
	// ObservedSince is RecoverySince of the pool's epoch: while Now is
	// before RecoveringUntil, an engine takes grants and growth only if it
	// Recovered since then (see recovery.go).
	ObservedSince time.Time
	// Reserve is the pool's reservation mode (PoolSpec.Mode()): in a
	// worst_case pool only an idle engine recovers before the window ends.
	Reserve ReserveMode
}

// Admit returns the index of the first candidate that fits, or the
// rejection. It implements the rule in the package documentation.
func Admit(a Admission) (int, *Rejection) {
	retry := a.RetryAfter
	if retry <= 0 {
		retry = DefaultRetryAfter
	}
	reject := func(r Reason, e EngineID, after time.Duration) (int, *Rejection) {
		return -1, &Rejection{Reason: r, Engine: e, RetryAfter: after, Epoch: a.Epoch}
	}
	qKV, qSlots := TenantQuota(a.Tenant, a.CapacityKV, a.CapacitySlots)
	if a.KVTokens > qKV || (qSlots > 0 && a.Slots > qSlots) {
		return reject(ReasonTooLarge, "", 0)
	}
	if tpm := a.Tenant.TokensPerMinute; tpm > 0 && a.Tokens > tpm {
		return reject(ReasonTooLarge, "", 0)
	}
	fitsSomewhere := false
	for _, e := range a.Candidates {
		if a.KVTokens <= e.AdmissibleKV(a.MaxFill, a.GrowthHeadroom) && a.Slots <= Fill(e.Spec.Slots, a.MaxFill) {
			fitsSomewhere = true
			break
		}
	}
	if !fitsSomewhere {
		return reject(ReasonTooLarge, "", 0)
	}
	if a.TenantKV+a.KVTokens > qKV {
		return reject(ReasonTenantKV, "", retry)
	}
	if qSlots > 0 && a.TenantSlots+a.Slots > qSlots {
		return reject(ReasonTenantSlots, "", retry)
	}
	if a.Tenant.Rated() {
		if r, after := rateReason(a, a.Tokens); r != "" {
			return reject(r, "", after)
		}
	}
	var first Reason
	for i, e := range a.Candidates {
		r := grantReason(a, e)
		if r == "" {
			return i, nil
		}
		if i == 0 {
			first = r
		}
	}
	return reject(first, a.Candidates[0].Spec.ID, a.recoveryHint(first, retry))
}

// grantReason returns why e cannot take a new grant, or "" if it can:
// engineReason, with the engine's circuit breaker checked right after
// draining (open, or half-open with its probe budget taken, refuses with
// ReasonBreakerOpen). A grant Admit allows on a half-open engine is a
// probe: the backend stores Breaker.Grant's result and marks the lease.
func grantReason(a Admission, e EngineState) Reason {
	if e.Draining {
		return ReasonDraining
	}
	if ok, _ := e.Breaker.At(a.Now, a.Breaker).Admits(a.Breaker); !ok {
		return ReasonBreakerOpen
	}
	return engineReason(a, e)
}

// engineReason returns why e cannot take the request, or "" if it can.
// Growth of a lease (AdmitGrowth) checks it without the breaker: the
// lease is already on its engine, and a probe's own growth must not be
// refused by the budget the probe itself holds.
func engineReason(a Admission, e EngineState) Reason {
	if e.Draining {
		return ReasonDraining
	}
	if a.recovering(e) {
		return ReasonRecovering
	}
	if e.Spec.StalePolicy == StaleBlock && e.Stale(a.Now) {
		return ReasonTelemetryStale
	}
	kv, slots := e.Used(a.Now)
	if kv+a.KVTokens > e.AdmissibleKV(a.MaxFill, a.GrowthHeadroom) {
		if a.MaxFill < 1 && kv+a.KVTokens <= e.AdmissibleKV(1, a.GrowthHeadroom) {
			return ReasonPriorityHeadroom
		}
		return ReasonEngineKV
	}
	if slots+a.Slots > Fill(e.Spec.Slots, a.MaxFill) {
		if a.MaxFill < 1 && slots+a.Slots <= e.Spec.Slots {
			return ReasonPriorityHeadroom
		}
		return ReasonEngineSlots
	}
	return ""
}

// AdmitGrowth decides whether a lease on engine e may grow by delta KV
// tokens to newKV. Slots do not change. It returns nil if it may.
func AdmitGrowth(a Admission, e EngineState, newKV, delta int64) *Rejection {
	retry := a.RetryAfter
	if retry <= 0 {
		retry = DefaultRetryAfter
	}
	rej := func(r Reason, eng EngineID, after time.Duration) *Rejection {
		return &Rejection{Reason: r, Engine: eng, RetryAfter: after, Epoch: a.Epoch}
	}
	qKV, _ := TenantQuota(a.Tenant, a.CapacityKV, a.CapacitySlots)
	if newKV > qKV || newKV > e.AdmissibleKV(a.MaxFill, a.GrowthHeadroom) {
		return rej(ReasonTooLarge, "", 0)
	}
	if a.TenantKV+delta > qKV {
		return rej(ReasonTenantKV, "", retry)
	}
	a.KVTokens, a.Slots = delta, 0
	if r := engineReason(a, e); r != "" {
		return rej(r, e.Spec.ID, a.recoveryHint(r, retry))
	}
	return nil
}

// CeilMillis rounds d up to a whole millisecond.
func CeilMillis(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	return d
}
