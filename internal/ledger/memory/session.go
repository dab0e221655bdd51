package memory

import (
	"context"
	"fmt"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/leasehold/leasehold/internal/ledger"
)

// KeepAlive creates or extends the holder's session in pool to now+ttl.
// A session found dead fails with ErrSessionExpired, even when this call's
// own sweep then removes it: the holder learns its session died (and its
// leases with it) at least once before the id can start a fresh session.
func (l *store) KeepAlive(ctx context.Context, pool ledger.PoolID, holder ledger.HolderID, ttl time.Duration) (ledger.Session, error) {
	var s ledger.Session
	err := l.update(ctx, pool, holder, l.opts.SweepBatch, func(o *op) error {
		if o.session == sessionDead {
			return ledger.ErrSessionExpired
		}
		h := &holderRow{Pool: pool, Holder: holder, Expires: plus(o.now, ttl)}
		o.insert(tableHolders, h)
		live, err := liveHolders(o.txn, pool, o.now)
		if err != nil {
			o.err = err
			return nil
		}
		s = ledger.Session{
			Pool:            pool,
			Holder:          holder,
			Expires:         h.Expires,
			LiveHolders:     live,
			Epoch:           o.pool.Epoch,
			RecoveringUntil: o.pool.recovering(o.now),
		}
		if !s.RecoveringUntil.IsZero() {
			for _, row := range o.scan(0, tableEngines, indexID, pool, kindEngine) {
				if e := row.(*engineRow); !e.Removed && e.state().Recovered(o.now, o.pool.ObservedSince, o.pool.Reserve) {
					s.Recovered++
				}
			}
		}
		return nil
	})
	if err != nil {
		return ledger.Session{}, err
	}
	return s, nil
}

// liveHolders counts the pool's sessions live at now: those expiring after
// now, found from the expiry index without touching dead ones.
func liveHolders(txn *memdb.Txn, pool ledger.PoolID, now time.Time) (int, error) {
	it, err := txn.LowerBound(tableHolders, indexExpiry, pool, now.UnixMilli()+1)
	if err != nil {
		return 0, fmt.Errorf("scan holders by expiry: %w", err)
	}
	n := 0
	for row := it.Next(); row != nil && row.(*holderRow).Pool == pool; row = it.Next() {
		n++
	}
	return n, nil
}
