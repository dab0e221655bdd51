package estimate

import (
	"testing"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
)

func TestEstimatorErrsHighAndCalibrates(t *testing.T) {
	e := NewEstimator(2, fleet.DefaultMediaTokens)
	r := Prompt{Bytes: 400, Messages: 2, N: 2, MaxTokens: 100}
	raw := rawPrompt(400, 2) // 100 + 11
	if got := e.PromptTokens(r); got != int64(raw*ratioInitial+0.999) {
		t.Errorf("cold estimate %d, want raw %v × %v", got, raw, ratioInitial)
	}
	for range 50 {
		e.ObserveUsage(r, 120, nil)
	}
	got := e.PromptTokens(r)
	if got < 120 || got > 130 {
		t.Errorf("calibrated to a steady 120: estimate %d, want 120..130", got)
	}
	kv, slots, _ := e.Demand(r, 2048, 0)
	if kv != (got+100)*2 || slots != 2 {
		t.Errorf("demand kv %d slots %d, want %d and 2", kv, slots, (got+100)*2)
	}
	// Token-id prompts are exact; a missing max_tokens reserves the context.
	ids := Prompt{Tokens: 30, N: 1}
	if kv, _, _ := e.Demand(ids, 2048, 0); kv != 2048 {
		t.Errorf("no max_tokens: kv %d, want the whole context 2048", kv)
	}
}

func TestRateTokens(t *testing.T) {
	for _, c := range []struct {
		name string
		p    Prompt
		want int64
	}{
		{"prompt and max_tokens", Prompt{Tokens: 10, N: 1, MaxTokens: 1000}, 1010},
		{"without max_tokens: the rest of the context", Prompt{Tokens: 48, N: 1}, 2048},
		{"n sequences share the prompt", Prompt{Tokens: 10, N: 3, MaxTokens: 100}, 310},
		{"bounded by the ledger's largest amount", Prompt{Tokens: 10, N: 1 << 30, MaxTokens: 1 << 20}, ledger.MaxAmount},
	} {
		if got := RateTokens(c.p, 2048, c.p.Tokens); got != c.want {
			t.Errorf("%s: RateTokens = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestOutputTokens(t *testing.T) {
	r := Prompt{Tokens: 10, N: 1, MaxTokens: 1000}
	for _, c := range []struct {
		name     string
		p        Prompt
		expected int64
		want     int64
	}{
		{"worst case: max_tokens", r, 0, 1000},
		{"worst case without max_tokens: the rest of the context", Prompt{Tokens: 10, N: 1}, 0, 2038},
		{"learned", r, 90, 90},
		{"learned, capped by max_tokens", Prompt{Tokens: 10, N: 1, MaxTokens: 40}, 90, 40},
		{"learned, capped by the context", Prompt{Tokens: 2000, N: 1}, 90, 48},
	} {
		if got := OutputTokens(c.p, 2048, c.p.Tokens, c.expected); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
