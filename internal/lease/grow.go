package lease

// Elastic growth (docs/design.md, "Elastic reservations"): the router's
// policy for growing a lease as its request generates. In an elastic
// pool a lease first reserves the prompt and the learned completion length
// (internal/estimate, learned.go). A streamed answer is counted as it
// passes: each chunk carrying output is at least one token of one
// sequence, and a usage object in a chunk (vLLM's continuous usage stats)
// gives the exact count. When the count comes within growSlack tokens per
// sequence of the reservation, the lease is grown, before the engine holds
// more than the ledger knows, to the larger of 1.5× its output reservation
// and what was seen plus growMinStep per sequence, never past what the
// request could hold at most (its worst case). A request therefore makes at
// most about log1.5(worst case / first reservation) Grow calls, each one
// ledger round trip on the answer's path; most make none.
//
// A non-streamed answer is not seen until it ends; its growth reaches the
// ledger through reconciliation: the engine's reported KV use above what
// its leases reserve is charged as its correction at the next applied
// observation. Between two observations an engine can hold at most (its
// non-streamed running sequences) × (tokens each decodes per observation
// interval) more than the ledger counts, which the pool's growth headroom
// is sized to cover (docs/benchmarks.md, "Goodput").

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

const (
	growSlack   = 8  // tokens per sequence before the reservation ends
	growMinStep = 32 // tokens per sequence a growth adds at least
	growTimeout = time.Second
)

// Growing grows one elastic lease as its streamed output is counted. One
// goroutine (the request's dispatch) uses it.
type Growing struct {
	t       Grower
	n       int64 // sequences
	prompt  int64 // KV tokens of the prompt, all sequences
	first   int64 // the lease's KV tokens at grant (FirstOutput)
	kv      int64 // the lease's KV tokens now
	ceiling int64 // the most the request can hold: its worst case
	stopped bool  // a Grow failed: reconciliation covers the rest
	chunks  int64 // streamed chunks that may carry output (Chunk)
	done    int64 // sequences the stream ended (Chunk)
}

// NewGrowing returns the growth of an elastic lease t of kv tokens for n
// sequences of promptKV prompt tokens in all, which can hold at most
// ceiling; nil when t cannot grow or already holds its ceiling.
func NewGrowing(t Ticket, n, promptKV, kv, ceiling int64) *Growing {
	g, ok := t.(Grower)
	if !ok || kv >= ceiling {
		return nil
	}
	return &Growing{t: g, n: n, prompt: promptKV, first: kv, kv: kv, ceiling: ceiling}
}

// Saw takes the output tokens streamed so far, all sequences, and grows the
// lease when they near its reservation. It reports the Grow call's result
// ("" when none was made): ok, overgrown, error or invalid.
func (g *Growing) Saw(ctx context.Context, out int64) string {
	if g == nil || g.stopped || g.kv >= g.ceiling || g.prompt+out+g.n*growSlack < g.kv {
		return ""
	}
	target := g.prompt + max((g.kv-g.prompt)*3/2, out+g.n*growMinStep)
	target = min(target, g.ceiling)
	ctx, cancel := context.WithTimeout(ctx, growTimeout)
	defer cancel()
	if err := g.t.Grow(ctx, target); err != nil {
		// The lease is gone (Done closes and dispatch ends), the pool
		// turned worst_case, or the ledger is unreachable: stop
		// growing; the engine's reports charge what it holds.
		g.stopped = true
		if errors.Is(err, ledger.ErrInvalidArgument) {
			return "invalid"
		}
		return "error"
	}
	g.kv = target
	if h, ok := g.t.(*Held); ok && h.Lease().Overgrown {
		return "overgrown"
	}
	return "ok"
}

// Chunk takes one chunk of a streamed answer: output reports that it may
// carry a token of a sequence (a role announcement carries none), finished
// counts the sequences it ends, reported is the engine's count of the
// output so far (0 when it reported none). A finished sequence holds no
// more: once every sequence has finished the lease needs no growth, else
// it grows as Saw does on the larger of the output chunks counted and the
// engine's count.
func (g *Growing) Chunk(ctx context.Context, output bool, finished int, reported int64) string {
	if g == nil {
		return ""
	}
	if output {
		g.chunks++
	}
	if g.done += int64(finished); g.done >= g.n {
		return ""
	}
	return g.Saw(ctx, max(g.chunks, reported))
}

// FirstOutput is the output the lease first reserved, all sequences (at
// least 1).
func (g *Growing) FirstOutput() int64 { return max(g.first-g.prompt, 1) }
