package lease

// Block leases (optional, Config.Block; docs/design.md, "Concepts").
//
// A block is an ordinary lease, acquired through Acquire for one
// (pool, engine, tenant, priority) with Config.Block's size, so the ledger
// checks engine capacity, max_fill and the tenant's quota when the block
// is granted. It lives in the local table like any lease: it is renewed,
// re-asserted after ledger loss and fenced with its pool. Admit first
// tries to carve the request out of the free part of a live block of one
// of its candidates (no ledger call), and falls back to Acquire.
//
// Exactness: a block's used amounts change only under block.mu, and a
// sub-request is taken only if used+request <= block size, so the sum of
// a block's sub-requests never exceeds the block. A sub-request is taken
// under its pool's mu after checking, by the local clock, that the
// session is confirmed and the block's Done is open: the same order
// fencing uses against inserts. When a block's Done closes (fenced,
// lost, released by Close) a watcher closes Done of every sub-request
// with the same error; the block is given back to the ledger only when
// its last sub-request has been released, so the engine has aborted
// them before the capacity can be granted again.
//
// Refill: after each local admission, and when nothing fits, the free
// part of the key's live blocks is compared with LowWater of one block;
// below it (and under MaxPerEngine blocks, one acquisition in flight per
// key) a block is acquired in the background. A refused acquisition
// backs off. While the ledger is slow or unreachable, held blocks keep
// admitting for Block.CarveWithin after the last confirmed KeepAlive (not
// for the whole session); new blocks cannot be had. A block of an epoch
// the pool has left (re-asserted after a ledger loss) admits nothing more
// and is released with its last sub-request (take, retireBlock).
// Blocks idle (no sub-request) for Idle are released by the maintenance
// loop.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Ticket is the capacity granted to one request by Admit: a *Held lease
// of its own or a *Sub of a block lease. Dispatch selects on Done, then
// calls Release with the actual usage.
type Ticket interface {
	// Engine is the engine the capacity is on.
	Engine() ledger.EngineID
	// Done closes when the capacity must no longer be used; Err says why.
	Done() <-chan struct{}
	Err() error
	// Release gives the capacity back; idempotent, own bounded context.
	Release(ledger.Usage) error
}

// Grower is a Ticket whose reservation can grow with what its request
// generates: a *Held lease in an elastic pool. A *Sub is not one: a block
// sub-request reserves every token it could produce.
type Grower interface {
	Ticket
	// Grow raises the reservation to kvTokens.
	Grow(ctx context.Context, kvTokens int64) error
}

var (
	_ Ticket = (*Held)(nil)
	_ Ticket = (*Sub)(nil)
	_ Grower = (*Held)(nil)
)

// blockKey is what one block serves: quota and max_fill are the ledger's
// to check when the block is acquired, so they must not be mixed.
type blockKey struct {
	pool     ledger.PoolID
	engine   ledger.EngineID
	tenant   ledger.TenantID
	priority ledger.PriorityName
}

// block is one block lease and its local sub-allocation.
type block struct {
	key       blockKey
	h         *Held
	kv, slots int64        // the block's size, fixed at grant
	epoch     ledger.Epoch // its fence's epoch, kept when re-asserted

	// mu guards the fields below.
	mu                sync.Mutex
	usedKV, usedSlots int64 // sums over subs
	subs              map[*Sub]struct{}
	usage             ledger.Usage // actual usage of released subs, reported with the block
	lastUsed          time.Time    // local clock: last admission or release
	dead              bool         // admits nothing more
	released          bool         // the block's release has been started
}

// keyState is the blocks of one key.
type keyState struct {
	blocks    []*block  // live blocks in grant order; replaced, never changed in place
	refilling bool      // an acquisition is in flight
	notBefore time.Time // no acquisition before (backoff after a refusal)
}

// blockSet is a Manager's blocks.
type blockSet struct {
	cfg BlockConfig

	// mu guards keys and closed; it orders goroutine starts against Close.
	mu     sync.Mutex
	keys   map[blockKey]*keyState
	closed bool
	wg     sync.WaitGroup // refills and watchers
}

// Sub is one request admitted locally against a block lease. It is safe
// for concurrent use.
type Sub struct {
	m         *Manager
	b         *block
	kv, slots int64
	doneC     chan struct{} // closed once, by finish

	// mu guards err and hooks.
	mu    sync.Mutex
	err   error
	hooks hooks // AfterDone's

	releaseOnce sync.Once
	releaseErr  error
}

// Engine returns the block's engine.
func (s *Sub) Engine() ledger.EngineID { return s.b.key.engine }

// Block returns the block lease it was admitted against (its fencing
// token is the sub-request's).
func (s *Sub) Block() ledger.Lease { return s.b.h.Lease() }

// Done closes when the sub-request must no longer be used: its block was
// fenced, lost or closed (Err as the block's), or it was released.
func (s *Sub) Done() <-chan struct{} { return s.doneC }

// Err is nil while the sub-request is usable.
func (s *Sub) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// AfterDone runs f in its own goroutine once Done closes (DoneFunc).
func (s *Sub) AfterDone(f func()) (stop func() bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hk := s.hooks.add(f, s.err != nil)
	return func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.hooks.remove(hk)
	}
}

func (s *Sub) finish(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
		close(s.doneC)
		s.hooks.fire()
	}
}

// Release returns the sub-request's share to its block; idempotent. When
// the block is dead (its Done closed, or retired) and this was its last
// sub-request, the block is released to the ledger with the summed usage
// of its sub-requests, and that release's error is returned. The block's
// release reports no outcome (OutcomeNone): the ledger counts one outcome
// per lease, and a block's sub-requests each came to their own, so
// usage.Outcome is not breaker evidence here.
func (s *Sub) Release(usage ledger.Usage) error {
	s.releaseOnce.Do(func() {
		s.finish(ErrReleased)
		b := s.b
		b.mu.Lock()
		if _, ok := b.subs[s]; ok {
			delete(b.subs, s)
			b.usedKV -= s.kv
			b.usedSlots -= s.slots
			b.usage.PromptTokens += usage.PromptTokens
			b.usage.CompletionTokens += usage.CompletionTokens
		}
		b.lastUsed = s.m.clock.Now()
		last := b.dead && len(b.subs) == 0 && !b.released
		if last {
			b.released = true
		}
		b.mu.Unlock()
		if last {
			s.releaseErr = s.m.releaseBlock(b)
		}
	})
	return s.releaseErr
}

// Admit grants req from a block lease when blocks are configured and a
// live block of one of req.Candidates (same tenant and priority) has room,
// without calling the ledger; otherwise it calls Acquire. req.RequestID
// and req.TTL do not apply to a local admission. Admit never admits
// locally while the pool's session is unconfirmed, nor a request charging
// a rate window (req.Tokens > 0: its tenant has a rate budget, which only
// the ledger's check enforces across routers).
func (m *Manager) Admit(ctx context.Context, req ledger.AcquireRequest) (Ticket, error) {
	if m.blocks != nil {
		if s := m.admitLocal(req); s != nil {
			return s, nil
		}
	}
	h, err := m.Acquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// admitLocal returns a sub-request of a live block, or nil.
func (m *Manager) admitLocal(req ledger.AcquireRequest) *Sub {
	bs := m.blocks
	p := m.pools[req.Pool]
	if p == nil || len(req.Candidates) == 0 || req.KVTokens < 1 || req.Slots < 1 || req.Tokens > 0 ||
		req.KVTokens > bs.cfg.KVTokens || req.Slots > bs.cfg.Slots {
		return nil
	}
	for _, eng := range req.Candidates {
		key := blockKey{pool: req.Pool, engine: eng, tenant: req.Tenant, priority: req.Priority}
		bs.mu.Lock()
		var blocks []*block
		if ks := bs.keys[key]; ks != nil {
			blocks = ks.blocks
		}
		bs.mu.Unlock()
		for _, b := range blocks {
			s, stale := m.take(p, b, req.KVTokens, req.Slots)
			if s != nil {
				m.cnt.localAdmits.Add(1)
				m.maybeRefill(key)
				return s
			}
			if stale {
				m.retireBlock(b)
			}
		}
	}
	m.maybeRefill(blockKey{pool: req.Pool, engine: req.Candidates[0], tenant: req.Tenant, priority: req.Priority})
	return nil
}

// take carves kv and slots out of b, or returns nil; stale reports a
// block of an epoch the pool has left, to be retired. p.mu is held so that
// the confirmation check and the admission are one step against fencing.
// A block carves only while the pool's last confirmed KeepAlive, sent less
// than Block.CarveWithin ago, saw the block's epoch (assumption A1 of
// docs/design.md, "Recovery after ledger loss"): after a ledger loss no
// sub-request starts on pre-loss capacity later than that.
func (m *Manager) take(p *poolState, b *block, kv, slots int64) (s *Sub, stale bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := m.clock.Now()
	if p.closed || !p.confirmedLocked(now, m.cfg) || p.gen != b.h.gen || b.h.Err() != nil {
		return nil, false
	}
	if b.epoch != p.epoch || now.Sub(p.confirmedSend) >= m.cfg.Block.CarveWithin {
		return nil, b.epoch < p.epoch
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dead || b.usedKV+kv > b.kv || b.usedSlots+slots > b.slots {
		return nil, false
	}
	b.usedKV += kv
	b.usedSlots += slots
	b.lastUsed = now
	s = &Sub{m: m, b: b, kv: kv, slots: slots, doneC: make(chan struct{})}
	b.subs[s] = struct{}{}
	return s, false
}

// retireBlock stops b admitting: a block of an epoch its pool has left
// (re-asserted after a ledger loss) keeps its running sub-requests and is
// released with the last of them, or now if it has none.
func (m *Manager) retireBlock(b *block) {
	b.mu.Lock()
	if b.dead {
		b.mu.Unlock()
		return
	}
	b.dead = true
	last := len(b.subs) == 0 && !b.released
	if last {
		b.released = true
	}
	b.mu.Unlock()
	m.dropBlock(b)
	if last {
		_ = m.releaseBlock(b) // counted; an unknown outcome is retried in the background
	}
}

// maybeRefill starts a block acquisition for key when its live blocks'
// free part is below the low-water mark.
func (m *Manager) maybeRefill(key blockKey) {
	bs := m.blocks
	now := m.clock.Now()
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if bs.closed {
		return
	}
	ks := bs.keys[key]
	if ks == nil {
		ks = &keyState{}
		bs.keys[key] = ks
	}
	if ks.refilling || now.Before(ks.notBefore) || len(ks.blocks) >= bs.cfg.MaxPerEngine {
		return
	}
	var freeKV, freeSlots int64
	for _, b := range ks.blocks {
		b.mu.Lock()
		if !b.dead {
			freeKV += b.kv - b.usedKV
			freeSlots += b.slots - b.usedSlots
		}
		b.mu.Unlock()
	}
	lw := bs.cfg.LowWater
	if float64(freeKV) >= lw*float64(bs.cfg.KVTokens) && float64(freeSlots) >= lw*float64(bs.cfg.Slots) {
		return
	}
	ks.refilling = true
	bs.wg.Add(1)
	go m.refill(key)
}

// refill acquires one block for key.
func (m *Manager) refill(key blockKey) {
	bs := m.blocks
	defer bs.wg.Done()
	h, err := m.Acquire(m.ctx, ledger.AcquireRequest{
		Pool: key.pool, Candidates: []ledger.EngineID{key.engine}, Tenant: key.tenant, Priority: key.priority,
		KVTokens: bs.cfg.KVTokens, Slots: bs.cfg.Slots,
	})
	bs.mu.Lock()
	defer bs.mu.Unlock()
	ks := bs.keys[key]
	ks.refilling = false
	if err != nil {
		m.cnt.blockRefusals.Add(1)
		ks.notBefore = m.clock.Now().Add(m.jitter(bs.cfg.Backoff))
		return
	}
	if bs.closed {
		_ = h.Release(ledger.Usage{}) // Close released it already, or does now; counted
		return
	}
	b := &block{key: key, h: h, kv: h.Lease().KVTokens, slots: h.Lease().Slots, epoch: h.Lease().Fence.Epoch,
		subs: map[*Sub]struct{}{}, lastUsed: m.clock.Now()}
	ks.blocks = append(ks.blocks[:len(ks.blocks):len(ks.blocks)], b)
	m.cnt.blockAcquires.Add(1)
	bs.wg.Add(1)
	go m.watchBlock(b)
}

// watchBlock closes b's sub-requests when b's Done closes, and releases
// b once none is left.
func (m *Manager) watchBlock(b *block) {
	bs := m.blocks
	defer bs.wg.Done()
	<-b.h.Done()
	err := b.h.Err()
	b.mu.Lock()
	b.dead = true
	subs := make([]*Sub, 0, len(b.subs))
	for s := range b.subs {
		subs = append(subs, s)
	}
	last := len(b.subs) == 0 && !b.released
	if last {
		b.released = true
	}
	b.mu.Unlock()
	m.dropBlock(b)
	for _, s := range subs {
		s.finish(err)
	}
	if last {
		_ = m.releaseBlock(b) // counted; an unknown outcome is retried in the background
	}
}

// dropBlock removes b from its key's live blocks.
func (m *Manager) dropBlock(b *block) {
	bs := m.blocks
	bs.mu.Lock()
	defer bs.mu.Unlock()
	ks := bs.keys[b.key]
	if ks == nil {
		return
	}
	keep := make([]*block, 0, len(ks.blocks))
	for _, o := range ks.blocks {
		if o != b {
			keep = append(keep, o)
		}
	}
	ks.blocks = keep
}

// releaseBlock gives b back to the ledger with its sub-requests' usage.
func (m *Manager) releaseBlock(b *block) error {
	b.mu.Lock()
	usage := b.usage
	b.mu.Unlock()
	m.cnt.blockReleases.Add(1)
	if err := b.h.Release(usage); err != nil {
		return fmt.Errorf("release block lease %s: %w", b.h.Lease().ID, err)
	}
	return nil
}

// retireIdleBlocks releases the blocks that had no sub-request for Idle.
func (m *Manager) retireIdleBlocks() {
	bs := m.blocks
	if bs == nil {
		return
	}
	now := m.clock.Now()
	var retire []*block
	bs.mu.Lock()
	for key, ks := range bs.keys {
		keep := make([]*block, 0, len(ks.blocks))
		for _, b := range ks.blocks {
			b.mu.Lock()
			idle := !b.dead && len(b.subs) == 0 && now.Sub(b.lastUsed) >= bs.cfg.Idle
			if idle {
				b.dead, b.released = true, true
				retire = append(retire, b)
			} else {
				keep = append(keep, b)
			}
			b.mu.Unlock()
		}
		ks.blocks = keep
		if len(keep) == 0 && !ks.refilling && !now.Before(ks.notBefore) {
			delete(bs.keys, key)
		}
	}
	bs.mu.Unlock()
	for _, b := range retire {
		_ = m.releaseBlock(b) // counted; an unknown outcome is retried in the background
	}
}

// stop makes refills give back what they acquire and starts no more
// goroutines.
func (bs *blockSet) stop() {
	bs.mu.Lock()
	bs.closed = true
	bs.mu.Unlock()
}

// BlockStatus is one live block lease as Manager.Blocks sees it.
type BlockStatus struct {
	Lease ledger.Lease
	// UsedKV and UsedSlots are the sums of its sub-requests; Subs counts
	// them.
	UsedKV, UsedSlots int64
	Subs              int
}

// wait closes Done of every live block (Close has released them) and waits
// for the refills and watchers.
func (bs *blockSet) wait() {
	bs.mu.Lock()
	var blocks []*block
	for _, ks := range bs.keys {
		blocks = append(blocks, ks.blocks...)
	}
	bs.mu.Unlock()
	for _, b := range blocks {
		b.h.finish(ErrClosed, nil)
	}
	bs.wg.Wait()
}

// Blocks returns the live block leases (none when blocks are off).
func (m *Manager) Blocks() []BlockStatus {
	bs := m.blocks
	if bs == nil {
		return nil
	}
	var blocks []*block
	bs.mu.Lock()
	for _, ks := range bs.keys {
		blocks = append(blocks, ks.blocks...)
	}
	bs.mu.Unlock()
	out := make([]BlockStatus, 0, len(blocks))
	for _, b := range blocks {
		b.mu.Lock()
		out = append(out, BlockStatus{Lease: b.h.Lease(), UsedKV: b.usedKV, UsedSlots: b.usedSlots, Subs: len(b.subs)})
		b.mu.Unlock()
	}
	return out
}
