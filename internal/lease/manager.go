package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Manager is a router's side of leasing: one holder session per pool kept
// alive by one loop each, the local lease table, background renewal and
// re-assertion, and self-fencing. Its methods are safe for concurrent use.
type Manager struct {
	cfg   Config
	l     ledger.Ledger
	clock clockwork.Clock
	log   *slog.Logger
	tab   *table // the local lease table
	cnt   *counters

	pools     map[ledger.PoolID]*poolState // fixed at New
	poolOrder []*poolState                 // Config.Pools order

	// ctx is cancelled by Close after stopC, aborting the loops' calls.
	ctx    context.Context
	cancel context.CancelFunc
	stopC  chan struct{} // closed by Close: loops stop
	kickC  chan struct{} // wakes the maintenance loop (re-assert due); cap 1
	wg     sync.WaitGroup

	// orphansMu guards orphans.
	orphansMu sync.Mutex
	orphans   []orphan

	blocks *blockSet // nil unless Config.Block is enabled

	closeOnce sync.Once
	closeErr  error
}

// New validates cfg, starts one keepalive loop per pool and the
// maintenance loop (renewal, re-assertion, retried releases), and returns
// without waiting for the first KeepAlive: until it succeeds Acquire fails
// with ErrFenced (see WaitReady). Close stops it.
func New(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		cfg: cfg, l: cfg.Ledger, clock: cfg.Clock, log: cfg.Logger, tab: newTable(), cnt: newCounters(),
		pools: make(map[ledger.PoolID]*poolState, len(cfg.Pools)),
		ctx:   ctx, cancel: cancel,
		stopC: make(chan struct{}), kickC: make(chan struct{}, 1),
	}
	if cfg.Block.Enabled() {
		m.blocks = &blockSet{cfg: cfg.Block, keys: map[blockKey]*keyState{}}
	}
	suffix := cfg.HolderKey.Suffix()
	for _, id := range cfg.Pools {
		p := newPoolState(id, holderID(cfg.HolderName, suffix))
		m.pools[id] = p
		m.poolOrder = append(m.poolOrder, p)
	}
	for _, p := range m.poolOrder {
		m.wg.Add(1)
		go m.keepAliveLoop(p)
	}
	m.wg.Add(1)
	go m.maintainLoop()
	return m, nil
}

// WaitReady waits until every pool's session has been confirmed once, or
// ctx ends (ErrNotReady wrapping the last KeepAlive error).
func (m *Manager) WaitReady(ctx context.Context) error {
	for _, p := range m.poolOrder {
		select {
		case <-p.readyC:
		case <-ctx.Done():
			return fmt.Errorf("%w: pool %s: %w", ErrNotReady, p.id, errors.Join(ctx.Err(), p.lastError()))
		}
	}
	return nil
}

// Confirmed reports whether pool's session is confirmed now: Acquire in
// it would reach the ledger. For readiness probes.
func (m *Manager) Confirmed(pool ledger.PoolID) bool {
	p := m.pools[pool]
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.confirmedLocked(m.clock.Now(), m.cfg)
}

// Recovering returns how much longer pool's ledger refuses every new grant
// for its recovery window (ledger.ReasonRecovering), as the last confirmed
// KeepAlive reported it: the window's rest while none of the pool's
// engines has recovered (ledger.Session.Recovered), else 0; 0 when there
// is no window. For readiness probes.
func (m *Manager) Recovering(pool ledger.PoolID) time.Duration {
	p := m.pools[pool]
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.recovering.IsZero() {
		return 0
	}
	return max(0, p.recovering.Sub(m.clock.Now()))
}

// Acquire reserves capacity. req.Holder is filled in (any value given is
// replaced); an empty RequestID gets a random one and a zero TTL gets
// LeaseTTL, jittered. A lost reply (transport error) is retried with the
// same request id, at most AcquireAttempts sends, so it never reserves
// twice; each send is bounded by CallTimeout.
//
// Fail-closed: while the pool's session is not confirmed Acquire returns
// ErrFenced without calling the ledger. Capacity and quota refusals are
// *ledger.Rejection errors (errors.Is ledger.ErrRejected). The caller
// must call Release on the returned Held and should stop using it when
// Done is closed.
func (m *Manager) Acquire(ctx context.Context, req ledger.AcquireRequest) (*Held, error) {
	p := m.pools[req.Pool]
	if p == nil {
		return nil, fmt.Errorf("acquire in pool %s: %w", req.Pool, ErrUnknownPool)
	}
	if req.RequestID == "" {
		req.RequestID = ledger.RequestID(newSuffix())
	}
	if req.TTL == 0 {
		req.TTL = m.jitter(m.cfg.LeaseTTL)
	}
	holder, gen, err := p.admit(m.clock.Now(), m.cfg)
	if err != nil {
		if errors.Is(err, ErrFenced) {
			m.cnt.reject(RejectFenced)
		}
		return nil, fmt.Errorf("acquire %s in pool %s: %w", req.RequestID, req.Pool, err)
	}
	req.Holder = holder

	// The deadline counts from the first send: a replay does not extend
	// it, so the first send time bounds it from below.
	var (
		g         ledger.Grant
		send      time.Time
		firstSend = m.clock.Now()
		uncertain bool // some attempt's outcome is unknown
	)
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			send = m.clock.Now()
		} else {
			send = firstSend
		}
		actx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
		g, err = m.l.Acquire(actx, req)
		cancel()
		unknown := unknownOutcome(err)
		uncertain = uncertain || unknown
		if !unknown || ctx.Err() != nil || attempt >= m.cfg.AcquireAttempts {
			break
		}
		m.cnt.acquireRetries.Add(1)
		if !m.sleep(ctx, backoff(attempt)) {
			break
		}
	}
	if err != nil {
		switch rej := ledger.AsRejection(err); {
		case rej != nil:
			m.cnt.reject(string(rej.Reason))
		default:
			m.cnt.reject(RejectError)
		}
		if uncertain {
			// The ledger may have granted it: find and release it later.
			// A later attempt's refusal does not rule that out: an
			// earlier send held up in the network (a partition that
			// holds bytes, then heals) can still land after it, once the
			// refusal's cause (no live session, no capacity) is gone.
			m.addOrphan(orphan{
				ref: ledger.LeaseRef{Pool: req.Pool, Holder: holder}, requestID: req.RequestID,
				until: send.Add(req.TTL),
			})
		}
		if errors.Is(err, ledger.ErrNoSession) || errors.Is(err, ledger.ErrSessionExpired) {
			p.kick()
		}
		return nil, fmt.Errorf("acquire %s in pool %s: %w", req.RequestID, req.Pool, err)
	}
	m.cnt.grants.Add(1)
	if g.Replayed {
		m.cnt.replays.Add(1)
	}
	h, err := m.insert(p, gen, g.Lease, firstSend, req.TTL)
	if err != nil {
		// Granted, but no longer usable: give it back rather than let it
		// run to its deadline. Fenced, the ledger is likely unreachable:
		// the maintenance loop retries, off the request path.
		if errors.Is(err, ErrFenced) {
			m.addOrphan(orphan{ref: g.Lease.Ref(), until: send.Add(req.TTL)})
		} else {
			m.releaseLease(g.Lease.Ref(), ledger.Usage{}, send.Add(req.TTL))
		}
		return nil, fmt.Errorf("acquire %s in pool %s: %w", req.RequestID, req.Pool, err)
	}
	return h, nil
}

// insert records a granted lease in the table unless the pool fenced,
// changed holder or closed since the grant. A replayed grant of a lease
// already held returns its Held.
func (m *Manager) insert(p *poolState, gen uint64, l ledger.Lease, send time.Time, ttl time.Duration) (*Held, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return nil, ErrClosed
	case p.gen != gen || !p.confirmedLocked(m.clock.Now(), m.cfg):
		return nil, ErrFenced
	}
	var h *Held
	m.tab.write(func(w tableWrite) {
		// A row of this id whose lease ended is replaced.
		if prev := w.get(l.Pool, l.ID); prev != nil && prev.held.Err() == nil {
			h = prev.held
			return
		}
		h = &Held{m: m, pool: p, gen: gen, doneC: make(chan struct{}), lease: l}
		w.put(&row{Pool: l.Pool, ID: l.ID, Engine: l.Engine, Lease: l, RenewedAt: send, TTL: ttl, Gen: gen, held: h})
	})
	return h, nil
}

// Stats returns the counters and each pool's session state.
func (m *Manager) Stats() Stats {
	s := Stats{Counters: m.cnt.snapshot()}
	for _, b := range m.Blocks() {
		s.Blocks++
		s.BlockSubs += b.Subs
	}
	snap := m.Snapshot()
	now := m.clock.Now()
	for _, p := range m.poolOrder {
		p.mu.Lock()
		ps := PoolStatus{
			Pool: p.id, Holder: p.holder, Epoch: p.epoch,
			Confirmed: p.confirmedLocked(now, m.cfg), ConfirmedAt: p.confirmedSend,
		}
		if !p.confirmedSend.IsZero() {
			ps.FenceAt = p.fenceAt(m.cfg)
		}
		p.mu.Unlock()
		for _, e := range snap.Leases(p.id) {
			ps.Held++
			if e.Lease.Reasserted {
				ps.Reasserted++
			}
			if e.Fenced {
				ps.Fenced++
			}
		}
		s.Held += ps.Held
		s.Reasserted += ps.Reasserted
		s.Fenced += ps.Fenced
		s.Pools = append(s.Pools, ps)
	}
	return s
}

// Close stops the loops and waits for them, then releases every held lease
// (closing its Done with ErrClosed) under ctx, each release also bounded by
// ReleaseTimeout, and retries pending releases once. Block leases are
// released like any lease; their sub-requests' Done closes with ErrClosed. Holder sessions are left to expire: nothing is held under
// them any more. Later calls return the first call's result.
func (m *Manager) Close(ctx context.Context) error {
	m.closeOnce.Do(func() {
		for _, p := range m.poolOrder {
			p.mu.Lock()
			p.closed = true
			p.mu.Unlock()
		}
		if m.blocks != nil {
			m.blocks.stop()
		}
		close(m.stopC)
		m.cancel()
		m.wg.Wait()

		var (
			errsMu sync.Mutex // guards errs
			errs   []error
			wg     sync.WaitGroup
		)
		sem := make(chan struct{}, m.cfg.RenewConcurrency)
		for _, r := range m.tab.snapshot() {
			h := r.held
			h.finish(ErrClosed, nil)
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				rctx, cancel := context.WithTimeout(ctx, m.cfg.ReleaseTimeout)
				defer cancel()
				if err := h.release(rctx, ledger.Usage{}, false); err != nil {
					errsMu.Lock()
					errs = append(errs, err)
					errsMu.Unlock()
				}
			}()
		}
		wg.Wait()
		if m.blocks != nil {
			m.blocks.wait() // refills in flight release what they got
		}
		m.retryOrphans(ctx, true)
		m.closeErr = errors.Join(errs...)
	})
	return m.closeErr
}

// jitter spreads d by ±jitterFraction.
func (m *Manager) jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (1 - jitterFraction + 2*jitterFraction*mrand.Float64()))
}

// sleep waits d on the clock; false if ctx ended first.
func (m *Manager) sleep(ctx context.Context, d time.Duration) bool {
	t := m.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return true
	case <-ctx.Done():
		return false
	}
}

// backoff is the jittered pause before re-send number attempt (1-based).
func backoff(attempt int) time.Duration {
	d := min(10*time.Millisecond<<attempt, 200*time.Millisecond)
	return d/2 + time.Duration(mrand.Int64N(int64(d/2)+1))
}

// domainErrors are the ledger's answers: the call reached the ledger and
// its outcome is known. Anything else (transport, timeout) leaves the
// outcome unknown.
var domainErrors = []error{
	ledger.ErrRejected, ledger.ErrInvalidArgument, ledger.ErrUnknownPool, ledger.ErrUnknownEngine,
	ledger.ErrUnknownTenant, ledger.ErrUnknownPriority, ledger.ErrNoSession, ledger.ErrSessionExpired,
	ledger.ErrLeaseNotFound, ledger.ErrNotHolder, ledger.ErrClosed, ledger.ErrFenceExhausted,
}

// unknownOutcome reports whether err leaves it unknown whether the ledger
// applied the call, so that retrying (idempotently) is the way to know.
func unknownOutcome(err error) bool {
	if err == nil {
		return false
	}
	for _, d := range domainErrors {
		if errors.Is(err, d) {
			return false
		}
	}
	return true
}

func newSuffix() string {
	var b [suffixLen / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

func holderID(name, suffix string) ledger.HolderID {
	return ledger.HolderID(name + "/" + suffix)
}
