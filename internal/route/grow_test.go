package route

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/enginesim"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/poll"
)

// warm sends n short non-streamed answers (the engines' natural length is
// short) so that the pool's learned completion length is warm.
func (h *harness) warm(t *testing.T, n int) int64 {
	t.Helper()
	for i := range n {
		status, _, b, err := post(context.Background(), h.client, h.url+"/v1/completions", "sk-acme",
			map[string]any{"model": "m", "prompt": "warm up " + strings.Repeat("x", i%7), "max_tokens": 1000})
		if err != nil || status != http.StatusOK {
			t.Fatalf("warm-up request %d: %d %s %v", i, status, b, err)
		}
	}
	var expected int64
	poll.Eventually(t, 10*time.Second, "the pool's learned completion length", func() bool {
		e, ok := h.r.pools["m"].learned.Expected("acme")
		expected = e
		return ok
	})
	return expected
}

// leaseKV is the KV tokens of the pool's only lease, 0 when there is none.
func (h *harness) leaseKV(t *testing.T) int64 {
	t.Helper()
	ls, err := h.l.List(context.Background(), ledger.Filter{Pool: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 {
		return 0
	}
	return ls[0].KVTokens
}

// readChunks reads a stream to its end, calling each with the number of
// output chunks seen so far.
func (s *stream) readChunks(t *testing.T, each func(chunks int64)) int64 {
	t.Helper()
	var chunks int64
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			return chunks
		}
		data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []json.RawMessage `json:"choices"`
		}
		if json.Unmarshal([]byte(data), &c) == nil && len(c.Choices) > 0 {
			chunks++
			each(chunks)
		}
	}
}

// In an elastic pool a cold pool reserves the worst case; once warm a lease
// reserves the prompt and the learned length, and a long streamed answer
// grows it ahead of every token the client receives, in a bounded number
// of ledger calls, never past the request's worst case.
func TestElasticLeaseGrowsAheadOfTheStream(t *testing.T) {
	h := newHarness(t, harnessOpts{engines: 1, kv: 16384, slots: 64, speed: 20, output: 8, extra: tenants,
		cfg: func(c *Config) { c.ViewInterval = 20 * time.Millisecond }})
	prompt := tokenIDs(100)
	body := func() map[string]any {
		return map[string]any{"model": "m", "prompt": json.RawMessage(prompt), "max_tokens": 1000, "ignore_eos": true}
	}
	cold := h.mustStream(t, "cold", "sk-acme", body())
	if kv := h.leaseKV(t); kv != 1100 {
		t.Errorf("cold pool: lease of %d KV tokens, want the worst case 1100", kv)
	}
	cold.close()
	h.waitNoLeases(5 * time.Second)

	expected := h.warm(t, 70)
	if expected < 16 || expected > 31 {
		t.Fatalf("learned length %d, want the short answers' (the engine's natural length is 1..15, at least 16)", expected)
	}
	s := h.mustStream(t, "long", "sk-acme", body())
	defer s.close()
	first := h.leaseKV(t)
	if first != 100+expected {
		t.Errorf("warm pool: lease of %d KV tokens, want prompt + learned = %d", first, 100+expected)
	}
	var worst, behind int64
	got := s.readChunks(t, func(chunks int64) {
		kv := h.leaseKV(t)
		worst = max(worst, kv)
		if kv > 0 && kv < 100+chunks {
			behind = max(behind, 100+chunks-kv)
		}
	})
	if got < 990 {
		t.Fatalf("stream ended after %d chunks, want about 1000 (ignore_eos)", got)
	}
	if behind > 0 {
		t.Errorf("the client received output the ledger did not count: %d tokens behind", behind)
	}
	if worst > 1100 {
		t.Errorf("the lease grew to %d, past the request's worst case 1100", worst)
	}
	grows := metricSum(h.url, `leasehold_router_lease_grows_total{pool="m",result="ok"}`)
	bound := math.Ceil(math.Log(1000/float64(expected))/math.Log(1.5)) + 1
	if grows < 1 || grows > bound {
		t.Errorf("%v Grow calls for 1000 tokens from %d reserved, want 1..%v", grows, expected, bound)
	}
}

// A worst_case pool reserves max_tokens warm or cold, and never grows.
func TestWorstCasePoolNeverGrows(t *testing.T) {
	h := newHarness(t, harnessOpts{engines: 1, kv: 16384, slots: 64, speed: 20, output: 8, extra: tenants,
		pool: "    reserve: worst_case\n", cfg: func(c *Config) { c.ViewInterval = 20 * time.Millisecond }})
	for i := range 70 {
		status, _, b, err := post(context.Background(), h.client, h.url+"/v1/completions", "sk-acme",
			map[string]any{"model": "m", "prompt": "short " + strings.Repeat("x", i%7), "max_tokens": 1000})
		if err != nil || status != http.StatusOK {
			t.Fatalf("request %d: %d %s %v", i, status, b, err)
		}
	}
	s := h.mustStream(t, "long", "sk-acme", map[string]any{"model": "m", "prompt": json.RawMessage(tokenIDs(100)), "max_tokens": 200, "ignore_eos": true})
	defer s.close()
	s.readChunks(t, func(int64) {
		if kv := h.leaseKV(t); kv != 0 && kv != 300 {
			t.Fatalf("worst_case lease of %d KV tokens, want 300 throughout", kv)
		}
	})
	if m := h.metrics(t); strings.Contains(m, "leasehold_router_lease_grows_total{") {
		t.Errorf("a worst_case pool grew leases:\n%s", m)
	}
}

// TestOnlyFinishedAnswersTeachTheLength: answers the engines fail count
// nothing in the completion-length histogram (they would teach a length
// of 1); a finished answer counts once.
func TestOnlyFinishedAnswersTeachTheLength(t *testing.T) {
	h := newHarness(t, harnessOpts{engines: 1, kv: 8192, slots: 8, speed: 50, output: 20, extra: tenants})
	yes, no := true, false
	h.engines[0].Fail(enginesim.FailChange{Errors: &yes})
	body := map[string]any{"model": "m", "prompt": "a failing answer", "max_tokens": 100}
	for i := range 10 {
		status, _, b, err := post(context.Background(), h.client, h.url+"/v1/completions", "sk-acme", body)
		if err != nil || status < 500 {
			t.Fatalf("request %d to a failing engine: %d %s %v, want a 5xx", i, status, b, err)
		}
	}
	h.waitNoLeases(5 * time.Second)
	if hist := ledger.CompletionHistogram(h.stats().Counters, ""); hist.Total != 0 {
		t.Fatalf("after 10 failed answers the completion histogram holds %v, want nothing", hist.Counts)
	}
	h.engines[0].Fail(enginesim.FailChange{Errors: &no})
	if status, _, b, err := post(context.Background(), h.client, h.url+"/v1/completions", "sk-acme", body); err != nil || status != http.StatusOK {
		t.Fatalf("request to the healed engine: %d %s %v", status, b, err)
	}
	h.waitNoLeases(5 * time.Second)
	if hist := ledger.CompletionHistogram(h.stats().Counters, ""); hist.Total != 1 {
		t.Errorf("after one finished answer the completion histogram holds %v, want one sample", hist.Counts)
	}
}

// A streamed answer is grown only while it may still generate: a chat
// answer whose last token brings it within the slack (8 tokens) of its
// reservation ends without a Grow call (a finished sequence holds no
// more), and the role announcement that opens it is no output. One token
// more and the lease grows before the last token.
func TestFinishedAnswerIsNotGrown(t *testing.T) {
	// Natural length 1: a request's output is its min_tokens.
	h := newHarness(t, harnessOpts{engines: 1, kv: 16384, slots: 64, speed: 20, output: 1, extra: tenants,
		cfg: func(c *Config) { c.ViewInterval = 20 * time.Millisecond }})
	expected := h.warm(t, 70)
	const slack = 8 // lease.growSlack
	tests := []struct {
		name      string
		output    int64
		wantGrows float64
	}{
		{"ends at the slack", expected - slack, 0},
		{"goes on past it", expected - slack + 1, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := metricSum(h.url, `leasehold_router_lease_grows_total{pool="m",result="ok"}`)
			s := h.mustStream(t, tc.name, "sk-acme", map[string]any{"model": "m", "max_tokens": 1000, "min_tokens": tc.output,
				"messages": []map[string]any{{"role": "user", "content": "count"}}})
			defer s.close()
			// openStream read the role announcement.
			if got := s.readChunks(t, func(int64) {}); got != tc.output {
				t.Fatalf("%d chunks with choices after the role announcement, want %d", got, tc.output)
			}
			h.waitNoLeases(5 * time.Second)
			if got := metricSum(h.url, `leasehold_router_lease_grows_total{pool="m",result="ok"}`) - before; got != tc.wantGrows {
				t.Errorf("%v Grow calls for an answer of %d tokens reserving %d, want %v", got, tc.output, expected, tc.wantGrows)
			}
		})
	}
}
