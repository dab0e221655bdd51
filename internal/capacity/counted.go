package capacity

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Op is a kind of ledger call the model counts.
type Op int

// The ledger calls, in the order tables list them.
const (
	OpKeepAlive Op = iota
	OpAcquire
	OpRelease
	OpGrow
	OpRenew
	OpReassert
	OpStats
	OpObserve
	OpSweep
	OpConfigure
	OpOther // SetDraining, Resize, Pools, List
	numOps
)

var opNames = [numOps]string{"keepalive", "acquire", "release", "grow", "renew", "reassert", "stats", "observe", "sweep", "configure", "other"}

func (o Op) String() string { return opNames[o] }

// Ops lists every Op.
func Ops() []Op {
	out := make([]Op, numOps)
	for i := range out {
		out[i] = Op(i)
	}
	return out
}

// Counts is a number of calls per Op.
type Counts [numOps]int64

// Counter counts ledger calls by Op, for any number of Counted ledgers.
type Counter struct{ n [numOps]atomic.Int64 }

// Counts returns the calls so far.
func (c *Counter) Counts() Counts {
	var out Counts
	for i := range out {
		out[i] = c.n[i].Load()
	}
	return out
}

// Counted is a ledger.Ledger that counts every call by Op in its Counter
// and passes it to the ledger it wraps; it changes nothing else. Safe for
// concurrent use.
type Counted struct {
	ledger.Ledger
	c *Counter
}

// NewCounted wraps l, counting into c.
func NewCounted(l ledger.Ledger, c *Counter) *Counted { return &Counted{Ledger: l, c: c} }

// Minus is a-b per Op.
func (a Counts) Minus(b Counts) Counts {
	for i := range a {
		a[i] -= b[i]
	}
	return a
}

// Total is the calls of every Op.
func (a Counts) Total() int64 {
	var t int64
	for _, n := range a {
		t += n
	}
	return t
}

func (c *Counted) add(o Op) { c.c.n[o].Add(1) }

func (c *Counted) Configure(ctx context.Context, spec ledger.PoolSpec) (ledger.Epoch, error) {
	c.add(OpConfigure)
	return c.Ledger.Configure(ctx, spec)
}

func (c *Counted) SetDraining(ctx context.Context, pool ledger.PoolID, engine ledger.EngineID, draining bool) error {
	c.add(OpOther)
	return c.Ledger.SetDraining(ctx, pool, engine, draining)
}

func (c *Counted) KeepAlive(ctx context.Context, pool ledger.PoolID, holder ledger.HolderID, ttl time.Duration) (ledger.Session, error) {
	c.add(OpKeepAlive)
	return c.Ledger.KeepAlive(ctx, pool, holder, ttl)
}

func (c *Counted) Acquire(ctx context.Context, req ledger.AcquireRequest) (ledger.Grant, error) {
	c.add(OpAcquire)
	return c.Ledger.Acquire(ctx, req)
}

func (c *Counted) Renew(ctx context.Context, ref ledger.LeaseRef, ttl time.Duration) (ledger.Renewal, error) {
	c.add(OpRenew)
	return c.Ledger.Renew(ctx, ref, ttl)
}

func (c *Counted) Resize(ctx context.Context, ref ledger.LeaseRef, kv int64) (ledger.Renewal, error) {
	c.add(OpOther)
	return c.Ledger.Resize(ctx, ref, kv)
}

func (c *Counted) Grow(ctx context.Context, ref ledger.LeaseRef, kv int64) (ledger.Renewal, error) {
	c.add(OpGrow)
	return c.Ledger.Grow(ctx, ref, kv)
}

func (c *Counted) Release(ctx context.Context, ref ledger.LeaseRef, usage ledger.Usage) (ledger.Released, error) {
	c.add(OpRelease)
	return c.Ledger.Release(ctx, ref, usage)
}

func (c *Counted) Reassert(ctx context.Context, lease ledger.Lease, ttl time.Duration) (ledger.Grant, error) {
	c.add(OpReassert)
	return c.Ledger.Reassert(ctx, lease, ttl)
}

func (c *Counted) Observe(ctx context.Context, obs ledger.Observation) (ledger.Observed, error) {
	c.add(OpObserve)
	return c.Ledger.Observe(ctx, obs)
}

func (c *Counted) Sweep(ctx context.Context, pool ledger.PoolID, max int) (ledger.Swept, error) {
	c.add(OpSweep)
	return c.Ledger.Sweep(ctx, pool, max)
}

func (c *Counted) Pools(ctx context.Context) ([]ledger.PoolID, error) {
	c.add(OpOther)
	return c.Ledger.Pools(ctx)
}

func (c *Counted) List(ctx context.Context, f ledger.Filter) ([]ledger.Lease, error) {
	c.add(OpOther)
	return c.Ledger.List(ctx, f)
}

func (c *Counted) Stats(ctx context.Context, pool ledger.PoolID) (ledger.PoolStats, error) {
	c.add(OpStats)
	return c.Ledger.Stats(ctx, pool)
}
