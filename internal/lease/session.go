package lease

// Holder sessions and self-fencing (docs/design.md, Guarantee 5).
//
// Each pool has one holder session and one keepalive loop. The loop sends
// KeepAlive(SessionTTL) every KeepAliveInterval (jittered) from a call
// goroutine it owns, so a hung call never delays the fence timer. A
// success confirms the session as of the call's local send time S: the
// ledger set the expiry to its own now+TTL, and its now was not before S,
// so by the local monotonic clock the session cannot expire before S+TTL.
// The pool fences itself at S+TTL-SafetyMargin unless a later send was
// confirmed: every held lease's Done closes (the proxy cancels the
// upstream request) and Acquire fails with ErrFenced without calling the
// ledger, also in between timer ticks (Acquire and insert check the
// deadline themselves). A later successful KeepAlive lifts the fence.
//
// ErrSessionExpired means the ledger released everything of the old
// session: the pool takes a fresh holder id (a new incarnation), drops the
// old incarnation's leases from the table (Done closed with ErrLeaseLost)
// and keeps alive again at once. ErrUnknownPool means the store lost the
// pool: Reconfigure (if set) re-applies it and the loop keeps alive again.
// A changed epoch (the store restarted or failed over) asks the
// maintenance loop to re-assert every held lease of the pool.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// poolState is one pool's holder session.
type poolState struct {
	id     ledger.PoolID
	readyC chan struct{} // closed at the first confirmation
	kickC  chan struct{} // asks the loop to keep alive now; cap 1

	// mu guards the fields below, and orders fencing against inserts of
	// this pool's leases into the table.
	mu            sync.Mutex
	holder        ledger.HolderID
	gen           uint64    // incarnation; bumped with every new holder id
	confirmedSend time.Time // send time of the last successful KeepAlive
	epoch         ledger.Epoch
	fenced        bool // leases fenced since the last confirmation
	ready         bool // readyC closed
	closed        bool
	reassert      bool // re-assertion of every lease pending
	lastErr       error
	// recovering is when (local clock) the ledger's recovery window ends,
	// as the last confirmed KeepAlive reported it; zero if none, or once
	// an engine of the pool has recovered (it takes grants again).
	recovering time.Time
}

func newPoolState(id ledger.PoolID, holder ledger.HolderID) *poolState {
	return &poolState{
		id: id, holder: holder, gen: 1, fenced: true,
		readyC: make(chan struct{}), kickC: make(chan struct{}, 1),
	}
}

func (p *poolState) fenceAt(cfg Config) time.Time {
	return p.confirmedSend.Add(cfg.SessionTTL - cfg.SafetyMargin)
}

// confirmedLocked reports whether the session is confirmed at now.
func (p *poolState) confirmedLocked(now time.Time, cfg Config) bool {
	return !p.confirmedSend.IsZero() && now.Before(p.fenceAt(cfg))
}

// admit returns the holder to acquire with, or why not.
func (p *poolState) admit(now time.Time, cfg Config) (ledger.HolderID, uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return "", 0, ErrClosed
	case !p.confirmedLocked(now, cfg):
		return "", 0, ErrFenced
	}
	return p.holder, p.gen, nil
}

func (p *poolState) kick() {
	select {
	case p.kickC <- struct{}{}:
	default:
	}
}

func (p *poolState) lastError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

// kaResult is one KeepAlive call's outcome.
type kaResult struct {
	send    time.Time
	gen     uint64
	session ledger.Session
	err     error
}

// recoveryEnd is when, by the local clock at now (the reply's arrival), the
// recovery window s reports ends; zero if none. The ledger set s.Expires to
// its own now plus ttl, so the window has s.RecoveringUntil minus that now
// left; counted from the reply's arrival it ends no earlier than the
// ledger's.
func recoveryEnd(s ledger.Session, ttl time.Duration, now time.Time) time.Time {
	if s.RecoveringUntil.IsZero() {
		return time.Time{}
	}
	left := s.RecoveringUntil.Sub(s.Expires.Add(-ttl))
	if left <= 0 {
		return time.Time{}
	}
	return now.Add(left)
}

// keepAliveLoop owns p's session: KeepAlive calls and the fence timer.
func (m *Manager) keepAliveLoop(p *poolState) {
	defer m.wg.Done()
	results := make(chan kaResult, 1)
	inflight := false
	next := m.clock.NewTimer(0)
	defer next.Stop()
	fence := m.clock.NewTimer(m.cfg.SessionTTL)
	defer fence.Stop()

	start := func() {
		if inflight {
			return
		}
		inflight = true
		p.mu.Lock()
		holder, gen := p.holder, p.gen
		p.mu.Unlock()
		go func() { results <- m.keepAlive(p, holder, gen) }()
	}
	for {
		select {
		case <-m.stopC:
			if inflight {
				<-results // m.ctx is cancelled: the call returns promptly
			}
			return
		case <-next.Chan():
			start()
			next.Reset(m.jitter(m.cfg.keepAliveEvery()))
		case <-p.kickC:
			start()
		case r := <-results:
			inflight = false
			again := m.onKeepAlive(p, r)
			if d := m.checkFence(p); d > 0 {
				fence.Reset(d)
			}
			if again {
				start()
			}
		case <-fence.Chan():
			if d := m.checkFence(p); d > 0 {
				fence.Reset(d)
			} else {
				fence.Reset(m.cfg.SessionTTL) // re-armed on the next confirmation
			}
		}
	}
}

// keepAlive runs in a goroutine the loop owns (so the fence timer never
// waits for the ledger). When the ledger lost the pool it calls
// Reconfigure and keeps alive again.
func (m *Manager) keepAlive(p *poolState, holder ledger.HolderID, gen uint64) kaResult {
	call := func() kaResult {
		ctx, cancel := context.WithTimeout(m.ctx, m.cfg.CallTimeout)
		defer cancel()
		send := m.clock.Now()
		s, err := m.l.KeepAlive(ctx, p.id, holder, m.cfg.SessionTTL)
		return kaResult{send: send, gen: gen, session: s, err: err}
	}
	r := call()
	if !errors.Is(r.err, ledger.ErrUnknownPool) || m.cfg.Reconfigure == nil {
		return r
	}
	m.cnt.keepAliveFails.Add(1)
	m.cnt.reconfigures.Add(1)
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.CallTimeout)
	defer cancel()
	if err := m.cfg.Reconfigure(ctx, p.id); err != nil {
		m.log.Warn("lease: reconfigure after the ledger lost the pool failed",
			slog.String("pool", string(p.id)), slog.Any("error", err))
		r.err = errors.Join(r.err, fmt.Errorf("reconfigure: %w", err))
		return r
	}
	return call()
}

// onKeepAlive applies a KeepAlive result; true asks for another KeepAlive
// at once.
func (m *Manager) onKeepAlive(p *poolState, r kaResult) bool {
	switch {
	case r.err == nil:
		m.cnt.keepAlives.Add(1)
		p.mu.Lock()
		if r.gen != p.gen { // the holder changed while the call was out
			p.mu.Unlock()
			return false
		}
		if r.send.After(p.confirmedSend) {
			p.confirmedSend = r.send
		}
		recovered := p.fenced && p.confirmedLocked(m.clock.Now(), m.cfg) && p.ready
		if p.confirmedLocked(m.clock.Now(), m.cfg) {
			p.fenced = false
		}
		changed := p.epoch != ledger.NoEpoch && r.session.Epoch != p.epoch
		p.epoch = r.session.Epoch
		p.recovering = time.Time{}
		if r.session.Recovered == 0 { // no engine takes grants yet: every grant is refused
			p.recovering = recoveryEnd(r.session, m.cfg.SessionTTL, m.clock.Now())
		}
		if changed {
			p.reassert = true
		}
		if !p.ready {
			p.ready = true
			close(p.readyC)
		}
		p.lastErr = nil
		p.mu.Unlock()
		if recovered {
			m.cnt.recoveries.Add(1)
			m.log.Info("lease: holder session confirmed again", slog.String("pool", string(p.id)))
		}
		if changed {
			m.cnt.epochChanges.Add(1)
			m.log.Warn("lease: ledger epoch changed, re-asserting held leases",
				slog.String("pool", string(p.id)), slog.Uint64("epoch", uint64(r.session.Epoch)))
			m.wakeMaintenance()
		}
		return false

	case errors.Is(r.err, ledger.ErrSessionExpired):
		m.cnt.keepAliveFails.Add(1)
		m.cnt.expiredSessions.Add(1)
		m.newIncarnation(p, r.gen, r.err)
		return true

	default:
		m.cnt.keepAliveFails.Add(1)
		// Logged when the failure changes, not on every retry: a refused
		// session (a certificate or token naming another router) or an
		// unreachable ledger is said once, then counted.
		if prev := m.setLastErr(p, r.err); prev == nil || prev.Error() != r.err.Error() {
			m.log.Warn("lease: holder session keepalive failed; the pool stays unready or fences until one succeeds",
				slog.String("pool", string(p.id)), slog.String("err", r.err.Error()))
		}
		return false
	}
}

// setLastErr records p's last session error and returns the one before.
func (m *Manager) setLastErr(p *poolState, err error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev := p.lastErr
	p.lastErr = err
	return prev
}

// newIncarnation replaces p's holder after its session expired in the
// ledger: the old incarnation's leases are gone, so they leave the table
// with Done closed (ErrLeaseLost).
func (m *Manager) newIncarnation(p *poolState, gen uint64, cause error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastErr = cause
	if gen != p.gen {
		return
	}
	oldHolder := p.holder
	p.gen++
	p.holder = holderID(m.cfg.HolderName, m.cfg.HolderKey.Suffix())
	p.confirmedSend = time.Time{}
	p.fenced = true
	p.reassert = false
	m.log.Warn("lease: holder session expired, starting a new incarnation",
		slog.String("pool", string(p.id)), slog.String("old_holder", string(oldHolder)), slog.String("holder", string(p.holder)))

	var old []*row
	m.tab.write(func(w tableWrite) {
		for _, e := range w.pool(p.id) {
			if e.Gen < p.gen {
				old = append(old, e)
				w.del(e)
			}
		}
	})
	for _, e := range old {
		e.held.lose(ErrLeaseLost, &m.cnt.lost)
	}
}

// checkFence fences p if its confirmation ran out; otherwise it returns
// the time left until it does (0 when fenced or never confirmed).
func (m *Manager) checkFence(p *poolState) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := m.clock.Now()
	if p.confirmedLocked(now, m.cfg) {
		return p.fenceAt(m.cfg).Sub(now)
	}
	if p.fenced {
		return 0
	}
	p.fenced = true
	m.cnt.fences.Add(1)
	n := m.fenceLeasesLocked(p)
	m.log.Warn("lease: holder session not confirmed in time, fenced",
		slog.String("pool", string(p.id)), slog.Int("leases", n),
		slog.Time("confirmed_send", p.confirmedSend))
	return 0
}

// fenceLeasesLocked closes Done of every unfenced lease of p and marks
// its row. p.mu is held, so no insert for p runs concurrently.
func (m *Manager) fenceLeasesLocked(p *poolState) int {
	var fenced []*row
	m.tab.write(func(w tableWrite) {
		for _, r := range w.pool(p.id) {
			if !r.Fenced {
				fenced = append(fenced, r)
				w.put(r.with(func(r *row) { r.Fenced = true }))
			}
		}
	})
	n := 0
	for _, r := range fenced {
		if r.held.finish(ErrFenced, &m.cnt.fencedLeases) {
			n++
		}
	}
	return n
}
