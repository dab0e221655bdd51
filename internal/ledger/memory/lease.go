package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// The lease operations. Each is one write transaction: classify the
// caller's session, sweep a bounded batch, check, then change. Admission is
// ledger.Admit / ledger.AdmitGrowth over the rows read in the transaction.
// A lease found ended (deadline passed or holder session dead) but not yet
// swept is removed on the spot and treated as gone.

// Acquire grants capacity on the first candidate that fits, or replays the
// holder's outstanding lease for the same request id.
func (l *store) Acquire(ctx context.Context, req ledger.AcquireRequest) (ledger.Grant, error) {
	var g ledger.Grant
	err := l.update(ctx, req.Pool, req.Holder, l.opts.SweepBatch, func(o *op) error {
		if err := requireSession(o.session, req.Holder); err != nil {
			return err
		}
		for _, raw := range o.scan(0, tableLeases, indexRequest, req.Pool, req.Holder, req.RequestID) {
			ls := raw.(*leaseRow)
			if end := o.ended(ls); end != "" {
				o.removeLease(ls, end)
				continue
			}
			o.count(ledger.CounterReplays, 1)
			g = ledger.Grant{Lease: ls.Lease, Replayed: true, Epoch: o.pool.Epoch}
			return nil
		}
		t, prio, err := o.tenantAndPriority(req.Tenant, req.Priority)
		if err != nil {
			return err
		}
		rows := make([]*engineRow, len(req.Candidates))
		states := make([]ledger.EngineState, len(req.Candidates))
		for i, id := range req.Candidates {
			e, err := o.configuredEngine(id)
			if err != nil {
				return err
			}
			rows[i], states[i] = e, e.state()
		}
		a := o.admission(t, prio)
		a.Candidates, a.KVTokens, a.Slots, a.Tokens = states, req.KVTokens, req.Slots, req.ChargedTokens()
		i, rej := ledger.Admit(a)
		if rej != nil {
			o.reject(rej)
			return rej
		}
		seq, err := ledger.NextSeq(o.pool.Seq)
		if err != nil {
			return err
		}
		fence := ledger.Fence{Epoch: o.pool.Epoch, Seq: seq}
		if prev := o.lease(ledger.MakeLeaseID(fence)); prev != nil {
			// No grant writes an id past the sequence; refuse rather than
			// overwrite whatever did.
			return fmt.Errorf("%w: lease id %s of the next sequence is held by %s", ledger.ErrFenceExhausted, prev.ID, prev.Holder)
		}
		o.pool.Seq = seq
		// A grant on a half-open engine is a probe: it takes a slot of
		// the probe budget, stored with the reservation.
		e := *rows[i]
		var probe bool
		e.Breaker, probe = o.advance(e.Breaker).Grant(o.pool.Breaker)
		ls := &leaseRow{Lease: ledger.Lease{
			ID:        ledger.MakeLeaseID(fence),
			Pool:      req.Pool,
			Engine:    rows[i].Spec.ID,
			Tenant:    req.Tenant,
			Priority:  req.Priority,
			KVTokens:  req.KVTokens,
			Slots:     req.Slots,
			Holder:    req.Holder,
			RequestID: req.RequestID,
			Created:   o.now,
			Deadline:  plus(o.now, req.TTL),
			Fence:     fence,
			Probe:     probe,
		}}
		if t.Spec.Rated() {
			// The grant's charge, in the same step as the check.
			tc := *t
			tc.Rates = ledger.ChargeRate(t.Rates, o.now, o.pool.RateWindow, a.Tokens)
			ls.Tokens, t = a.Tokens, &tc
		}
		o.addLease(ls, &e, t)
		o.count(ledger.CounterGrants, 1)
		g = ledger.Grant{Lease: ls.Lease, Epoch: o.pool.Epoch}
		return nil
	})
	if err != nil {
		return ledger.Grant{}, err
	}
	return g, nil
}

// updateLease runs change on a live lease in one update and answers with
// the lease change returns and the pool's epoch.
func (l *store) updateLease(ctx context.Context, ref ledger.LeaseRef, change func(o *op, ls *leaseRow) (ledger.Lease, error)) (ledger.Renewal, error) {
	var r ledger.Renewal
	err := l.update(ctx, ref.Pool, ledger.NoHolder, l.opts.SweepBatch, func(o *op) error {
		ls, err := o.liveLease(ref)
		if err != nil {
			return err
		}
		lease, err := change(o, ls)
		if err != nil {
			return err
		}
		r = ledger.Renewal{Lease: lease, Epoch: o.pool.Epoch}
		return nil
	})
	if err != nil {
		return ledger.Renewal{}, err
	}
	return r, nil
}

// Renew sets a live lease's deadline to now+ttl, or to its reassert time
// plus ConfirmWithin if that is earlier and the lease is Unconfirmed.
func (l *store) Renew(ctx context.Context, ref ledger.LeaseRef, ttl time.Duration) (ledger.Renewal, error) {
	return l.updateLease(ctx, ref, func(o *op, ls *leaseRow) (ledger.Lease, error) {
		c := *ls
		c.Deadline = ledger.CappedDeadline(plus(o.now, ttl), c.Unconfirmed, c.ReassertedAt, l.opts.ConfirmWithin)
		o.insert(tableLeases, &c)
		return c.Lease, nil
	})
}

// Resize sets a live lease's KV tokens. Shrinking always succeeds; growth is
// admitted by ledger.AdmitGrowth on the lease's engine, tenant and priority,
// which must all still be configured.
func (l *store) Resize(ctx context.Context, ref ledger.LeaseRef, kvTokens int64) (ledger.Renewal, error) {
	return l.updateLease(ctx, ref, func(o *op, ls *leaseRow) (ledger.Lease, error) {
		delta := kvTokens - ls.KVTokens
		if delta > 0 {
			e, err := o.configuredEngine(ls.Engine)
			if err != nil {
				return ledger.Lease{}, err
			}
			t, prio, err := o.tenantAndPriority(ls.Tenant, ls.Priority)
			if err != nil {
				return ledger.Lease{}, err
			}
			if rej := ledger.AdmitGrowth(o.admission(t, prio), e.state(), kvTokens, delta); rej != nil {
				o.reject(rej)
				return ledger.Lease{}, rej
			}
		}
		c := *ls
		if delta != 0 {
			c.KVTokens = kvTokens
			o.insert(tableLeases, &c)
			o.chargeKV(ls, delta)
		}
		return c.Lease, nil
	})
}

// Grow raises a live elastic lease's KV tokens to what its engine already
// holds for it, by ledger.GrowthOf: never refused for capacity, quota,
// draining, stale telemetry or the recovery window, and accepted on an
// engine or tenant removed from the spec (the engine still runs the
// request; its last spec bounds the growth). A growth past capacity or
// quota flags the lease Overgrown, for good. The deadline is unchanged.
func (l *store) Grow(ctx context.Context, ref ledger.LeaseRef, kvTokens int64) (ledger.Renewal, error) {
	return l.updateLease(ctx, ref, func(o *op, ls *leaseRow) (ledger.Lease, error) {
		e, t := o.engine(ls.Engine), o.tenant(ls.Tenant)
		if e == nil || t == nil {
			// A lease's engine and tenant rows outlive it (Configure keeps
			// them, marked removed, while they have leases).
			return ledger.Lease{}, fmt.Errorf("lease %s on engine %s of tenant %s: the engine's or tenant's row is missing", ls.ID, ls.Engine, ls.Tenant)
		}
		a := o.admission(t, ledger.PrioritySpec{})
		g, err := ledger.GrowthOf(o.pool.Reserve, a, e.state(), ls.Lease, kvTokens)
		if err != nil {
			return ledger.Lease{}, err
		}
		c := *ls
		if g.Delta > 0 {
			c.KVTokens, c.Overgrown = kvTokens, g.Overgrown
			o.insert(tableLeases, &c)
			o.chargeKV(ls, g.Delta)
			o.count(ledger.CounterGrowths, 1)
			o.count(ledger.CounterGrownKV, g.Delta)
			if g.Passed {
				o.count(ledger.CounterOvergrowths, 1)
			}
		}
		return c.Lease, nil
	})
}

// Release ends a lease and counts the usage reported with it; its outcome
// is evidence for the engine's breaker (ledger.Breaker.Report). Releasing
// a lease that is gone, or that had already ended (it is then removed and
// counted as expired or revoked, and its outcome ignored), reports
// Released=false: a retried Release never counts twice.
func (l *store) Release(ctx context.Context, ref ledger.LeaseRef, usage ledger.Usage) (ledger.Released, error) {
	var r ledger.Released
	err := l.update(ctx, ref.Pool, ledger.NoHolder, l.opts.SweepBatch, func(o *op) error {
		r.Epoch = o.pool.Epoch
		ls := o.lease(ref.ID)
		if ls == nil {
			return nil
		}
		if ls.Holder != ref.Holder {
			return fmt.Errorf("lease held by %s: %w", ls.Holder, ledger.ErrNotHolder)
		}
		if end := o.ended(ls); end != "" {
			o.removeLease(ls, end)
			return nil
		}
		o.dropLease(ls, ledger.CounterReleases, usage.Outcome)
		if d := ledger.RateTrueUp(ls.Lease, usage); d != 0 {
			if t := o.tenant(ls.Tenant); t != nil {
				c := *t
				c.Rates = ledger.TrueUpRate(t.Rates, ls.Created, o.now, o.pool.RateWindow, d)
				o.insert(tableTenants, &c)
			}
		}
		o.count(ledger.CounterReleasedKV, ls.KVTokens)
		o.count(ledger.CounterActualPrompt, usage.PromptTokens)
		o.count(ledger.CounterActualComplete, usage.CompletionTokens)
		for _, name := range ledger.CompletionCounters(usage, ls.Tenant) {
			o.count(name, 1)
		}
		r.Released = true
		return nil
	})
	if err != nil {
		return ledger.Released{}, err
	}
	return r, nil
}

// Reassert re-inserts a lease its live holder still uses after the ledger
// lost it, with deadline now+ttl, even above capacity and during the
// recovery window, when ledger.CheckReassert finds it plausible. The lease
// keeps its id and fence (the one its id encodes). A lease id that still
// exists is returned as is (Replayed) to its holder, refused to any other.
// On an engine that has been observed the lease is Unconfirmed, and its
// deadline is at most now+ConfirmWithin.
func (l *store) Reassert(ctx context.Context, lease ledger.Lease, ttl time.Duration) (ledger.Grant, error) {
	fence := lease.Fence
	var g ledger.Grant
	err := l.update(ctx, lease.Pool, lease.Holder, l.opts.SweepBatch, func(o *op) error {
		if err := requireSession(o.session, lease.Holder); err != nil {
			return err
		}
		if ls := o.lease(lease.ID); ls != nil {
			if ls.Holder != lease.Holder {
				return fmt.Errorf("lease held by %s: %w", ls.Holder, ledger.ErrNotHolder)
			}
			end := o.ended(ls)
			if end == "" {
				o.count(ledger.CounterReplays, 1)
				g = ledger.Grant{Lease: ls.Lease, Replayed: true, Epoch: o.pool.Epoch}
				return nil
			}
			o.removeLease(ls, end)
		}
		e, err := o.configuredEngine(lease.Engine)
		if err != nil {
			return err
		}
		t, _, err := o.tenantAndPriority(lease.Tenant, lease.Priority)
		if err != nil {
			return err
		}
		if err := ledger.CheckReassert(o.pool.Epoch, o.pool.Seq, e.state(), lease); err != nil {
			return err
		}
		if fence.Epoch == o.pool.Epoch && fence.Seq > o.pool.Seq {
			o.pool.Seq = fence.Seq
		}
		created := o.now
		if !lease.Created.IsZero() {
			created = toMillis(lease.Created)
		}
		checked := !e.ObservedAt.IsZero()
		deadline := ledger.CappedDeadline(plus(o.now, ttl), checked, o.now, l.opts.ConfirmWithin)
		ls := &leaseRow{Lease: ledger.Lease{
			ID:          lease.ID,
			Pool:        lease.Pool,
			Engine:      lease.Engine,
			Tenant:      lease.Tenant,
			Priority:    lease.Priority,
			KVTokens:    lease.KVTokens,
			Slots:       lease.Slots,
			Holder:      lease.Holder,
			RequestID:   lease.RequestID,
			Created:     created,
			Deadline:    deadline,
			Fence:       fence,
			Reasserted:  true,
			Unconfirmed: checked,
		}}
		if checked {
			ls.ReassertedAt = o.now
			c := *e
			c.Unconfirmed = true
			e = &c
		}
		o.addLease(ls, e, t)
		o.count(ledger.CounterReasserts, 1)
		g = ledger.Grant{Lease: ls.Lease, Epoch: o.pool.Epoch}
		return nil
	})
	if err != nil {
		return ledger.Grant{}, err
	}
	return g, nil
}

// liveLease returns the lease ref names if ref's holder holds it and it has
// not ended; an ended lease is removed.
func (o *op) liveLease(ref ledger.LeaseRef) (*leaseRow, error) {
	ls := o.lease(ref.ID)
	if ls == nil {
		return nil, ledger.ErrLeaseNotFound
	}
	if ls.Holder != ref.Holder {
		return nil, fmt.Errorf("lease held by %s: %w", ls.Holder, ledger.ErrNotHolder)
	}
	if end := o.ended(ls); end != "" {
		o.removeLease(ls, end)
		return nil, fmt.Errorf("lease %s: %w", end, ledger.ErrLeaseNotFound)
	}
	return ls, nil
}

// configuredEngine returns the row of an engine in the pool's spec.
func (o *op) configuredEngine(id ledger.EngineID) (*engineRow, error) {
	e := o.engine(id)
	if e == nil || e.Removed {
		return nil, fmt.Errorf("engine %s: %w", id, ledger.ErrUnknownEngine)
	}
	return e, nil
}

// tenantAndPriority returns a configured tenant's row and a priority class.
func (o *op) tenantAndPriority(tenant ledger.TenantID, priority ledger.PriorityName) (*tenantRow, ledger.PrioritySpec, error) {
	t := o.tenant(tenant)
	if t == nil || t.Removed {
		return nil, ledger.PrioritySpec{}, fmt.Errorf("tenant %s: %w", tenant, ledger.ErrUnknownTenant)
	}
	prio, ok := o.pool.priority(priority)
	if !ok {
		return nil, ledger.PrioritySpec{}, fmt.Errorf("priority %s: %w", priority, ledger.ErrUnknownPriority)
	}
	return t, prio, nil
}

// admission returns the pool-wide part of an admission for tenant t at
// priority prio.
func (o *op) admission(t *tenantRow, prio ledger.PrioritySpec) ledger.Admission {
	return ledger.Admission{
		Now:             o.now,
		RecoveringUntil: o.pool.RecoveringUntil,
		CapacityKV:      o.pool.CapacityKV,
		CapacitySlots:   o.pool.CapacitySlots,
		Tenant:          t.Spec,
		TenantKV:        t.ReservedKV,
		TenantSlots:     t.ReservedSlots,
		MaxFill:         prio.MaxFill,
		RetryAfter:      o.pool.RetryAfter,
		Epoch:           o.pool.Epoch,
		GrowthHeadroom:  o.pool.GrowthHeadroom,
		Breaker:         o.pool.Breaker,
		Rates:           t.Rates,
		RateWindow:      o.pool.RateWindow,
		ObservedSince:   o.pool.ObservedSince,
		Reserve:         o.pool.Reserve,
	}
}

// reject counts a rejection under its reason.
func (o *op) reject(r *ledger.Rejection) {
	o.count(ledger.CounterRejections, 1)
	o.count(rejectionCounter(r.Reason), 1)
}

// chargeKV adds delta KV tokens (negative: returns them) to the engine and
// tenant of lease ls.
func (o *op) chargeKV(ls *leaseRow, delta int64) {
	if e := o.engine(ls.Engine); e != nil {
		c := *e
		c.ReservedKV += delta
		o.insert(tableEngines, &c)
	}
	if t := o.tenant(ls.Tenant); t != nil {
		c := *t
		c.ReservedKV += delta
		o.insert(tableTenants, &c)
	}
}
