package ledger

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// The checked layer is what every backend on a store (memory, Redis, etcd)
// shares, in the shape of etcd's client/v3/namespace wrapper: Checked takes a
// backend's Store and returns the Ledger callers use. Each call is checked
// in one place — its arguments with the Validate functions, then the closed
// flag — before it reaches the store; every failure is wrapped once, as
// "<backend> <what was in progress>: <cause>"; and a List of every pool is
// one List per pool, merged here. A store therefore keeps only what is its
// own: how a valid call is carried out on its storage.

// Store is the backend-specific part of a Ledger: Ledger's methods, with
// the semantics of the package documentation, which Checked (a store's only
// caller) calls only under guarantees a Ledger's callers do not give:
//
//   - every argument passed the matching Validate function;
//   - no call starts after Close, and Close is called once;
//   - List is called with a filter naming one pool, and returns that pool's
//     leases f matches, ordered by fence, at most f.Limit of them (none for
//     a pool that does not exist).
//
// A Store returns its errors without saying which call failed (Checked
// does): a sentinel, wrapped with the detail only the store knows (which
// candidate, which holder), a *Rejection, or its storage's failure. Every
// Ledger is a Store.
type Store interface {
	Ledger
}

// Checked returns the Ledger that runs s: it validates every call's
// arguments, refuses calls after Close with an error matching ErrClosed,
// wraps every failure once with backend (a short name: "memory", "redis",
// "etcd") and what was in progress, and lists all pools as one List per
// pool. Wrapping keeps errors.Is and errors.As working: a rejection is still
// a *Rejection in the chain, a sentinel still matches. A Ledger Checked
// returned is returned as it is, not checked and wrapped twice.
func Checked(backend string, s Store) Ledger {
	if c, ok := s.(*checked); ok {
		return c
	}
	return &checked{backend: backend, s: s}
}

// checked is the Ledger Checked returns.
type checked struct {
	backend string
	s       Store
	// closed is set by the first Close; later calls fail with ErrClosed.
	closed atomic.Bool
}

// call is the part every method shares: the arguments' check (valid is its
// result), the closed check, then the store's call.
func call[T any](c *checked, valid error, do func() (T, error)) (T, error) {
	if valid != nil {
		var zero T
		return zero, valid
	}
	if c.closed.Load() {
		var zero T
		return zero, ErrClosed
	}
	return do()
}

// fail wraps err, once, with the backend and what was in progress (format
// and args, evaluated only on failure).
func (c *checked) fail(err error, format string, args ...any) error {
	return fmt.Errorf("%s %s: %w", c.backend, fmt.Sprintf(format, args...), err)
}

func (c *checked) Configure(ctx context.Context, spec PoolSpec) (Epoch, error) {
	e, err := call(c, ValidatePoolSpec(spec), func() (Epoch, error) { return c.s.Configure(ctx, spec) })
	if err != nil {
		return NoEpoch, c.fail(err, "configure pool %s", spec.Name)
	}
	return e, nil
}

func (c *checked) SetDraining(ctx context.Context, pool PoolID, engine EngineID, draining bool) error {
	_, err := call(c, ValidateSetDraining(pool, engine), func() (struct{}, error) {
		return struct{}{}, c.s.SetDraining(ctx, pool, engine, draining)
	})
	if err != nil {
		return c.fail(err, "set draining=%t on engine %s in pool %s", draining, engine, pool)
	}
	return nil
}

func (c *checked) KeepAlive(ctx context.Context, pool PoolID, holder HolderID, ttl time.Duration) (Session, error) {
	s, err := call(c, ValidateKeepAlive(pool, holder, ttl), func() (Session, error) { return c.s.KeepAlive(ctx, pool, holder, ttl) })
	if err != nil {
		return Session{}, c.fail(err, "keepalive of holder %s in pool %s", holder, pool)
	}
	return s, nil
}

func (c *checked) Acquire(ctx context.Context, req AcquireRequest) (Grant, error) {
	g, err := call(c, ValidateAcquire(req), func() (Grant, error) { return c.s.Acquire(ctx, req) })
	if err != nil {
		return Grant{}, c.fail(err, "acquire %s for holder %s in pool %s", req.RequestID, req.Holder, req.Pool)
	}
	return g, nil
}

func (c *checked) Renew(ctx context.Context, ref LeaseRef, ttl time.Duration) (Renewal, error) {
	r, err := call(c, ValidateRenew(ref, ttl), func() (Renewal, error) { return c.s.Renew(ctx, ref, ttl) })
	if err != nil {
		return Renewal{}, c.fail(err, "renew lease %s in pool %s", ref.ID, ref.Pool)
	}
	return r, nil
}

func (c *checked) Resize(ctx context.Context, ref LeaseRef, kvTokens int64) (Renewal, error) {
	r, err := call(c, ValidateResize(ref, kvTokens), func() (Renewal, error) { return c.s.Resize(ctx, ref, kvTokens) })
	if err != nil {
		return Renewal{}, c.fail(err, "resize lease %s in pool %s to %d KV tokens", ref.ID, ref.Pool, kvTokens)
	}
	return r, nil
}

func (c *checked) Grow(ctx context.Context, ref LeaseRef, kvTokens int64) (Renewal, error) {
	r, err := call(c, ValidateGrow(ref, kvTokens), func() (Renewal, error) { return c.s.Grow(ctx, ref, kvTokens) })
	if err != nil {
		return Renewal{}, c.fail(err, "grow lease %s in pool %s to %d KV tokens", ref.ID, ref.Pool, kvTokens)
	}
	return r, nil
}

func (c *checked) Release(ctx context.Context, ref LeaseRef, usage Usage) (Released, error) {
	valid := ValidateRef(ref)
	if valid == nil {
		valid = ValidateUsage(usage)
	}
	r, err := call(c, valid, func() (Released, error) { return c.s.Release(ctx, ref, usage) })
	if err != nil {
		return Released{}, c.fail(err, "release lease %s in pool %s", ref.ID, ref.Pool)
	}
	return r, nil
}

func (c *checked) Reassert(ctx context.Context, lease Lease, ttl time.Duration) (Grant, error) {
	g, err := call(c, ValidateReassert(lease, ttl), func() (Grant, error) { return c.s.Reassert(ctx, lease, ttl) })
	if err != nil {
		return Grant{}, c.fail(err, "reassert lease %s in pool %s", lease.ID, lease.Pool)
	}
	return g, nil
}

func (c *checked) Observe(ctx context.Context, obs Observation) (Observed, error) {
	o, err := call(c, ValidateObservation(obs), func() (Observed, error) { return c.s.Observe(ctx, obs) })
	if err != nil {
		return Observed{}, c.fail(err, "observe engine %s in pool %s", obs.Engine, obs.Pool)
	}
	return o, nil
}

func (c *checked) Sweep(ctx context.Context, pool PoolID, max int) (Swept, error) {
	s, err := call(c, ValidateSweep(pool, max), func() (Swept, error) { return c.s.Sweep(ctx, pool, max) })
	if err != nil {
		return Swept{}, c.fail(err, "sweep pool %s", pool)
	}
	return s, nil
}

func (c *checked) Pools(ctx context.Context) ([]PoolID, error) {
	p, err := call(c, nil, func() ([]PoolID, error) { return c.s.Pools(ctx) })
	if err != nil {
		return nil, c.fail(err, "list pools")
	}
	return p, nil
}

// List asks the store for one pool's leases, or for each pool's in Pools
// order when f names none, until f.Limit leases are found.
func (c *checked) List(ctx context.Context, f Filter) ([]Lease, error) {
	ls, err := call(c, ValidateFilter(f), func() ([]Lease, error) {
		if f.Pool != "" {
			return c.s.List(ctx, f)
		}
		pools, err := c.s.Pools(ctx)
		if err != nil {
			return nil, err
		}
		var out []Lease
		for _, p := range pools {
			one := f
			one.Pool = p
			if f.Limit > 0 {
				one.Limit = f.Limit - len(out)
			}
			got, err := c.s.List(ctx, one)
			if err != nil {
				return nil, fmt.Errorf("pool %s: %w", p, err)
			}
			out = append(out, got...)
			if f.Limit > 0 && len(out) >= f.Limit {
				return out[:f.Limit], nil
			}
		}
		return out, nil
	})
	if err != nil {
		return nil, c.fail(err, "list leases")
	}
	return ls, nil
}

func (c *checked) Stats(ctx context.Context, pool PoolID) (PoolStats, error) {
	s, err := call(c, ValidatePool(pool), func() (PoolStats, error) { return c.s.Stats(ctx, pool) })
	if err != nil {
		return PoolStats{}, c.fail(err, "stats of pool %s", pool)
	}
	return s, nil
}

// Close marks the ledger closed and closes the store, once; later calls of
// Close return nil.
func (c *checked) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if err := c.s.Close(); err != nil {
		return c.fail(err, "close")
	}
	return nil
}
