package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/internal/ledger"
)

// A lease is live while its record, its deadline marker (on an etcd lease
// that outlives the deadline) and its holder's live marker all exist. Renew,
// Resize, Grow and Release read the record and both markers in one transaction
// and commit guarded by them.

// leaseView reads a lease with its markers and, once the record names them,
// its engine, tenant and request key.
type leaseView struct {
	v     *view
	m     *metaRec
	rec   leaseRec
	found bool
	alive bool // deadline marker and holder's live marker exist
}

// With probe spans (dueProbe) it fails with errSweepFirst when they find an
// entry due.
func (l *store) readLease(ctx context.Context, pool ledger.PoolID, id ledger.LeaseID, holder ledger.HolderID, withState bool, probe ...span) (*leaseView, error) {
	k := l.keys
	lk := k.lease(pool, id)
	ks := []string{k.meta(pool), k.recovering(pool), lk, k.deadline(pool, id)}
	if holder != ledger.NoHolder {
		ks = append(ks, k.holder(pool, holder), k.live(pool, holder))
	}
	v, err := l.read(ctx, ks, probe...)
	if err != nil {
		return nil, err
	}
	lv := &leaseView{v: v}
	if lv.m, err = l.meta(v, pool); err != nil {
		return nil, err
	}
	if due(v, probe) {
		return nil, errSweepFirst
	}
	if !v.has(lk) {
		return lv, nil
	}
	lv.found = true
	if err := decode(lk, v.value(lk), &lv.rec); err != nil {
		return nil, err
	}
	more := []string{k.live(pool, lv.rec.Holder)}
	if withState {
		more = append(more, k.engine(pool, lv.rec.Engine), k.tenant(pool, lv.rec.Tenant),
			k.request(pool, lv.rec.Holder, lv.rec.RequestID))
	}
	if err := l.readMore(ctx, v, more); err != nil {
		return nil, err
	}
	lv.alive = v.has(k.deadline(pool, id)) && v.has(k.live(pool, lv.rec.Holder))
	return lv, nil
}

// startLeaseOp is what Renew, Resize and Grow do before their transaction: take
// the lease id's canonical form, and run the bounded sweep if expiry
// entries are due.
func (l *store) startLeaseOp(ctx context.Context, ref ledger.LeaseRef) (ledger.LeaseID, error) {
	id, _, err := canonical(ref.ID)
	if err != nil {
		return ledger.NoLease, err
	}
	if err := l.sweepDue(ctx, ref.Pool); err != nil {
		return ledger.NoLease, err
	}
	return id, nil
}

// Renew extends a live lease's deadline to now+ttl (for an Unconfirmed
// lease at most its reassert time plus ConfirmWithin) by moving its
// deadline marker to an etcd lease that outlives the new deadline.
func (l *store) Renew(ctx context.Context, ref ledger.LeaseRef, ttl time.Duration) (ledger.Renewal, error) {
	id, err := l.startLeaseOp(ctx, ref)
	if err != nil {
		return ledger.Renewal{}, err
	}
	pool := ref.Pool
	var out ledger.Renewal
	err = l.retry(ctx, func() (bool, error) {
		lv, err := l.readLease(ctx, pool, id, ref.Holder, false)
		if err != nil {
			return false, err
		}
		if err := lv.usable(ref, id); err != nil {
			return false, err
		}
		r := lv.rec
		var er engineRec
		if r.ReassertedMs > 0 {
			// Unconfirmed or not is the engine record's to say.
			ek := l.keys.engine(pool, r.Engine)
			if err := l.readMore(ctx, lv.v, []string{ek}); err != nil {
				return false, err
			}
			if er, err = l.engineRec(lv.v, pool, r.Engine); err != nil {
				return false, err
			}
		}
		base := l.opts.Clock.Now()
		now := time.UnixMilli(base.UnixMilli())
		oldDeadline := r.DeadlineMs
		deadline := ledger.CappedDeadline(now.Add(ledger.CeilMillis(ttl)), er.unconfirmed(r), time.UnixMilli(r.ReassertedMs), l.opts.ConfirmWithin)
		r.DeadlineMs = deadline.UnixMilli()
		etcdLease, err := l.leaseUntil(ctx, base, base.Add(max(deadline.Sub(now), time.Millisecond)))
		if err != nil {
			return false, err
		}
		ops := []clientv3.Op{
			clientv3.OpPut(l.keys.lease(pool, id), encode(r)),
			clientv3.OpPut(l.keys.deadline(pool, id), "", clientv3.WithLease(etcdLease)),
		}
		if oldDeadline != r.DeadlineMs {
			ops = append(ops, clientv3.OpDelete(l.keys.byDeadline(pool, oldDeadline, id)),
				clientv3.OpPut(l.keys.byDeadline(pool, r.DeadlineMs, id), ""))
		}
		ok, err := l.commit(ctx, lv.v, ops...)
		out = ledger.Renewal{Lease: r.leaseOn(pool, er), Epoch: ledger.Epoch(lv.m.Epoch)}
		return ok, err
	})
	if err != nil {
		return ledger.Renewal{}, err
	}
	return out, nil
}

// usable checks that ref may act on the lease in lv.
func (lv *leaseView) usable(ref ledger.LeaseRef, id ledger.LeaseID) error {
	switch {
	case !lv.found:
		return fmt.Errorf("%w: %s in pool %s", ledger.ErrLeaseNotFound, id, ref.Pool)
	case lv.rec.Holder != ref.Holder:
		return fmt.Errorf("%w: lease %s in pool %s", ledger.ErrNotHolder, id, ref.Pool)
	case !lv.alive:
		return fmt.Errorf("%w: %s in pool %s has ended", ledger.ErrLeaseNotFound, id, ref.Pool)
	}
	return nil
}

// leaseChange is one attempt's read of a live lease for Resize and Grow:
// the lease with its markers, and the records of the engine and tenant it
// charges.
type leaseChange struct {
	*leaseView
	er engineRec
	tr tenantRec
}

// changeLease runs step on ref's live lease until a commit's guards hold.
// step decides on one consistent read and returns what to write, nothing
// when there is nothing to change, or an error that ends the call.
func (l *store) changeLease(ctx context.Context, ref ledger.LeaseRef, step func(c *leaseChange) ([]clientv3.Op, error)) error {
	id, err := l.startLeaseOp(ctx, ref)
	if err != nil {
		return err
	}
	return l.retryPool(ctx, ref.Pool, func() (bool, error) {
		lv, err := l.readLease(ctx, ref.Pool, id, ref.Holder, true)
		if err != nil {
			return false, err
		}
		if err := lv.usable(ref, id); err != nil {
			return false, err
		}
		c := &leaseChange{leaseView: lv}
		if c.er, c.tr, err = l.chargedRecs(lv.v, ref.Pool, lv.rec); err != nil {
			return false, err
		}
		ops, err := step(c)
		if err != nil || len(ops) == 0 {
			return err == nil, err
		}
		return l.commit(ctx, lv.v, ops...)
	})
}

// writes returns the puts of c's lease record r and its engine and tenant
// records.
func (l *store) writes(c *leaseChange, r leaseRec) []clientv3.Op {
	pool := c.m.Spec.Name
	return []clientv3.Op{
		clientv3.OpPut(l.keys.lease(pool, r.id()), encode(r)),
		clientv3.OpPut(l.keys.engine(pool, r.Engine), encode(c.er)),
		clientv3.OpPut(l.keys.tenant(pool, r.Tenant), encode(c.tr)),
	}
}

// Resize sets a live lease's KV tokens. Shrinking always succeeds; growth
// is decided by ledger.AdmitGrowth under the same guards as Acquire.
func (l *store) Resize(ctx context.Context, ref ledger.LeaseRef, kvTokens int64) (ledger.Renewal, error) {
	var out ledger.Renewal
	var rejection *ledger.Rejection
	err := l.changeLease(ctx, ref, func(c *leaseChange) ([]clientv3.Op, error) {
		r, epoch := c.rec, ledger.Epoch(c.m.Epoch)
		delta := kvTokens - r.KVTokens
		out, rejection = ledger.Renewal{Lease: r.leaseOn(ref.Pool, c.er), Epoch: epoch}, nil
		if delta == 0 {
			return nil, nil
		}
		if delta > 0 {
			rej, err := l.admitGrowth(ctx, c, kvTokens, delta)
			if err != nil {
				return nil, err
			}
			if rej != nil {
				// Counted under the same guards: a lost race decides again.
				rejection = rej
				count(&c.tr.Counters, ledger.CounterRejections, 1)
				count(&c.tr.Counters, ledger.CounterRejections+":"+string(rej.Reason), 1)
				return []clientv3.Op{clientv3.OpPut(l.keys.tenant(ref.Pool, r.Tenant), encode(c.tr))}, nil
			}
		}
		r.KVTokens = kvTokens
		c.er.ReservedKV += delta
		c.tr.ReservedKV += delta
		out = ledger.Renewal{Lease: r.leaseOn(ref.Pool, c.er), Epoch: epoch}
		return l.writes(c, r), nil
	})
	switch {
	case err != nil:
		return ledger.Renewal{}, err
	case rejection != nil:
		return ledger.Renewal{}, rejection
	}
	return out, nil
}

// admitGrowth decides whether c's lease may grow by delta to newKV.
func (l *store) admitGrowth(ctx context.Context, c *leaseChange, newKV, delta int64) (*ledger.Rejection, error) {
	m, r := c.m, c.rec
	pool := m.Spec.Name
	spec, ok := m.engine(r.Engine)
	if !ok {
		return nil, fmt.Errorf("%w: %s in pool %s", ledger.ErrUnknownEngine, r.Engine, pool)
	}
	tspec, ok := m.tenant(r.Tenant)
	if !ok {
		return nil, fmt.Errorf("%w: %s in pool %s", ledger.ErrUnknownTenant, r.Tenant, pool)
	}
	prio, ok := m.priority(r.Priority)
	if !ok {
		return nil, fmt.Errorf("%w: %s in pool %s", ledger.ErrUnknownPriority, r.Priority, pool)
	}
	a, e, err := l.leaseAdmission(ctx, c, spec, tspec)
	if err != nil {
		return nil, err
	}
	a.MaxFill, a.KVTokens = prio.MaxFill, delta
	return ledger.AdmitGrowth(a, e, newKV, delta), nil
}

// leaseAdmission returns the admission state c's lease is decided on at
// now, its engine held to spec and its tenant to tspec; it adds the
// engine's fresh marker to c's read.
func (l *store) leaseAdmission(ctx context.Context, c *leaseChange, spec ledger.EngineSpec, tspec ledger.TenantSpec) (ledger.Admission, ledger.EngineState, error) {
	m, v := c.m, c.v
	pool := m.Spec.Name
	fk := l.keys.fresh(pool, c.rec.Engine)
	if err := l.readMore(ctx, v, []string{fk}); err != nil {
		return ledger.Admission{}, ledger.EngineState{}, err
	}
	now := l.now()
	capKV, capSlots := m.capacity()
	a := ledger.Admission{
		Now: now, RecoveringUntil: l.recoveringUntil(v, pool, now),
		CapacityKV: capKV, CapacitySlots: capSlots,
		Tenant: tspec, TenantKV: c.tr.ReservedKV, TenantSlots: c.tr.ReservedSlots,
		RetryAfter: m.Spec.RetryAfter, Epoch: ledger.Epoch(m.Epoch), GrowthHeadroom: m.Spec.GrowthHeadroom,
		ObservedSince: l.observedSince(m), Reserve: m.Spec.Mode(),
	}
	return a, admissionState(spec, c.er, v.has(fk), now), nil
}

// Grow raises a live lease's KV tokens to what its engine already holds
// for it, by ledger.GrowthOf in one guarded transaction: never refused for
// capacity, quota, draining, stale telemetry or the recovery window, only
// flagged Overgrown. A removed engine or tenant is held to its last spec
// (kept in its record by Configure). The deadline does not change.
func (l *store) Grow(ctx context.Context, ref ledger.LeaseRef, kvTokens int64) (ledger.Renewal, error) {
	var out ledger.Renewal
	err := l.changeLease(ctx, ref, func(c *leaseChange) ([]clientv3.Op, error) {
		m, r := c.m, c.rec
		spec, _ := m.engineOf(r.Engine, c.er)
		tspec, _ := m.tenantOf(r.Tenant, c.tr)
		a, e, err := l.leaseAdmission(ctx, c, spec, tspec)
		if err != nil {
			return nil, err
		}
		g, err := ledger.GrowthOf(m.Spec.Mode(), a, e, r.lease(ref.Pool), kvTokens)
		if err != nil {
			return nil, err
		}
		out = ledger.Renewal{Lease: r.leaseOn(ref.Pool, c.er), Epoch: ledger.Epoch(m.Epoch)}
		if g.Delta == 0 {
			return nil, nil
		}
		r.KVTokens, r.Overgrown = kvTokens, g.Overgrown
		c.er.ReservedKV += g.Delta
		c.tr.ReservedKV += g.Delta
		count(&c.er.Counters, ledger.CounterGrowths, 1)
		count(&c.er.Counters, ledger.CounterGrownKV, g.Delta)
		if g.Passed {
			count(&c.er.Counters, ledger.CounterOvergrowths, 1)
		}
		out.Lease = r.leaseOn(ref.Pool, c.er)
		return l.writes(c, r), nil
	})
	if err != nil {
		return ledger.Renewal{}, err
	}
	return out, nil
}

// Release ends a live lease and reports Released=true; releasing a lease
// that is gone, or has ended but is not yet swept (it is swept now), reports
// Released=false. Idempotent.
func (l *store) Release(ctx context.Context, ref ledger.LeaseRef, usage ledger.Usage) (ledger.Released, error) {
	id, _, err := canonical(ref.ID)
	if err != nil {
		return ledger.Released{}, err
	}
	// The first read also looks for expired entries; only when there are
	// some does the bounded sweep run first.
	res, err := l.endLeaseProbed(ctx, ref.Pool, id, ref.Holder, usage, true)
	if errors.Is(err, errSweepFirst) {
		if err := l.sweepDue(ctx, ref.Pool); err != nil {
			return ledger.Released{}, err
		}
		res, err = l.endLease(ctx, ref.Pool, id, ref.Holder, usage)
	}
	if err != nil {
		return ledger.Released{}, err
	}
	return ledger.Released{Released: res.cause == ledger.CounterReleases, Epoch: res.epoch}, nil
}

// ended is what endLease did: cause is the counter it bumped
// (CounterReleases, CounterExpired, CounterRevoked) or "" if nothing.
type ended struct {
	cause string
	epoch ledger.Epoch
}

// endLease removes a lease and its reservation. With a holder (Release) it
// releases a live lease of that holder and sweeps an ended one; without
// (sweepers) it removes the lease only if it has ended: its deadline
// marker is gone (expired) or its holder's live marker is (revoked).
// Concurrent callers are idempotent: only one commit can match the guards.
func (l *store) endLease(ctx context.Context, pool ledger.PoolID, id ledger.LeaseID, holder ledger.HolderID, usage ledger.Usage) (ended, error) {
	return l.endLeaseProbed(ctx, pool, id, holder, usage, false)
}

// endLeaseProbed is endLease; with probe its first read also looks for
// expiry entries due and, finding one, it fails with errSweepFirst having
// changed nothing.
func (l *store) endLeaseProbed(ctx context.Context, pool ledger.PoolID, id ledger.LeaseID, holder ledger.HolderID, usage ledger.Usage, probe bool) (ended, error) {
	var out ended
	err := l.retryPool(ctx, pool, func() (bool, error) {
		out = ended{}
		var spans []span
		if probe {
			spans, probe = l.dueProbe(pool), false
		}
		lv, err := l.readLease(ctx, pool, id, holder, true, spans...)
		if err != nil {
			return false, err
		}
		out.epoch = ledger.Epoch(lv.m.Epoch)
		if !lv.found {
			return true, nil
		}
		r, v, k := lv.rec, lv.v, l.keys
		if holder != ledger.NoHolder && r.Holder != holder {
			return false, fmt.Errorf("%w: lease %s in pool %s", ledger.ErrNotHolder, id, pool)
		}
		switch {
		case lv.alive && holder == ledger.NoHolder:
			return true, nil
		case lv.alive:
			out.cause = ledger.CounterReleases
		case !v.has(k.deadline(pool, id)):
			out.cause = ledger.CounterExpired
		default:
			out.cause = ledger.CounterRevoked
		}
		er, tr, err := l.chargedRecs(v, pool, r)
		if err != nil {
			return false, err
		}
		reserve(&er, &tr, r, -1)
		if ledger.EndedByLedger(out.cause) && er.Obs != nil {
			// The engine may still run it: charged until an observation
			// arrives OrphanHold after now. Without a hold the next one
			// clears it, whatever the clocks of the processes say.
			er.OrphanKV += r.KVTokens
			er.OrphanSlots += r.Slots
			if hold := l.opts.OrphanHold; hold > 0 {
				er.OrphanUntilMs = max(er.OrphanUntilMs, l.now().Add(ledger.CeilMillis(hold)).UnixMilli())
			}
		}
		// The breaker: a release reports its outcome (when it has one or
		// is a probe's), a probe the ledger ends frees its budget.
		switch bs := lv.m.Spec.Breaker; {
		case out.cause == ledger.CounterReleases && (usage.Outcome != ledger.OutcomeNone || r.Probe):
			now := l.now()
			b, t := er.advanceBreaker(now, bs).Report(now, bs, msTime(r.CreatedMs), r.Probe, usage.Outcome)
			er.countTransition(t)
			er.setBreaker(b)
		case r.Probe && ledger.EndedByLedger(out.cause):
			er.setBreaker(er.advanceBreaker(l.now(), bs).Unprobe())
		}
		count(&er.Counters, out.cause, 1)
		if out.cause == ledger.CounterReleases {
			if d := ledger.RateTrueUp(r.lease(pool), usage); d != 0 {
				tr.setRates(ledger.TrueUpRate(tr.rates(), msTime(r.CreatedMs), l.now(), lv.m.Spec.RateWindow, d))
			}
			count(&er.Counters, ledger.CounterReleasedKV, r.KVTokens)
			count(&er.Counters, ledger.CounterActualPrompt, usage.PromptTokens)
			count(&er.Counters, ledger.CounterActualComplete, usage.CompletionTokens)
			for _, c := range ledger.CompletionCounters(usage, r.Tenant) {
				count(&er.Counters, c, 1)
			}
		}
		ops := []clientv3.Op{
			clientv3.OpDelete(k.lease(pool, id)),
			clientv3.OpDelete(k.deadline(pool, id)),
			clientv3.OpDelete(k.byDeadline(pool, r.DeadlineMs, id)),
			clientv3.OpDelete(k.holderIdx(pool, r.Holder, id)),
			clientv3.OpPut(k.engine(pool, r.Engine), encode(er)),
			clientv3.OpPut(k.tenant(pool, r.Tenant), encode(tr)),
		}
		if rk := k.request(pool, r.Holder, r.RequestID); string(v.value(rk)) == string(id) {
			ops = append(ops, clientv3.OpDelete(rk))
		}
		return l.commit(ctx, v, ops...)
	})
	if err != nil {
		return ended{}, err
	}
	return out, nil
}
