package ledger

import (
	"fmt"
	"math"
	"time"
)

// The checks below are the one definition of a well-formed call; every
// backend runs them before touching its store, so bad input fails the same
// way everywhere and never reaches a script or transaction.

func checkID(field, v string) error {
	if v == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidArgument, field)
	}
	if len(v) > MaxIDLen {
		return fmt.Errorf("%w: %s is %d bytes, more than %d", ErrInvalidArgument, field, len(v), MaxIDLen)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x21 || c == 0x7f {
			return fmt.Errorf("%w: %s %q contains a space or control character", ErrInvalidArgument, field, v)
		}
	}
	return nil
}

// checkIDs checks ids given as field, value pairs, in order.
func checkIDs(fieldValues ...string) error {
	for i := 0; i+1 < len(fieldValues); i += 2 {
		if err := checkID(fieldValues[i], fieldValues[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// checkDemand checks a lease's KV tokens, slots and TTL.
func checkDemand(kv, slots int64, ttl time.Duration) error {
	if err := checkAmount("kv_tokens", kv); err != nil {
		return err
	}
	if err := checkAmount("slots", slots); err != nil {
		return err
	}
	return checkTTL("ttl", ttl)
}

func checkAmount(field string, v int64) error {
	if v < 1 || v > MaxAmount {
		return fmt.Errorf("%w: %s = %d, want 1..%d", ErrInvalidArgument, field, v, MaxAmount)
	}
	return nil
}

// checkBudget checks a rate budget: 0 (none) or 1..MaxAmount.
func checkBudget(field string, v int64) error {
	if v < 0 || v > MaxAmount {
		return fmt.Errorf("%w: %s = %d, want 0 (none) or 1..%d", ErrInvalidArgument, field, v, MaxAmount)
	}
	return nil
}

func checkTTL(field string, d time.Duration) error {
	if d < time.Millisecond || d > 24*time.Hour {
		return fmt.Errorf("%w: %s = %s, want 1ms..24h", ErrInvalidArgument, field, d)
	}
	return nil
}

func checkFraction(field string, v float64, allowZero bool) error {
	lo := "(0"
	ok := v > 0 && v <= 1
	if allowZero {
		lo = "[0"
		ok = v >= 0 && v <= 1
	}
	if !ok || math.IsNaN(v) {
		return fmt.Errorf("%w: %s = %v, want %s, 1]", ErrInvalidArgument, field, v, lo)
	}
	return nil
}

// ValidatePoolSpec checks a pool spec, naming the first bad field.
func ValidatePoolSpec(s PoolSpec) error {
	if err := checkID("pool name", string(s.Name)); err != nil {
		return err
	}
	if len(s.Engines) == 0 {
		return fmt.Errorf("%w: pool %s has no engines", ErrInvalidArgument, s.Name)
	}
	seen := map[string]bool{}
	// unique checks a name and that no other of its kind has it.
	unique := func(field, kind, id string) error {
		if err := checkID(field, id); err != nil {
			return err
		}
		if seen[kind+"\x00"+id] {
			return fmt.Errorf("%w: pool %s: duplicate %s %q", ErrInvalidArgument, s.Name, kind, id)
		}
		seen[kind+"\x00"+id] = true
		return nil
	}
	for i, e := range s.Engines {
		f := fmt.Sprintf("pool %s engines[%d]", s.Name, i)
		if err := unique(f+".id", "engine", string(e.ID)); err != nil {
			return err
		}
		if err := checkAmount(f+".kv_tokens", e.KVTokens); err != nil {
			return err
		}
		if err := checkAmount(f+".slots", e.Slots); err != nil {
			return err
		}
		if e.StaleAfter < 0 {
			return fmt.Errorf("%w: %s.stale_after = %s, want >= 0", ErrInvalidArgument, f, e.StaleAfter)
		}
		switch e.StalePolicy {
		case "", StaleHold, StaleBlock, StaleIgnore:
		default:
			return fmt.Errorf("%w: %s.stale_policy = %q, want hold, block or ignore", ErrInvalidArgument, f, e.StalePolicy)
		}
	}
	for i, t := range s.Tenants {
		f := fmt.Sprintf("pool %s tenants[%d]", s.Name, i)
		if err := unique(f+".name", "tenant", string(t.Name)); err != nil {
			return err
		}
		if err := checkFraction(f+".kv_share", t.KVShare, false); err != nil {
			return err
		}
		if err := checkFraction(f+".slot_share", t.SlotShare, true); err != nil {
			return err
		}
		if err := checkBudget(f+".tokens_per_minute", t.TokensPerMinute); err != nil {
			return err
		}
		if err := checkBudget(f+".requests_per_minute", t.RequestsPerMinute); err != nil {
			return err
		}
	}
	for i, p := range s.Priorities {
		f := fmt.Sprintf("pool %s priorities[%d]", s.Name, i)
		if err := unique(f+".name", "priority", string(p.Name)); err != nil {
			return err
		}
		if err := checkFraction(f+".max_fill", p.MaxFill, false); err != nil {
			return err
		}
	}
	if s.RetryAfter < 0 {
		return fmt.Errorf("%w: pool %s retry_after = %s, want >= 0", ErrInvalidArgument, s.Name, s.RetryAfter)
	}
	if err := s.Breaker.Validate(); err != nil {
		return fmt.Errorf("pool %s: %w", s.Name, err)
	}
	if err := checkRateWindow(s.Name, s.RateWindow); err != nil {
		return err
	}
	switch s.Reserve {
	case "", ReserveElastic:
		if !(s.GrowthHeadroom >= 0 && s.GrowthHeadroom <= MaxGrowthHeadroom) {
			return fmt.Errorf("%w: pool %s growth_headroom = %v, want [0, %v]", ErrInvalidArgument, s.Name, s.GrowthHeadroom, MaxGrowthHeadroom)
		}
	case ReserveWorstCase:
		if s.GrowthHeadroom != 0 {
			return fmt.Errorf("%w: pool %s growth_headroom = %v: a worst_case pool reserves every output token up front, want 0", ErrInvalidArgument, s.Name, s.GrowthHeadroom)
		}
	default:
		return fmt.Errorf("%w: pool %s reserve = %q, want elastic or worst_case", ErrInvalidArgument, s.Name, s.Reserve)
	}
	return nil
}

// ValidateAcquire checks an acquire request's shape (not that its names exist).
func ValidateAcquire(r AcquireRequest) error {
	if err := checkID("pool", string(r.Pool)); err != nil {
		return err
	}
	if len(r.Candidates) == 0 {
		return fmt.Errorf("%w: candidate list is empty", ErrInvalidArgument)
	}
	if len(r.Candidates) > MaxCandidates {
		return fmt.Errorf("%w: %d candidates, more than %d", ErrInvalidArgument, len(r.Candidates), MaxCandidates)
	}
	seen := make(map[EngineID]bool, len(r.Candidates))
	for i, c := range r.Candidates {
		if err := checkID(fmt.Sprintf("candidates[%d]", i), string(c)); err != nil {
			return err
		}
		if seen[c] {
			return fmt.Errorf("%w: candidate %s listed twice", ErrInvalidArgument, c)
		}
		seen[c] = true
	}
	if err := checkIDs("tenant", string(r.Tenant), "priority", string(r.Priority),
		"holder", string(r.Holder), "request id", string(r.RequestID)); err != nil {
		return err
	}
	if r.Tokens < 0 || r.Tokens > MaxAmount {
		return fmt.Errorf("%w: tokens = %d, want 0 (kv_tokens) or 1..%d", ErrInvalidArgument, r.Tokens, MaxAmount)
	}
	return checkDemand(r.KVTokens, r.Slots, r.TTL)
}

// ValidateKeepAlive checks KeepAlive's arguments.
func ValidateKeepAlive(pool PoolID, holder HolderID, ttl time.Duration) error {
	if err := checkID("pool", string(pool)); err != nil {
		return err
	}
	if err := checkID("holder", string(holder)); err != nil {
		return err
	}
	return checkTTL("session ttl", ttl)
}

// ValidateRef checks a lease reference.
func ValidateRef(ref LeaseRef) error {
	if err := checkID("pool", string(ref.Pool)); err != nil {
		return err
	}
	if err := checkID("holder", string(ref.Holder)); err != nil {
		return err
	}
	_, err := ParseLeaseID(ref.ID)
	return err
}

// ValidateRenew checks Renew's arguments.
func ValidateRenew(ref LeaseRef, ttl time.Duration) error {
	if err := ValidateRef(ref); err != nil {
		return err
	}
	return checkTTL("ttl", ttl)
}

// ValidateResize checks Resize's arguments.
func ValidateResize(ref LeaseRef, kv int64) error {
	if err := ValidateRef(ref); err != nil {
		return err
	}
	return checkAmount("kv_tokens", kv)
}

// ValidateGrow checks Grow's arguments (the lease's own bounds are the
// store's to check, with GrowthOf).
func ValidateGrow(ref LeaseRef, kv int64) error {
	if err := ValidateRef(ref); err != nil {
		return err
	}
	return checkAmount("kv_tokens", kv)
}

// ValidateUsage checks reported usage.
func ValidateUsage(u Usage) error {
	if u.PromptTokens < 0 || u.CompletionTokens < 0 || u.PromptTokens > MaxAmount || u.CompletionTokens > MaxAmount {
		return fmt.Errorf("%w: usage %+v out of range 0..%d", ErrInvalidArgument, u, MaxAmount)
	}
	if !u.Outcome.Valid() {
		return fmt.Errorf("%w: usage outcome %.64q, want empty or one of %v", ErrInvalidArgument, string(u.Outcome), Outcomes)
	}
	return nil
}

// ValidateReassert checks a lease being re-asserted: its id is the one
// its fence makes, and the fence has an epoch and a sequence in
// 1..MaxFenceSeq (the bounds that need the pool are CheckReassert's).
func ValidateReassert(l Lease, ttl time.Duration) error {
	if err := ValidateRef(l.Ref()); err != nil {
		return err
	}
	if err := checkFence(l.ID, l.Fence); err != nil {
		return err
	}
	if err := checkIDs("engine", string(l.Engine), "tenant", string(l.Tenant),
		"priority", string(l.Priority), "request id", string(l.RequestID)); err != nil {
		return err
	}
	return checkDemand(l.KVTokens, l.Slots, ttl)
}

// ValidateObservation checks telemetry.
func ValidateObservation(o Observation) error {
	if err := checkID("pool", string(o.Pool)); err != nil {
		return err
	}
	if err := checkID("engine", string(o.Engine)); err != nil {
		return err
	}
	for _, c := range []struct {
		f string
		v int64
	}{{"kv_tokens_used", o.KVTokensUsed}, {"kv_tokens_total", o.KVTokensTotal}, {"running", o.Running}, {"waiting", o.Waiting}} {
		if c.v < 0 || c.v > MaxAmount {
			return fmt.Errorf("%w: observation %s = %d, want 0..%d", ErrInvalidArgument, c.f, c.v, MaxAmount)
		}
	}
	if o.ObservedAt.IsZero() {
		return fmt.Errorf("%w: observation observed_at is zero", ErrInvalidArgument)
	}
	return nil
}

// ValidatePool checks a pool name (Stats, and the pool of any call).
func ValidatePool(pool PoolID) error { return checkID("pool", string(pool)) }

// ValidateSetDraining checks SetDraining's arguments.
func ValidateSetDraining(pool PoolID, engine EngineID) error {
	if err := ValidatePool(pool); err != nil {
		return err
	}
	return checkID("engine", string(engine))
}

// ValidateSweep checks Sweep's arguments; max 0 means the backend's batch.
func ValidateSweep(pool PoolID, max int) error {
	if err := ValidatePool(pool); err != nil {
		return err
	}
	if max < 0 {
		return fmt.Errorf("%w: sweep max = %d, want >= 0", ErrInvalidArgument, max)
	}
	return nil
}

// ValidateFilter checks a List filter; empty fields match everything.
func ValidateFilter(f Filter) error {
	for _, c := range []struct{ f, v string }{
		{"pool", string(f.Pool)}, {"engine", string(f.Engine)},
		{"holder", string(f.Holder)}, {"tenant", string(f.Tenant)},
	} {
		if c.v == "" {
			continue
		}
		if err := checkID("filter "+c.f, c.v); err != nil {
			return err
		}
	}
	if f.Limit < 0 {
		return fmt.Errorf("%w: filter limit = %d, want >= 0", ErrInvalidArgument, f.Limit)
	}
	return nil
}
