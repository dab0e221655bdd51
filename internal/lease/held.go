package lease

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Held is one lease this router holds. Dispatch selects on Done: when it
// closes the lease must no longer be used (cancel the upstream request,
// which aborts it on the engine), then call Release. Held is safe for
// concurrent use.
type Held struct {
	m     *Manager
	pool  *poolState
	gen   uint64        // the pool's incarnation it was granted in
	doneC chan struct{} // closed once, by finish

	// mu guards lease, err, gone and hooks.
	mu    sync.Mutex
	lease ledger.Lease
	err   error // set when doneC closes
	gone  bool  // the ledger no longer has it: Release skips the call
	hooks hooks // AfterDone's

	// opMu serializes a re-assertion's ledger call against Release, so a
	// lease released meanwhile is never re-inserted. It guards releasing.
	opMu      sync.Mutex
	releasing bool

	releaseOnce sync.Once
	releaseErr  error
}

// Lease returns the lease as the ledger last reported it (renewals,
// resizes and re-assertions update it).
func (h *Held) Lease() ledger.Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease
}

// Engine returns the lease's engine.
func (h *Held) Engine() ledger.EngineID { return h.Lease().Engine }

// Done is closed when the lease must no longer be used: fenced
// (ErrFenced), lost (ErrLeaseLost), released (ErrReleased) or the manager
// closed (ErrClosed). Err says which.
func (h *Held) Done() <-chan struct{} { return h.doneC }

// Err is nil while the lease is usable, and why Done closed after.
func (h *Held) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// AfterDone runs f in its own goroutine once Done closes (DoneFunc).
func (h *Held) AfterDone(f func()) (stop func() bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hk := h.hooks.add(f, h.err != nil)
	return func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.hooks.remove(hk)
	}
}

// finish closes Done with err unless it is closed, counting it in c (if
// not nil) first so that whoever sees Done closed sees the count. It
// reports whether this call closed it.
func (h *Held) finish(err error, c *atomic.Uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return false
	}
	if c != nil {
		c.Add(1)
	}
	h.err = err
	close(h.doneC)
	h.hooks.fire()
	return true
}

// lose marks the lease as gone from the ledger and closes Done with err.
func (h *Held) lose(err error, c *atomic.Uint64) bool {
	h.mu.Lock()
	h.gone = true
	h.mu.Unlock()
	return h.finish(err, c)
}

// Release gives the lease back with the request's actual usage and removes
// it from the local table. It is idempotent (later calls return the first
// result) and runs under its own context bounded by ReleaseTimeout, so it
// may be called after the request's context was cancelled. If the ledger
// cannot be reached the release is retried in the background until the
// lease's deadline, and the error is returned.
func (h *Held) Release(usage ledger.Usage) error {
	ctx, cancel := context.WithTimeout(context.Background(), h.m.cfg.ReleaseTimeout)
	defer cancel()
	return h.release(ctx, usage, true)
}

func (h *Held) release(ctx context.Context, usage ledger.Usage, closeDone bool) error {
	h.releaseOnce.Do(func() {
		h.opMu.Lock()
		h.releasing = true
		h.opMu.Unlock()
		deadline := h.m.remove(h)
		if closeDone {
			h.finish(ErrReleased, nil)
		}
		h.mu.Lock()
		ref, gone := h.lease.Ref(), h.gone
		h.mu.Unlock()
		if gone {
			return
		}
		h.releaseErr = h.m.releaseCtx(ctx, ref, usage, deadline)
	})
	return h.releaseErr
}

// Resize sets the lease's KV tokens: shrinking always succeeds, growth
// only if it fits (else a *ledger.Rejection).
func (h *Held) Resize(ctx context.Context, kvTokens int64) error {
	return h.setKV(ctx, "resize", kvTokens, h.m.l.Resize, func(rw *row, got ledger.Lease) {
		rw.Lease.KVTokens = got.KVTokens
	})
}

// Grow raises the lease's KV tokens to kvTokens, what its engine now holds
// for the request (an elastic pool's lease; docs/design.md, "Elastic
// reservations"). The ledger records growth whatever the engine's load, so
// only a lost lease, a worst_case pool or bad arguments make it fail.
func (h *Held) Grow(ctx context.Context, kvTokens int64) error {
	return h.setKV(ctx, "grow", kvTokens, h.m.l.Grow, func(rw *row, got ledger.Lease) {
		rw.Lease.KVTokens, rw.Lease.Overgrown = got.KVTokens, got.Overgrown
	})
}

// setKV runs op (the ledger's Resize or Grow, named verb) on the held
// lease and copies what apply takes of the ledger's answer into its row.
func (h *Held) setKV(ctx context.Context, verb string, kvTokens int64,
	op func(context.Context, ledger.LeaseRef, int64) (ledger.Renewal, error), apply func(*row, ledger.Lease),
) error {
	if err := h.Err(); err != nil {
		return fmt.Errorf("%s: %w", verb, err)
	}
	lease := h.Lease()
	r, err := op(ctx, lease.Ref(), kvTokens)
	if err != nil {
		return fmt.Errorf("%s lease %s to %d kv tokens: %w", verb, lease.ID, kvTokens, err)
	}
	h.m.update(h, func(rw *row) { apply(rw, r.Lease) })
	return nil
}

// remove deletes h's row and returns the lease's local deadline (zero if
// it was not in the table).
func (m *Manager) remove(h *Held) time.Time {
	l := h.Lease()
	var deadline time.Time
	m.tab.write(func(w tableWrite) {
		if r := w.get(l.Pool, l.ID); r != nil && r.held == h {
			w.del(r)
			deadline = r.RenewedAt.Add(r.TTL)
		}
	})
	return deadline
}

// update replaces h's row with a changed copy, and h's lease with the
// row's; false if h is no longer in the table.
func (m *Manager) update(h *Held, f func(*row)) bool {
	l := h.Lease()
	ok := false
	m.tab.write(func(w tableWrite) {
		r := w.get(l.Pool, l.ID)
		if r == nil || r.held != h {
			return
		}
		nr := r.with(f)
		w.put(nr)
		// Set under the table's lock so concurrent updates apply in order.
		h.mu.Lock()
		h.lease = nr.Lease
		h.mu.Unlock()
		ok = true
	})
	return ok
}
