package ledger

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidatePoolSpec(t *testing.T) {
	good := func() PoolSpec {
		return PoolSpec{
			Name:       "llama",
			Engines:    []EngineSpec{{ID: "gpu-0", KVTokens: 1000, Slots: 8}},
			Tenants:    []TenantSpec{{Name: "acme", KVShare: 0.5}},
			Priorities: []PrioritySpec{{Name: "batch", MaxFill: 0.7}},
		}
	}
	if err := ValidatePoolSpec(good()); err != nil {
		t.Fatalf("good spec: %v", err)
	}
	for _, tc := range []struct {
		name, field string
		mod         func(*PoolSpec)
	}{
		{"no name", "pool name", func(s *PoolSpec) { s.Name = "" }},
		{"no engines", "no engines", func(s *PoolSpec) { s.Engines = nil }},
		{"dup engine", "duplicate engine", func(s *PoolSpec) { s.Engines = append(s.Engines, s.Engines[0]) }},
		{"zero kv", "engines[0].kv_tokens", func(s *PoolSpec) { s.Engines[0].KVTokens = 0 }},
		{"huge slots", "engines[0].slots", func(s *PoolSpec) { s.Engines[0].Slots = MaxAmount + 1 }},
		{"bad policy", "stale_policy", func(s *PoolSpec) { s.Engines[0].StalePolicy = "drop" }},
		{"negative stale", "stale_after", func(s *PoolSpec) { s.Engines[0].StaleAfter = -time.Second }},
		{"share zero", "tenants[0].kv_share", func(s *PoolSpec) { s.Tenants[0].KVShare = 0 }},
		{"share above one", "tenants[0].kv_share", func(s *PoolSpec) { s.Tenants[0].KVShare = 1.5 }},
		{"slot share negative", "slot_share", func(s *PoolSpec) { s.Tenants[0].SlotShare = -0.1 }},
		{"max_fill zero", "max_fill", func(s *PoolSpec) { s.Priorities[0].MaxFill = 0 }},
		{"dup priority", "duplicate priority", func(s *PoolSpec) { s.Priorities = append(s.Priorities, s.Priorities[0]) }},
		{"space in id", "space or control", func(s *PoolSpec) { s.Engines[0].ID = "gpu 0" }},
		{"retry negative", "retry_after", func(s *PoolSpec) { s.RetryAfter = -1 }},
		{"breaker cooldown negative", "breaker cooldown", func(s *PoolSpec) { s.Breaker.Cooldown = -time.Second }},
		{"breaker probes negative", "breaker probes", func(s *PoolSpec) { s.Breaker.Probes = -1 }},
		{"breaker successes negative", "breaker successes", func(s *PoolSpec) { s.Breaker.Successes = -1 }},
		{"tokens per minute negative", "tenants[0].tokens_per_minute", func(s *PoolSpec) { s.Tenants[0].TokensPerMinute = -1 }},
		{"tokens per minute huge", "tenants[0].tokens_per_minute", func(s *PoolSpec) { s.Tenants[0].TokensPerMinute = MaxAmount + 1 }},
		{"requests per minute negative", "tenants[0].requests_per_minute", func(s *PoolSpec) { s.Tenants[0].RequestsPerMinute = -5 }},
		{"rate window not whole buckets", "rate_window", func(s *PoolSpec) { s.RateWindow = time.Second + time.Millisecond }},
		{"rate window too short", "rate_window", func(s *PoolSpec) { s.RateWindow = 30 * time.Millisecond }},
		{"rate window negative", "rate_window", func(s *PoolSpec) { s.RateWindow = -time.Minute }},
		{"rate window too long", "rate_window", func(s *PoolSpec) { s.RateWindow = 25 * time.Hour }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good()
			tc.mod(&s)
			err := ValidatePoolSpec(s)
			if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("ValidatePoolSpec = %v, want ErrInvalidArgument naming %q", err, tc.field)
			}
		})
	}
}

func TestValidateAcquireTokens(t *testing.T) {
	r := AcquireRequest{Pool: "p", Candidates: []EngineID{"e"}, Tenant: "t", Priority: "q", KVTokens: 10, Slots: 1,
		Holder: "h", RequestID: "r", TTL: time.Second}
	for _, tc := range []struct {
		name   string
		tokens int64
		ok     bool
	}{
		{"zero means kv_tokens", 0, true},
		{"one", 1, true},
		{"max", MaxAmount, true},
		{"negative", -1, false},
		{"above max", MaxAmount + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.Tokens = tc.tokens
			err := ValidateAcquire(r)
			if tc.ok && err != nil {
				t.Fatalf("ValidateAcquire(tokens %d) = %v, want nil", tc.tokens, err)
			}
			if !tc.ok && (!errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "tokens = ")) {
				t.Fatalf("ValidateAcquire(tokens %d) = %v, want ErrInvalidArgument naming tokens", tc.tokens, err)
			}
		})
	}
}

func TestValidateUsageOutcome(t *testing.T) {
	for _, o := range append([]Outcome{OutcomeNone}, Outcomes...) {
		if err := ValidateUsage(Usage{Outcome: o}); err != nil {
			t.Errorf("ValidateUsage(outcome %q) = %v, want nil", o, err)
		}
	}
	err := ValidateUsage(Usage{Outcome: "exploded"})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), `outcome "exploded"`) {
		t.Errorf("ValidateUsage(outcome exploded) = %v, want ErrInvalidArgument naming the outcome", err)
	}
}
