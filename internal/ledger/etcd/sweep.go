package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Expiry in etcd deletes markers; it cannot decrement the reservation
// counters. Three things turn a vanished marker into a released
// reservation, all through endLease and revokeHolder, whose guarded commits
// make concurrent sweepers (in this process or other routers) idempotent:
//
//   - the watcher: a watch on the pools' keys sees a deadline marker or live
//     marker deleted without its lease record (an expiry, not a release)
//     and queues the lease or holder for the worker goroutine;
//   - bounded sweeps: every mutating call and Sweep first look at the
//     expiry indexes (byddl, hexp) up to now, check the markers of at most
//     SweepBatch entries and end those whose markers are gone;
//   - a full sweep of every pool when the watcher (re)starts: New, a
//     compacted watch, a wiped store — catching expiries nobody watched.

// Sweep removes up to max ended leases and dead sessions of pool.
func (l *store) Sweep(ctx context.Context, pool ledger.PoolID, max int) (ledger.Swept, error) {
	if max == 0 {
		max = l.opts.SweepBatch
	}
	v, err := l.read(ctx, []string{l.keys.meta(pool)})
	if err != nil {
		return ledger.Swept{}, err
	}
	if _, err := l.meta(v, pool); err != nil {
		return ledger.Swept{}, err
	}
	return l.sweep(ctx, pool, max)
}

// errSweepFirst reports that an attempt's read found expiry index entries
// due: the caller sweeps and then decides.
var errSweepFirst = errors.New("etcd ledger: expiry entries due")

// dueProbe returns spans that look at the expiry indexes for one entry due
// by now. A hot-path call adds them to its first read and runs the bounded
// sweep only when they find something (errSweepFirst), instead of spending
// a round trip on the sweep's read every time.
func (l *store) dueProbe(pool ledger.PoolID) []span {
	now := l.now().UnixMilli()
	dFrom, dTo := l.keys.dueRange(pool, kindByDeadline, now)
	hFrom, hTo := l.keys.dueRange(pool, kindHolderExp, now)
	return []span{{from: dFrom, to: dTo, limit: 1, keysOnly: true}, {from: hFrom, to: hTo, limit: 1, keysOnly: true}}
}

// due reports whether the probe spans found an entry in v.
func due(v *view, probe []span) bool {
	for _, s := range probe {
		if len(v.ranges[s.from]) > 0 {
			return true
		}
	}
	return false
}

// sweepDue is the bounded sweep at the start of every mutating call.
func (l *store) sweepDue(ctx context.Context, pool ledger.PoolID) error {
	if _, err := l.sweep(ctx, pool, l.opts.SweepBatch); err != nil {
		return fmt.Errorf("sweep %s: %w", pool, err)
	}
	return nil
}

// sweep ends up to max leases whose deadline marker or holder's live marker
// is gone, found through the time-ordered indexes, and removes dead holders
// with no leases left.
func (l *store) sweep(ctx context.Context, pool ledger.PoolID, max int) (ledger.Swept, error) {
	var sw ledger.Swept
	k := l.keys
	now := l.now().UnixMilli()
	dFrom, dTo := k.dueRange(pool, kindByDeadline, now)
	hFrom, hTo := k.dueRange(pool, kindHolderExp, now)
	v, err := l.read(ctx, nil,
		span{from: dFrom, to: dTo, limit: int64(max), keysOnly: true},
		span{from: hFrom, to: hTo, limit: int64(max), keysOnly: true})
	if err != nil {
		return sw, err
	}
	var ids []ledger.LeaseID
	entries := map[ledger.LeaseID]string{}
	for _, kv := range v.ranges[dFrom] {
		if id, ok := lastSegment(string(kv.Key)); ok {
			ids = append(ids, ledger.LeaseID(id))
			entries[ledger.LeaseID(id)] = string(kv.Key)
		}
	}
	var holders []ledger.HolderID
	for _, kv := range v.ranges[hFrom] {
		if h, ok := lastSegment(string(kv.Key)); ok {
			holders = append(holders, ledger.HolderID(h))
		}
	}
	if len(ids) == 0 && len(holders) == 0 {
		return sw, nil
	}
	// Which markers are gone? Read them in chunks (no guards: endLease
	// decides again under its own).
	var markers []string
	for _, id := range ids {
		markers = append(markers, k.deadline(pool, id))
	}
	for _, h := range holders {
		markers = append(markers, k.live(pool, h))
	}
	gone := map[string]bool{}
	for i := 0; i < len(markers); i += maxReadOps {
		chunk := markers[i:min(i+maxReadOps, len(markers))]
		mv, err := l.read(ctx, chunk)
		if err != nil {
			return sw, err
		}
		for _, m := range chunk {
			gone[m] = !mv.has(m)
		}
	}
	budget := max
	for _, id := range ids {
		if budget == 0 {
			return sw, nil
		}
		if !gone[k.deadline(pool, id)] {
			continue
		}
		res, err := l.endLease(ctx, pool, id, ledger.NoHolder, ledger.Usage{})
		if err != nil {
			return sw, err
		}
		if res.cause != "" {
			budget--
			tally(&sw, res.cause)
		} else if err := l.dropIndex(ctx, pool, id, entries[id]); err != nil {
			return sw, err
		}
	}
	for _, h := range holders {
		if budget == 0 {
			return sw, nil
		}
		if !gone[k.live(pool, h)] {
			continue
		}
		hs, err := l.revokeHolder(ctx, pool, h, budget)
		if err != nil {
			return sw, err
		}
		budget -= hs.Expired + hs.Revoked
		sw.Expired += hs.Expired
		sw.Revoked += hs.Revoked
		sw.Holders += hs.Holders
	}
	return sw, nil
}

func tally(sw *ledger.Swept, cause string) {
	switch cause {
	case ledger.CounterExpired:
		sw.Expired++
	case ledger.CounterRevoked:
		sw.Revoked++
	}
}

// dropIndex deletes an expiry index entry whose lease no longer exists.
func (l *store) dropIndex(ctx context.Context, pool ledger.PoolID, id ledger.LeaseID, entry string) error {
	_, err := l.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(l.keys.lease(pool, id)), "=", 0)).
		Then(clientv3.OpDelete(entry)).Commit()
	if err != nil {
		return fmt.Errorf("drop deadline index: %w", err)
	}
	return nil
}

// revokeHolder ends up to max leases of a holder whose session died and,
// once none is left, deletes the holder record so the id may start afresh.
func (l *store) revokeHolder(ctx context.Context, pool ledger.PoolID, h ledger.HolderID, max int) (ledger.Swept, error) {
	var sw ledger.Swept
	k := l.keys
	idx := k.holderIdxPrefix(pool, h)
	resp, err := l.cli.Get(ctx, idx, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(max)))
	if err != nil {
		return sw, fmt.Errorf("read leases of %s: %w", h, err)
	}
	for _, kv := range resp.Kvs {
		id, ok := lastSegment(string(kv.Key))
		if !ok {
			continue
		}
		res, err := l.endLease(ctx, pool, ledger.LeaseID(id), ledger.NoHolder, ledger.Usage{})
		if err != nil {
			return sw, err
		}
		tally(&sw, res.cause)
		if res.cause == "" {
			// The index entry outlived its lease; drop it if the holder
			// is dead and the lease still absent.
			_, err := l.cli.Txn(ctx).If(
				clientv3.Compare(clientv3.CreateRevision(k.lease(pool, ledger.LeaseID(id))), "=", 0),
				clientv3.Compare(clientv3.CreateRevision(k.live(pool, h)), "=", 0)).
				Then(clientv3.OpDelete(string(kv.Key))).Commit()
			if err != nil {
				return sw, fmt.Errorf("drop holder index: %w", err)
			}
		}
	}
	if resp.More {
		return sw, nil
	}
	hk := k.holder(pool, h)
	err = l.retry(ctx, func() (bool, error) {
		v, err := l.read(ctx, []string{hk, k.live(pool, h)}, span{from: idx, countOnly: true, guard: true})
		if err != nil {
			return false, err
		}
		if !v.has(hk) || v.has(k.live(pool, h)) || v.counts[idx] > 0 {
			return true, nil
		}
		var hr holderRec
		if err := decode(hk, v.value(hk), &hr); err != nil {
			return false, err
		}
		ok, err := l.commit(ctx, v, clientv3.OpDelete(hk), clientv3.OpDelete(k.holderExp(pool, hr.ExpiresMs, h)))
		if ok {
			sw.Holders++
		}
		return ok, err
	})
	if err != nil {
		return sw, fmt.Errorf("remove holder %s: %w", h, err)
	}
	return sw, nil
}

// sweepQueue is the worker's to-do list: leases and holders whose markers
// the watcher saw vanish, and pools to sweep fully.
type sweepQueue struct {
	// mu guards items and full.
	mu    sync.Mutex
	items map[queued]struct{}
	full  bool
	wakeC chan struct{} // cap 1
}

type queued struct {
	pool   ledger.PoolID
	lease  ledger.LeaseID
	holder ledger.HolderID
}

func (q *sweepQueue) init() {
	q.items = map[queued]struct{}{}
	q.wakeC = make(chan struct{}, 1)
}

func (q *sweepQueue) add(it queued) {
	q.mu.Lock()
	q.items[it] = struct{}{}
	q.mu.Unlock()
	q.wake()
}

func (q *sweepQueue) addFull() {
	q.mu.Lock()
	q.full = true
	q.mu.Unlock()
	q.wake()
}

func (q *sweepQueue) wake() {
	select {
	case q.wakeC <- struct{}{}:
	default:
	}
}

func (q *sweepQueue) take() (items []queued, full bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for it := range q.items {
		items = append(items, it)
	}
	clear(q.items)
	full, q.full = q.full, false
	return items, full
}

// startBackground starts the watcher and the worker; Close waits for both.
func (l *store) startBackground() {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		l.work()
	}()
	if !l.opts.NoWatch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.watch()
		}()
	} else {
		l.queue.addFull()
	}
	go func() {
		wg.Wait()
		close(l.doneC)
	}()
}

// work runs queued sweeps until Close. Failures are dropped: the bounded
// sweeps of later calls and the next full sweep find the same work again.
func (l *store) work() {
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-l.queue.wakeC:
		}
		items, full := l.queue.take()
		for _, it := range items {
			ctx, cancel := context.WithTimeout(l.ctx, callTimeout)
			if it.holder != ledger.NoHolder {
				_, _ = l.revokeHolderAll(ctx, it.pool, it.holder)
			} else {
				_, _ = l.endLease(ctx, it.pool, it.lease, ledger.NoHolder, ledger.Usage{})
			}
			cancel()
		}
		if full {
			l.sweepAll()
		}
	}
}

// revokeHolderAll revokes a dead holder's leases batch by batch.
func (l *store) revokeHolderAll(ctx context.Context, pool ledger.PoolID, h ledger.HolderID) (ledger.Swept, error) {
	var total ledger.Swept
	for {
		sw, err := l.revokeHolder(ctx, pool, h, l.opts.SweepBatch)
		total.Expired += sw.Expired
		total.Revoked += sw.Revoked
		total.Holders += sw.Holders
		if err != nil || sw.Expired+sw.Revoked == 0 || sw.Holders > 0 {
			return total, err
		}
	}
}

// sweepAll sweeps every pool until nothing due is left.
func (l *store) sweepAll() {
	ctx, cancel := context.WithTimeout(l.ctx, 10*callTimeout)
	defer cancel()
	pools, err := l.Pools(ctx)
	if err != nil {
		return
	}
	for _, p := range pools {
		for ctx.Err() == nil {
			sw, err := l.sweep(ctx, p, l.opts.SweepBatch)
			if err != nil || sw.Expired+sw.Revoked+sw.Holders == 0 {
				break
			}
		}
	}
}

// watch feeds the queue from a watch on every pool's keys. It restarts the
// watch (and queues a full sweep) when it fails, is compacted, or the store
// was wiped.
func (l *store) watch() {
	for l.ctx.Err() == nil {
		ctx, cancel := context.WithCancel(l.ctx)
		wch := l.cli.Watch(ctx, l.keys.poolsRoot(), clientv3.WithPrefix(), clientv3.WithFilterPut())
		l.queue.addFull()
		l.follow(wch)
		cancel()
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-l.ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// follow consumes one watch until it ends or must restart.
func (l *store) follow(wch clientv3.WatchChan) {
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-l.resetC:
			return
		case wr, ok := <-wch:
			if !ok || wr.Canceled || errors.Is(wr.Err(), context.Canceled) {
				return
			}
			if wr.Err() != nil {
				return
			}
			l.queueExpiries(wr.Events)
		}
	}
}

// queueExpiries queues deadline and live markers deleted without their
// lease or holder record in the same revision: those were expiries.
func (l *store) queueExpiries(events []*clientv3.Event) {
	gone := map[string]bool{} // records deleted, by revision and key
	for _, ev := range events {
		gone[fmt.Sprintf("%d %s", ev.Kv.ModRevision, ev.Kv.Key)] = true
	}
	for _, ev := range events {
		p, ok := l.keys.parse(string(ev.Kv.Key))
		if !ok {
			continue
		}
		switch p.kind {
		case kindDeadline:
			id := ledger.LeaseID(p.rest)
			if !gone[fmt.Sprintf("%d %s", ev.Kv.ModRevision, l.keys.lease(p.pool, id))] {
				l.queue.add(queued{pool: p.pool, lease: id})
			}
		case kindLive:
			h, err := unesc(p.rest)
			if err == nil && !gone[fmt.Sprintf("%d %s", ev.Kv.ModRevision, l.keys.holder(p.pool, ledger.HolderID(h)))] {
				l.queue.add(queued{pool: p.pool, holder: ledger.HolderID(h)})
			}
		}
	}
}
