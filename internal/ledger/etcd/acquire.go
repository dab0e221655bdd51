package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Acquire reads the pool (meta, recovery marker, the holder's session, the
// request's idempotency key, the sequence, the tenant, every engine's state
// and freshness) in one transaction, decides with ledger.Admit, and commits
// the grant guarded by the ModRevision of every key it read and of the
// engine range: two routers can never both take the last capacity, because
// the second commit finds a guard changed, reads again and decides again.
func (l *store) Acquire(ctx context.Context, req ledger.AcquireRequest) (ledger.Grant, error) {
	var out ledger.Grant
	var rejection *ledger.Rejection
	mu := l.poolLock(req.Pool)
	// The first attempt's read also looks for expired entries; only when
	// there are some does the bounded sweep run before the decision.
	probe := true
	attempt := func() (ledger.Grant, *ledger.Rejection, ledger.LeaseID, error) {
		mu.Lock()
		defer mu.Unlock()
		return l.tryAcquire(ctx, req, probe)
	}
	err := l.retry(ctx, func() (bool, error) {
		g, rej, ended, err := attempt()
		if errors.Is(err, errSweepFirst) {
			probe = false
			if err := l.sweepDue(ctx, req.Pool); err != nil {
				return false, err
			}
			g, rej, ended, err = attempt()
		}
		out, rejection = g, rej
		switch {
		case err != nil || rej != nil:
			return rej != nil, err
		case ended != ledger.NoLease:
			// The request's earlier lease has ended: sweep it, decide anew.
			_, err := l.endLease(ctx, req.Pool, ended, ledger.NoHolder, ledger.Usage{})
			return false, err
		}
		return g.Lease.ID != ledger.NoLease, nil
	})
	switch {
	case rejection != nil:
		return ledger.Grant{}, rejection
	case err != nil:
		return ledger.Grant{}, err
	}
	return out, nil
}

// tryAcquire makes one attempt. It returns a grant, a committed rejection,
// the id of the request's ended lease to sweep, or nothing when a guard
// failed. With probe it fails with errSweepFirst, deciding nothing, when
// expiry entries are due.
func (l *store) tryAcquire(ctx context.Context, req ledger.AcquireRequest, probe bool) (ledger.Grant, *ledger.Rejection, ledger.LeaseID, error) {
	pool := req.Pool
	k := l.keys
	mk, sk, hk, lk, rk, tk := k.meta(pool), k.seq(pool), k.holder(pool, req.Holder), k.live(pool, req.Holder),
		k.request(pool, req.Holder, req.RequestID), k.tenant(pool, req.Tenant)
	engines, fresh := k.kind(pool, kindEngine), k.kind(pool, kindFresh)
	spans := []span{{from: engines, guard: true}, {from: fresh, keysOnly: true}}
	var dueSpans []span
	if probe {
		dueSpans = l.dueProbe(pool)
		spans = append(spans, dueSpans...)
	}
	v, err := l.read(ctx, []string{mk, k.recovering(pool), sk, hk, lk, rk, tk}, spans...)
	if err != nil {
		return ledger.Grant{}, nil, ledger.NoLease, err
	}
	m, err := l.meta(v, pool)
	if err != nil {
		return ledger.Grant{}, nil, ledger.NoLease, err
	}
	if due(v, dueSpans) {
		return ledger.Grant{}, nil, ledger.NoLease, errSweepFirst
	}
	epoch := ledger.Epoch(m.Epoch)
	if err := l.checkSession(v, pool, req.Holder); err != nil {
		return ledger.Grant{}, nil, ledger.NoLease, err
	}
	if v.has(rk) {
		return l.replay(ctx, v, pool, ledger.LeaseID(v.value(rk)), epoch)
	}
	tspec, ok := m.tenant(req.Tenant)
	if !ok {
		return ledger.Grant{}, nil, ledger.NoLease, fmt.Errorf("%w: %s in pool %s", ledger.ErrUnknownTenant, req.Tenant, pool)
	}
	prio, ok := m.priority(req.Priority)
	if !ok {
		return ledger.Grant{}, nil, ledger.NoLease, fmt.Errorf("%w: %s in pool %s", ledger.ErrUnknownPriority, req.Priority, pool)
	}
	isFresh := map[string]bool{}
	for _, kv := range v.ranges[fresh] {
		isFresh[string(kv.Key)] = true
	}
	recs := map[string][]byte{}
	for _, kv := range v.ranges[engines] {
		recs[string(kv.Key)] = kv.Value
	}
	base := l.opts.Clock.Now()
	now := time.UnixMilli(base.UnixMilli())
	states := make([]ledger.EngineState, len(req.Candidates))
	erecs := make([]engineRec, len(req.Candidates))
	for i, c := range req.Candidates {
		spec, ok := m.engine(c)
		if !ok {
			return ledger.Grant{}, nil, ledger.NoLease, fmt.Errorf("%w: %s in pool %s", ledger.ErrUnknownEngine, c, pool)
		}
		ek := k.engine(pool, c)
		if b := recs[ek]; b != nil {
			if err := decode(ek, b, &erecs[i]); err != nil {
				return ledger.Grant{}, nil, ledger.NoLease, err
			}
		}
		states[i] = admissionState(spec, erecs[i], isFresh[k.fresh(pool, c)], now)
	}
	trec, err := l.tenantRec(v, pool, req.Tenant)
	if err != nil {
		return ledger.Grant{}, nil, ledger.NoLease, err
	}
	capKV, capSlots := m.capacity()
	idx, rej := ledger.Admit(ledger.Admission{
		Now: now, RecoveringUntil: l.recoveringUntil(v, pool, now),
		CapacityKV: capKV, CapacitySlots: capSlots,
		Tenant: tspec, TenantKV: trec.ReservedKV, TenantSlots: trec.ReservedSlots,
		MaxFill: prio.MaxFill, Candidates: states,
		KVTokens: req.KVTokens, Slots: req.Slots,
		RetryAfter: m.Spec.RetryAfter, Epoch: epoch, GrowthHeadroom: m.Spec.GrowthHeadroom,
		Breaker: m.Spec.Breaker, Tokens: req.ChargedTokens(), Rates: trec.rates(), RateWindow: m.Spec.RateWindow,
		ObservedSince: l.observedSince(m), Reserve: m.Spec.Mode(),
	})
	if rej != nil {
		// Count the rejection under the same guards: it is part of the
		// decision, so a lost race decides again.
		count(&trec.Counters, ledger.CounterRejections, 1)
		count(&trec.Counters, ledger.CounterRejections+":"+string(rej.Reason), 1)
		ok, err := l.commit(ctx, v, clientv3.OpPut(tk, encode(trec)))
		if !ok || err != nil {
			return ledger.Grant{}, nil, ledger.NoLease, err
		}
		return ledger.Grant{}, rej, ledger.NoLease, nil
	}

	seq, err := parseUint(sk, v.value(sk))
	if err != nil {
		return ledger.Grant{}, nil, ledger.NoLease, err
	}
	if seq, err = ledger.NextSeq(seq); err != nil {
		return ledger.Grant{}, nil, ledger.NoLease, err
	}
	engine := req.Candidates[idx]
	er := erecs[idx]
	// A grant on a half-open engine is a probe: it takes a slot of the
	// probe budget in the engine record the grant writes anyway.
	b, probe := er.advanceBreaker(now, m.Spec.Breaker).Grant(m.Spec.Breaker)
	er.setBreaker(b)
	deadline := now.Add(ledger.CeilMillis(req.TTL))
	lr := leaseRec{
		Engine: engine, Tenant: req.Tenant, Priority: req.Priority, KVTokens: req.KVTokens, Slots: req.Slots,
		Holder: req.Holder, RequestID: req.RequestID, CreatedMs: now.UnixMilli(), DeadlineMs: deadline.UnixMilli(),
		Epoch: m.Epoch, Seq: seq, Probe: probe,
	}
	if tspec.Rated() {
		// The grant's charge, under the guards of the check.
		lr.Tokens = req.ChargedTokens()
		trec.setRates(ledger.ChargeRate(trec.rates(), now, m.Spec.RateWindow, lr.Tokens))
	}
	reserve(&er, &trec, lr, 1)
	count(&er.Counters, ledger.CounterGrants, 1)
	etcdLease, err := l.leaseUntil(ctx, base, base.Add(req.TTL))
	if err != nil {
		return ledger.Grant{}, nil, ledger.NoLease, err
	}
	ops := append(l.leaseOps(pool, lr, etcdLease),
		clientv3.OpPut(rk, string(lr.id())),
		clientv3.OpPut(k.engine(pool, engine), encode(er)),
		clientv3.OpPut(tk, encode(trec)),
		clientv3.OpPut(sk, strconv.FormatUint(seq, 10)),
	)
	// The new id must be free: a grant never overwrites a lease. Guarded
	// rather than read, so a grant costs no extra round trip; a commit that
	// fails looks.
	nk := k.lease(pool, lr.id())
	v.guards = append(v.guards, clientv3.Compare(clientv3.CreateRevision(nk), "=", 0))
	ok, err = l.commit(ctx, v, ops...)
	if err != nil {
		return ledger.Grant{}, nil, ledger.NoLease, err
	}
	if !ok {
		return ledger.Grant{}, nil, ledger.NoLease, l.checkFree(ctx, pool, sk, seq-1, nk, lr.id())
	}
	return ledger.Grant{Lease: lr.lease(pool), Epoch: epoch}, nil, ledger.NoLease, nil
}

// checkFree looks at why a grant's commit failed: when the pool's sequence
// (key sk) is still prev and the lease key lk of the id it would mint
// exists, the grant can never succeed (ErrFenceExhausted); otherwise
// another writer won the race and the caller decides again.
func (l *store) checkFree(ctx context.Context, pool ledger.PoolID, sk string, prev uint64, lk string, id ledger.LeaseID) error {
	v, err := l.read(ctx, []string{sk, lk})
	if err != nil || !v.has(lk) {
		return err
	}
	if seq, err := parseUint(sk, v.value(sk)); err != nil || seq != prev {
		return err
	}
	var held leaseRec
	if err := decode(lk, v.value(lk), &held); err != nil {
		return err
	}
	return fmt.Errorf("%w: lease id %s of the next sequence in pool %s is held by %s", ledger.ErrFenceExhausted, id, pool, held.Holder)
}

// leaseOps writes a lease's record, deadline marker and indexes.
func (l *store) leaseOps(pool ledger.PoolID, lr leaseRec, etcdLease clientv3.LeaseID) []clientv3.Op {
	id := lr.id()
	return []clientv3.Op{
		clientv3.OpPut(l.keys.lease(pool, id), encode(lr)),
		clientv3.OpPut(l.keys.deadline(pool, id), "", clientv3.WithLease(etcdLease)),
		clientv3.OpPut(l.keys.byDeadline(pool, lr.DeadlineMs, id), ""),
		clientv3.OpPut(l.keys.holderIdx(pool, lr.Holder, id), ""),
	}
}

// checkSession requires the holder's live session in v.
func (l *store) checkSession(v *view, pool ledger.PoolID, h ledger.HolderID) error {
	switch {
	case !v.has(l.keys.holder(pool, h)):
		return fmt.Errorf("%w: %s in pool %s", ledger.ErrNoSession, h, pool)
	case !v.has(l.keys.live(pool, h)):
		return fmt.Errorf("%w: %s in pool %s", ledger.ErrSessionExpired, h, pool)
	}
	return nil
}

// replay returns the lease an earlier Acquire with the same (holder,
// request id) granted, counting the replay. A lease whose deadline marker
// is gone has ended: it is swept and the caller decides afresh.
func (l *store) replay(ctx context.Context, v *view, pool ledger.PoolID, id ledger.LeaseID, epoch ledger.Epoch) (ledger.Grant, *ledger.Rejection, ledger.LeaseID, error) {
	lk, dk := l.keys.lease(pool, id), l.keys.deadline(pool, id)
	if err := l.readMore(ctx, v, []string{lk, dk}); err != nil {
		return ledger.Grant{}, nil, ledger.NoLease, err
	}
	if !v.has(lk) || !v.has(dk) {
		return ledger.Grant{}, nil, id, nil
	}
	var lr leaseRec
	if err := decode(lk, v.value(lk), &lr); err != nil {
		return ledger.Grant{}, nil, ledger.NoLease, err
	}
	ek := l.keys.engine(pool, lr.Engine)
	if err := l.readMore(ctx, v, []string{ek}); err != nil {
		return ledger.Grant{}, nil, ledger.NoLease, err
	}
	er, err := l.engineRec(v, pool, lr.Engine)
	if err != nil {
		return ledger.Grant{}, nil, ledger.NoLease, err
	}
	count(&er.Counters, ledger.CounterReplays, 1)
	ok, err := l.commit(ctx, v, clientv3.OpPut(ek, encode(er)))
	if !ok || err != nil {
		return ledger.Grant{}, nil, ledger.NoLease, err
	}
	return ledger.Grant{Lease: lr.leaseOn(pool, er), Replayed: true, Epoch: epoch}, nil, ledger.NoLease, nil
}

// Reassert re-inserts a lease its live holder still uses after the ledger
// lost it, when ledger.CheckReassert finds it plausible. It is accepted
// above capacity; an existing lease id is returned as it is (Replayed) to
// its holder and refused to any other. On an engine that has been observed
// the lease is Unconfirmed (its ReassertedMs set, the engine record
// marked) and its deadline at most now+ConfirmWithin.
func (l *store) Reassert(ctx context.Context, lease ledger.Lease, ttl time.Duration) (ledger.Grant, error) {
	id, fence := lease.ID, lease.Fence // ValidateReassert: id is the fence's, canonical
	pool := lease.Pool
	if err := l.sweepDue(ctx, pool); err != nil {
		return ledger.Grant{}, err
	}
	k := l.keys
	mk, sk, hk, lvk, lk, rk, tk, ek := k.meta(pool), k.seq(pool), k.holder(pool, lease.Holder), k.live(pool, lease.Holder),
		k.lease(pool, id), k.request(pool, lease.Holder, lease.RequestID), k.tenant(pool, lease.Tenant), k.engine(pool, lease.Engine)
	var out ledger.Grant
	err := l.retryPool(ctx, pool, func() (bool, error) {
		v, err := l.read(ctx, []string{mk, sk, hk, lvk, lk, rk, tk, ek})
		if err != nil {
			return false, err
		}
		m, err := l.meta(v, pool)
		if err != nil {
			return false, err
		}
		epoch := ledger.Epoch(m.Epoch)
		if err := l.checkSession(v, pool, lease.Holder); err != nil {
			return false, err
		}
		spec, ok := m.engine(lease.Engine)
		if !ok {
			return false, fmt.Errorf("%w: %s in pool %s", ledger.ErrUnknownEngine, lease.Engine, pool)
		}
		if _, ok := m.tenant(lease.Tenant); !ok {
			return false, fmt.Errorf("%w: %s in pool %s", ledger.ErrUnknownTenant, lease.Tenant, pool)
		}
		if _, ok := m.priority(lease.Priority); !ok {
			return false, fmt.Errorf("%w: %s in pool %s", ledger.ErrUnknownPriority, lease.Priority, pool)
		}
		if v.has(lk) {
			var lr leaseRec
			if err := decode(lk, v.value(lk), &lr); err != nil {
				return false, err
			}
			if lr.Holder != lease.Holder {
				return false, fmt.Errorf("%w: lease %s", ledger.ErrNotHolder, id)
			}
			lek := k.engine(pool, lr.Engine)
			if err := l.readMore(ctx, v, []string{lek}); err != nil {
				return false, err
			}
			er, err := l.engineRec(v, pool, lr.Engine)
			if err != nil {
				return false, err
			}
			out = ledger.Grant{Lease: lr.leaseOn(pool, er), Replayed: true, Epoch: epoch}
			return true, nil
		}
		seq, err := parseUint(sk, v.value(sk))
		if err != nil {
			return false, err
		}
		er, trec, err := l.chargedRecs(v, pool, leaseRec{Engine: lease.Engine, Tenant: lease.Tenant})
		if err != nil {
			return false, err
		}
		base := l.opts.Clock.Now()
		now := time.UnixMilli(base.UnixMilli())
		if err := ledger.CheckReassert(epoch, seq, admissionState(spec, er, false, now), lease); err != nil {
			return false, err
		}
		created := now
		if !lease.Created.IsZero() {
			created = time.UnixMilli(lease.Created.UnixMilli())
		}
		checked := er.Obs != nil
		deadline := ledger.CappedDeadline(now.Add(ledger.CeilMillis(ttl)), checked, now, l.opts.ConfirmWithin)
		lr := leaseRec{
			Engine: lease.Engine, Tenant: lease.Tenant, Priority: lease.Priority, KVTokens: lease.KVTokens, Slots: lease.Slots,
			Holder: lease.Holder, RequestID: lease.RequestID, CreatedMs: created.UnixMilli(),
			DeadlineMs: deadline.UnixMilli(),
			Epoch:      uint64(fence.Epoch), Seq: fence.Seq, Reasserted: true,
		}
		if checked {
			lr.ReassertedMs = now.UnixMilli()
			er.ReassertedMs = max(er.ReassertedMs, lr.ReassertedMs)
		}
		reserve(&er, &trec, lr, 1)
		count(&er.Counters, ledger.CounterReasserts, 1)
		etcdLease, err := l.leaseUntil(ctx, base, base.Add(deadline.Sub(now)))
		if err != nil {
			return false, err
		}
		ops := append(l.leaseOps(pool, lr, etcdLease),
			clientv3.OpPut(ek, encode(er)),
			clientv3.OpPut(tk, encode(trec)))
		if !v.has(rk) {
			ops = append(ops, clientv3.OpPut(rk, string(id)))
		}
		if fence.Epoch == epoch && fence.Seq > seq {
			ops = append(ops, clientv3.OpPut(sk, strconv.FormatUint(fence.Seq, 10)))
		}
		ok, err = l.commit(ctx, v, ops...)
		if ok {
			out = ledger.Grant{Lease: lr.leaseOn(pool, er), Epoch: epoch}
		}
		return ok, err
	})
	if err != nil {
		return ledger.Grant{}, err
	}
	return out, nil
}
