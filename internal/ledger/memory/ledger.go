package memory

import (
	"context"
	"fmt"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Ledger is the in-process ledger: ledger.Checked over the go-memdb store.
// The zero value is not usable; call New. It starts no goroutines: sweeping
// happens inside the calls.
type Ledger struct {
	ledger.Ledger
	s *store
}

var _ ledger.Ledger = (*Ledger)(nil)

// store is the memory backend's ledger.Store.
type store struct {
	db    *memdb.MemDB
	opts  ledger.Options
	clock ledger.Clock
	// writes runs the write transactions one at a time.
	writes serializer
}

var _ ledger.Store = (*store)(nil)

// New returns an empty ledger. A nil clock means the system clock. Options'
// zero fields take their defaults. Close makes every later call fail with
// ErrClosed; the state is dropped with the Ledger.
func New(opts ledger.Options, clock ledger.Clock) *Ledger {
	if clock == nil {
		clock = ledger.SystemClock{}
	}
	primary, err := memdb.NewMemDB(newSchema())
	if err != nil {
		// The schema is a constant; TestSchema keeps this unreachable.
		panic("memory: invalid go-memdb schema: " + err.Error())
	}
	// The store is a snapshot of the empty database: a go-memdb database
	// tracks every radix node a write replaces, to close its watch channel
	// at the commit, only when it is the primary one, and nothing here
	// watches (no WatchSet, no *Watch call). A snapshot is a whole
	// database of its own (writer lock, transactions, snapshots), without
	// that bookkeeping: a map entry per copied node and a channel closed
	// per node at each commit, ~8% of a grant's allocations.
	db := primary.Snapshot()
	s := &store{db: db, opts: opts.WithDefaults(), clock: clock}
	s.writes.db = db
	return &Ledger{Ledger: ledger.Checked("memory", s), s: s}
}

// Close has nothing to release: the state is dropped with the store.
func (l *store) Close() error { return nil }

// now is the ledger clock, truncated to the millisecond so that every
// backend computes the same deadlines.
func (l *store) now() time.Time { return toMillis(l.clock.Now()) }

// toMillis truncates t to the millisecond (in UTC, without a monotonic
// reading).
func toMillis(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()).UTC() }

// plus returns now+d with d truncated to the millisecond.
func plus(now time.Time, d time.Duration) time.Time { return now.Add(d.Truncate(time.Millisecond)) }

// sessionState is a holder session's state as a call found it.
type sessionState int

const (
	sessionNone sessionState = iota // no session row: never started or swept
	sessionLive
	sessionDead // expired, its leases not all swept yet
)

// op is one write transaction on one pool.
type op struct {
	txn *memdb.Txn
	now time.Time
	// pool is a private copy of the pool's row, written back on commit.
	pool *poolRow
	// session is the state of the calling holder's session before this
	// call's sweep.
	session sessionState
	// err is the first store failure; the transaction is then aborted.
	err error
	// orphanHold is Options.OrphanHold: how long a lease the ledger ends
	// stays charged in full on an observed engine.
	orphanHold time.Duration
}

// update runs fn in one write transaction on an existing pool: it
// classifies holder's session (if holder is set), sweeps up to sweep expired
// items, then calls fn. The transaction commits unless the store failed, so
// the sweep persists when fn refuses the call; fn therefore checks
// everything before it changes anything. fn's error is returned as is.
// The transaction may be shared with other calls (serializer, batching),
// and fn may run twice: it sets its results and writes only through o.
func (l *store) update(ctx context.Context, pool ledger.PoolID, holder ledger.HolderID, sweep int, fn func(o *op) error) (err error) {
	l.writes.doIn(func(b *batch) bool {
		var ok bool
		ok, err = l.updateIn(ctx, b, pool, holder, sweep, fn)
		return ok
	})
	return err
}

// updateIn is update's work in b's transaction, run by l.writes. ok is
// false on a store failure (err): b must then be aborted.
func (l *store) updateIn(ctx context.Context, b *batch, pool ledger.PoolID, holder ledger.HolderID, sweep int, fn func(o *op) error) (ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return true, err
	}
	txn := b.txn
	o := &op{txn: txn, now: l.now(), orphanHold: l.opts.OrphanHold}
	// A pool row this batch wrote is its own (no reader sees it before
	// the commit), and the pool's latest: change it in place, without a
	// read (a read of the table the batch wrote would drop go-memdb's
	// cache of the nodes it copied). Any other is read and copied first.
	if own := b.pools[pool]; own != nil {
		o.pool = own
	} else {
		p, err := txn.First(tablePools, indexID, pool, kindPool)
		if err != nil {
			return true, fmt.Errorf("read pool: %w", err)
		}
		if p == nil {
			return true, ledger.ErrUnknownPool
		}
		o.pool = p.(*poolRow).clone()
	}
	if holder != ledger.NoHolder {
		o.session = o.sessionOf(holder)
	}
	if sweep > 0 && !o.now.Before(o.pool.SweepFrom) {
		o.sweep(sweep)
	}
	ferr := fn(o)
	if o.err != nil {
		return false, o.err
	}
	o.insert(tablePools, o.pool)
	if o.err != nil {
		return false, o.err
	}
	if b.pools == nil {
		b.pools = make(map[ledger.PoolID]*poolRow, 1)
	}
	b.pools[pool] = o.pool
	return true, ferr
}

// view runs fn on a read-only snapshot.
func (l *store) view(ctx context.Context, fn func(txn *memdb.Txn, now time.Time) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	txn := l.db.Txn(false)
	defer txn.Abort()
	return fn(txn, l.now())
}

// insert writes a row, recording a store failure.
func (o *op) insert(table string, row any) {
	if o.err != nil {
		return
	}
	if err := o.txn.Insert(table, row); err != nil {
		o.err = fmt.Errorf("insert into %s: %w", table, err)
	}
	switch r := row.(type) {
	case *leaseRow:
		o.ends(r.Deadline)
	case *holderRow:
		o.ends(r.Expires)
	}
}

// ends lowers the pool's SweepFrom to t, the end of a row written.
func (o *op) ends(t time.Time) {
	if p := o.pool; p != nil && t.Before(p.SweepFrom) {
		p.SweepFrom = t
	}
}

// delete removes a row, recording a store failure.
func (o *op) delete(table string, row any) {
	if o.err != nil {
		return
	}
	if err := o.txn.Delete(table, row); err != nil {
		o.err = fmt.Errorf("delete from %s: %w", table, err)
	}
}

// first returns the first row under the index tuple prefix args, or nil.
func (o *op) first(table, index string, args ...any) any {
	if o.err != nil {
		return nil
	}
	row, err := o.txn.First(table, index, args...)
	if err != nil {
		o.err = fmt.Errorf("read %s by %s: %w", table, index, err)
		return nil
	}
	return row
}

// scan returns up to max rows (max <= 0: all) under the index tuple prefix
// args, in index order.
func (o *op) scan(max int, table, index string, args ...any) []any {
	if o.err != nil {
		return nil
	}
	it, err := o.txn.Get(table, index, args...)
	if err != nil {
		o.err = fmt.Errorf("scan %s by %s: %w", table, index, err)
		return nil
	}
	var rows []any
	for row := it.Next(); row != nil && (max <= 0 || len(rows) < max); row = it.Next() {
		rows = append(rows, row)
	}
	return rows
}

// count adds n to a pool counter.
func (o *op) count(name string, n int64) { o.pool.Counters[name] += n }

// engine returns the engine's row (configured or removed), or nil.
func (o *op) engine(id ledger.EngineID) *engineRow {
	row, _ := o.first(tableEngines, indexID, o.pool.Name, kindEngine, id).(*engineRow)
	return row
}

// tenant returns the tenant's row (configured or removed), or nil.
func (o *op) tenant(name ledger.TenantID) *tenantRow {
	row, _ := o.first(tableTenants, indexID, o.pool.Name, kindTenant, name).(*tenantRow)
	return row
}

// holder returns the holder's session row, or nil.
func (o *op) holder(id ledger.HolderID) *holderRow {
	row, _ := o.first(tableHolders, indexID, o.pool.Name, id).(*holderRow)
	return row
}

// lease returns the lease's row, or nil.
func (o *op) lease(id ledger.LeaseID) *leaseRow {
	f, err := ledger.ParseLeaseID(id)
	if err != nil {
		return nil
	}
	row, _ := o.first(tableLeases, indexID, o.pool.Name, f.Epoch, f.Seq).(*leaseRow)
	return row
}

// sessionOf classifies a holder's session at o.now.
func (o *op) sessionOf(id ledger.HolderID) sessionState {
	h := o.holder(id)
	switch {
	case h == nil:
		return sessionNone
	case h.live(o.now):
		return sessionLive
	default:
		return sessionDead
	}
}

// requireSession turns a session state into the error a call needing a live
// session returns.
func requireSession(s sessionState, holder ledger.HolderID) error {
	switch s {
	case sessionLive:
		return nil
	case sessionDead:
		return fmt.Errorf("holder %s: %w", holder, ledger.ErrSessionExpired)
	default:
		return fmt.Errorf("holder %s: %w", holder, ledger.ErrNoSession)
	}
}

var _ ledger.TotalsChecker = (*Ledger)(nil)

// CheckTotals compares the pool's engine and tenant totals with its lease
// rows in one read (ledger.TotalsChecker).
func (l *Ledger) CheckTotals(ctx context.Context, pool ledger.PoolID) ([]ledger.TotalsMismatch, error) {
	return ledger.CheckTotals(ctx, l.Ledger, pool)
}
