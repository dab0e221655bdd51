package lease_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
)

// TestGrowingChunk feeds a stream's chunks to the growth of a lease of 100
// KV tokens, 60 of them the prompt's: it grows once the output counted
// comes within 8 tokens of the 40 reserved (32), counting neither a role
// announcement nor a chunk after every sequence finished, and taking the
// engine's own count when it is larger.
func TestGrowingChunk(t *testing.T) {
	type chunk struct {
		output   bool
		finished int
		reported int64
	}
	outputs := func(n int) []chunk {
		c := make([]chunk, n)
		for i := range c {
			c[i].output = true
		}
		return c
	}
	announce := []chunk{{output: false}}
	tests := []struct {
		name   string
		chunks []chunk
		grown  bool
	}{
		{"within the slack", append(announce, outputs(31)...), false},
		{"the announcement is no output", append(announce, outputs(32)...), true},
		{"finished at the slack", append(append(announce, outputs(31)...), chunk{output: true, finished: 1}), false},
		{"nothing after the end", append(append(announce, outputs(31)...), chunk{output: true, finished: 1}, chunk{reported: 32}), false},
		{"the engine's count", append(outputs(3), chunk{output: true, reported: 32}), true},
	}
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		m := newManager(t, fx.fastConfig())
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				h := acquire(t, m, 100)
				defer func() { _ = h.Release(ledger.Usage{}) }()
				g := lease.NewGrowing(h, 1, 60, 100, 1000)
				for _, c := range tc.chunks {
					if res := g.Chunk(ctxT(t, 5*time.Second), c.output, c.finished, c.reported); res != "" && res != "ok" {
						t.Fatalf("Chunk grew with result %q, want ok", res)
					}
				}
				if kv := h.Lease().KVTokens; (kv > 100) != tc.grown {
					t.Errorf("lease of %d KV tokens after the chunks; grown: %v, want %v", kv, kv > 100, tc.grown)
				}
			})
		}
	})
}
