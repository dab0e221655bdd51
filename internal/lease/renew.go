package lease

// Renewal, re-assertion and retried releases: one maintenance loop per
// Manager.
//
// Every RenewInterval the loop renews each unfenced lease of a confirmed
// pool once half its TTL has passed since its deadline was last set,
// RenewConcurrency at a time. Renew answering ErrLeaseNotFound while the
// session is confirmed means the ledger lost the lease (failover without
// the write): it is re-asserted (docs/design.md, Guarantee 4). A pool whose epoch changed
// has every lease re-asserted (a lease the ledger still has is replayed).
// A lease whose re-assertion is refused is lost: Done closes with
// ErrLeaseLost. A lease that could not be renewed before its local
// deadline (RenewedAt+TTL less min(SafetyMargin, TTL/10) and one scan) is lost the same
// way, since the ledger will have expired it.
//
// Releases whose outcome is unknown (transport errors), and acquisitions
// abandoned with an unknown outcome, are retried here until the lease's
// deadline would have ended it anyway.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// orphan is a release to retry. An empty ref.ID means an acquisition whose
// outcome is unknown: the lease, if any, is found by request id.
type orphan struct {
	ref       ledger.LeaseRef
	requestID ledger.RequestID
	usage     ledger.Usage
	until     time.Time // local clock; the ledger has expired it by then
}

func (m *Manager) wakeMaintenance() {
	select {
	case m.kickC <- struct{}{}:
	default:
	}
}

// maintainLoop runs renewals, re-assertions and orphan releases.
func (m *Manager) maintainLoop() {
	defer m.wg.Done()
	t := m.clock.NewTicker(m.cfg.RenewInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stopC:
			return
		case <-t.Chan():
			m.reassertPending()
			m.renewDue()
			m.retryOrphans(m.ctx, false)
			m.retireIdleBlocks()
		case <-m.kickC:
			m.reassertPending()
		}
	}
}

// reassertPending re-asserts every lease of each pool whose epoch changed.
func (m *Manager) reassertPending() {
	for _, p := range m.poolOrder {
		p.mu.Lock()
		due := p.reassert && p.confirmedLocked(m.clock.Now(), m.cfg)
		if due {
			p.reassert = false // else kept for a later tick
		}
		gen := p.gen
		p.mu.Unlock()
		if !due {
			continue
		}
		var rows []*row
		for _, r := range m.Snapshot().rows(p.id) {
			if !r.Fenced && r.Gen == gen {
				rows = append(rows, r)
			}
		}
		var retryMu sync.Mutex // guards retry
		retry := false
		m.parallel(rows, func(r *row) {
			if !m.reassert(p, r) {
				retryMu.Lock()
				retry = true
				retryMu.Unlock()
			}
		})
		if retry {
			p.mu.Lock()
			p.reassert = true // next tick
			p.mu.Unlock()
		}
	}
}

// renewDue renews the leases that are half way to their deadline.
func (m *Manager) renewDue() {
	now := m.clock.Now()
	var due []*row
	for _, p := range m.poolOrder {
		p.mu.Lock()
		ok, gen := p.confirmedLocked(now, m.cfg), p.gen
		p.mu.Unlock()
		if !ok {
			continue // fenced: the session decides; renewing could not help
		}
		for _, r := range m.Snapshot().rows(p.id) {
			if r.Fenced || r.Gen != gen {
				continue
			}
			if !now.Before(r.RenewedAt.Add(r.TTL - min(m.cfg.SafetyMargin, r.TTL/10) - m.cfg.RenewInterval)) {
				// Too late to count on a renewal arriving in time.
				m.loseRow(r, fmt.Errorf("%w: not renewed before its deadline", ErrLeaseLost))
				continue
			}
			if !now.Before(r.RenewedAt.Add(r.TTL / 2)) {
				due = append(due, r)
			}
		}
	}
	m.parallel(due, func(r *row) { m.renew(m.pools[r.Pool], r) })
}

// extendCall starts a ledger call that gives a lease a new TTL (Renew,
// Reassert): the jittered LeaseTTL to ask for, the call's context bounded by
// CallTimeout, and the local time it is sent, where the new TTL starts by
// the local clock.
func (m *Manager) extendCall() (context.Context, context.CancelFunc, time.Duration, time.Time) {
	ttl := m.jitter(m.cfg.LeaseTTL)
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.CallTimeout)
	return ctx, cancel, ttl, m.clock.Now()
}

// renew renews one lease, re-asserting it if the ledger lost it.
func (m *Manager) renew(p *poolState, r *row) {
	ctx, cancel, ttl, send := m.extendCall()
	defer cancel()
	rn, err := m.l.Renew(ctx, r.Lease.Ref(), ttl)
	switch {
	case err == nil:
		m.cnt.renewals.Add(1)
		m.update(r.held, func(nr *row) {
			nr.Lease.Deadline, nr.Lease.Reasserted = rn.Lease.Deadline, rn.Lease.Reasserted
			nr.RenewedAt, nr.TTL = send, ttl
		})
	case errors.Is(err, ledger.ErrLeaseNotFound):
		m.cnt.renewFailures.Add(1)
		m.reassert(p, r)
	case errors.Is(err, ledger.ErrNotHolder):
		m.cnt.renewFailures.Add(1)
		m.loseRow(r, fmt.Errorf("%w: renew: %w", ErrLeaseLost, err))
	case errors.Is(err, ledger.ErrNoSession), errors.Is(err, ledger.ErrSessionExpired):
		m.cnt.renewFailures.Add(1)
		p.kick()
	default:
		m.cnt.renewFailures.Add(1) // retried at the next scan
	}
}

// reassert re-inserts r's lease. It returns false when the outcome is
// unknown and it should be tried again.
func (m *Manager) reassert(p *poolState, r *row) bool {
	p.mu.Lock()
	ok := p.gen == r.Gen && p.confirmedLocked(m.clock.Now(), m.cfg)
	p.mu.Unlock()
	if !ok {
		return true // fenced or a new incarnation: not ours to re-assert
	}
	r.held.opMu.Lock()
	defer r.held.opMu.Unlock()
	if r.held.releasing {
		return true
	}
	ctx, cancel, ttl, send := m.extendCall()
	defer cancel()
	g, err := m.l.Reassert(ctx, r.held.Lease(), ttl)
	switch {
	case err == nil:
		if !g.Replayed {
			m.cnt.reasserts.Add(1)
		}
		m.update(r.held, func(nr *row) {
			kv := nr.Lease.KVTokens
			nr.Lease = g.Lease
			nr.Lease.KVTokens = kv
			nr.RenewedAt, nr.TTL = send, ttl
		})
		return true
	case unknownOutcome(err):
		m.cnt.reassertFailed.Add(1)
		return false
	default:
		m.cnt.reassertFailed.Add(1)
		m.loseRow(r, fmt.Errorf("%w: reassert: %w", ErrLeaseLost, err))
		return true
	}
}

// loseRow drops a lease the ledger no longer has and closes its Done.
func (m *Manager) loseRow(r *row, err error) {
	m.remove(r.held)
	if r.held.lose(err, &m.cnt.lost) {
		m.log.Warn("lease: lease lost", slog.String("pool", string(r.Pool)),
			slog.String("lease", string(r.ID)), slog.Any("error", err))
	}
}

// parallel runs f on each row, RenewConcurrency at a time, and waits.
func (m *Manager) parallel(rows []*row, f func(*row)) {
	sem := make(chan struct{}, m.cfg.RenewConcurrency)
	var wg sync.WaitGroup
	for _, r := range rows {
		select {
		case sem <- struct{}{}:
		case <-m.stopC:
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(r)
		}()
	}
	wg.Wait()
}

// releaseCtx releases ref under ctx, retrying an unknown outcome once and
// then leaving it to the maintenance loop until deadline.
func (m *Manager) releaseCtx(ctx context.Context, ref ledger.LeaseRef, usage ledger.Usage, deadline time.Time) error {
	var err error
	for attempt := 1; attempt <= 2; attempt++ {
		_, err = m.l.Release(ctx, ref, usage)
		if err == nil {
			m.cnt.releases.Add(1)
			return nil
		}
		if !unknownOutcome(err) || ctx.Err() != nil {
			break
		}
	}
	if unknownOutcome(err) {
		m.cnt.releaseFailures.Add(1)
		if deadline.IsZero() {
			deadline = m.clock.Now().Add(m.cfg.LeaseTTL + m.cfg.LeaseTTL/5)
		}
		m.addOrphan(orphan{ref: ref, usage: usage, until: deadline})
	}
	return fmt.Errorf("release lease %s in pool %s: %w", ref.ID, ref.Pool, err)
}

// releaseLease releases a lease that never reached the table.
func (m *Manager) releaseLease(ref ledger.LeaseRef, usage ledger.Usage, deadline time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.ReleaseTimeout)
	defer cancel()
	_ = m.releaseCtx(ctx, ref, usage, deadline) // counted; retried in the background
}

func (m *Manager) addOrphan(o orphan) {
	m.orphansMu.Lock()
	m.orphans = append(m.orphans, o)
	m.orphansMu.Unlock()
}

// retryOrphans retries pending releases once each; those still unknown stay
// queued until their deadline unless final is set.
func (m *Manager) retryOrphans(ctx context.Context, final bool) {
	m.orphansMu.Lock()
	pending := m.orphans
	m.orphans = nil
	m.orphansMu.Unlock()
	var keep []orphan
	for _, o := range pending {
		if !m.clock.Now().Before(o.until) {
			continue // the ledger has ended it
		}
		done, err := m.retryOrphan(ctx, o)
		if !done && !final {
			keep = append(keep, o)
		}
		if err != nil && final {
			m.log.Warn("lease: release left to the lease deadline", slog.String("pool", string(o.ref.Pool)),
				slog.String("request", string(o.requestID)), slog.Any("error", err))
		}
	}
	m.orphansMu.Lock()
	m.orphans = append(m.orphans, keep...)
	m.orphansMu.Unlock()
}

func (m *Manager) retryOrphan(ctx context.Context, o orphan) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	ref := o.ref
	if ref.ID == ledger.NoLease {
		leases, err := m.l.List(cctx, ledger.Filter{Pool: ref.Pool, Holder: ref.Holder})
		if err != nil {
			return !unknownOutcome(err), err
		}
		for _, l := range leases {
			if l.RequestID == o.requestID {
				if _, held := m.Snapshot().Get(l.Pool, l.ID); held {
					return true, nil // a later Acquire replayed it: in use
				}
				ref.ID = l.ID
			}
		}
		if ref.ID == ledger.NoLease {
			return false, nil // not granted (yet): a delayed send may still land
		}
	}
	_, err := m.l.Release(cctx, ref, o.usage)
	if err == nil {
		m.cnt.releases.Add(1)
	}
	return !unknownOutcome(err), err
}
