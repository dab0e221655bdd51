package estimate

import (
	"testing"

	"github.com/leasehold/leasehold/internal/fleet"
)

func TestEstimatorErrsHighAndCalibrates(t *testing.T) {
	e := NewEstimator(2, 0.95, fleet.DefaultMediaTokens)
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
	kv, slots, _ := e.Demand(r, 2048, false)
	if kv != (got+100)*2 || slots != 2 {
		t.Errorf("demand kv %d slots %d, want %d and 2", kv, slots, (got+100)*2)
	}
	// Token-id prompts are exact; a missing max_tokens reserves the context.
	ids := Prompt{Tokens: 30, N: 1}
	if kv, _, _ := e.Demand(ids, 2048, false); kv != 2048 {
		t.Errorf("no max_tokens: kv %d, want the whole context 2048", kv)
	}
}

func TestEstimatorOvercommitQuantile(t *testing.T) {
	e := NewEstimator(2, 0.9, fleet.DefaultMediaTokens)
	r := Prompt{Tokens: 10, N: 1, MaxTokens: 1000}
	if out := e.OutputTokens(r, 2048, 10, true); out != 1000 {
		t.Errorf("before %d completions: %d, want max_tokens", completionMinSeen, out)
	}
	for i := range 100 {
		e.ObserveCompletion(int64(i + 1)) // 1..100
	}
	if out := e.OutputTokens(r, 2048, 10, true); out < 85 || out > 95 {
		t.Errorf("p90 of 1..100 = %d, want about 90", out)
	}
	if out := e.OutputTokens(Prompt{Tokens: 10, N: 1, MaxTokens: 40}, 2048, 10, true); out != 40 {
		t.Errorf("capped by max_tokens: %d, want 40", out)
	}
	if out := e.OutputTokens(r, 2048, 10, false); out != 1000 {
		t.Errorf("without overcommit: %d, want max_tokens", out)
	}
}
