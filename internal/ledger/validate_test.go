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
