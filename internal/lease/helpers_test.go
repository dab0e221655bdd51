package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/memory"
	lhredis "github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const pool ledger.PoolID = "llama"

func spec() ledger.PoolSpec {
	return ledger.PoolSpec{
		Name: pool,
		Engines: []ledger.EngineSpec{
			{ID: "gpu-0", URL: "http://127.0.0.1:9001", KVTokens: 1000, Slots: 4},
			{ID: "gpu-1", URL: "http://127.0.0.1:9002", KVTokens: 1000, Slots: 4},
		},
		Tenants:    []ledger.TenantSpec{{Name: "acme", KVShare: 1}},
		Priorities: []ledger.PrioritySpec{{Name: "interactive", MaxFill: 1}},
	}
}

func request(kv int64) ledger.AcquireRequest {
	return ledger.AcquireRequest{
		Pool: pool, Candidates: []ledger.EngineID{"gpu-0", "gpu-1"},
		Tenant: "acme", Priority: "interactive", KVTokens: kv, Slots: 1,
	}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// errUnreachable is what the fault proxy returns for a call it drops: a
// transport failure, not a ledger answer.
var errUnreachable = errors.New("fault: ledger unreachable")

// faultLedger is a fault-injecting proxy in front of a real ledger. It can
// swap the ledger behind it (a restarted, empty store), drop the reply of
// the next Acquire after the real call succeeded (a lost reply), and make
// the ledger unreachable (calls hang until their context ends).
type faultLedger struct {
	inner       atomic.Pointer[ledger.Ledger]
	down        atomic.Bool  // every call hangs until ctx ends
	dropAcquire atomic.Int64 // replies of the next n Acquires are lost
	// holdAcquire: the next n Acquires are held in the network: the call
	// fails as a timeout would, and the request lands on the ledger only
	// when the test calls deliverHeld. refuseAcquire: the next n Acquires
	// are answered ErrNoSession without reaching the ledger (a ledger that
	// has not yet seen the session's renewal).
	holdAcquire, refuseAcquire atomic.Int64
	acquires                   atomic.Int64 // Acquire calls that reached the proxy
	releases                   atomic.Int64 // Release calls that reached the proxy

	// mu guards lastSession, released and held.
	mu          sync.Mutex
	lastSession ledger.Session
	released    []ledger.Usage          // what each Release the ledger applied was given
	held        []ledger.AcquireRequest // Acquires held by holdAcquire, in order
}

// deliverHeld lands every held Acquire on the ledger, in the order sent,
// and returns their outcomes' errors.
func (f *faultLedger) deliverHeld(ctx context.Context) []error {
	f.mu.Lock()
	held := f.held
	f.held = nil
	f.mu.Unlock()
	var errs []error
	for _, r := range held {
		_, err := f.l().Acquire(ctx, r)
		errs = append(errs, err)
	}
	return errs
}

var _ ledger.Ledger = (*faultLedger)(nil)

func newFault(l ledger.Ledger) *faultLedger {
	f := &faultLedger{}
	f.swap(l)
	return f
}

func (f *faultLedger) swap(l ledger.Ledger) { f.inner.Store(&l) }
func (f *faultLedger) l() ledger.Ledger     { return *f.inner.Load() }

func (f *faultLedger) gate(ctx context.Context) error {
	if !f.down.Load() {
		return nil
	}
	<-ctx.Done()
	return fmt.Errorf("%w: %w", errUnreachable, ctx.Err())
}

func (f *faultLedger) session() ledger.Session {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastSession
}

func (f *faultLedger) Configure(ctx context.Context, s ledger.PoolSpec) (ledger.Epoch, error) {
	if err := f.gate(ctx); err != nil {
		return 0, err
	}
	return f.l().Configure(ctx, s)
}

func (f *faultLedger) SetDraining(ctx context.Context, p ledger.PoolID, e ledger.EngineID, d bool) error {
	if err := f.gate(ctx); err != nil {
		return err
	}
	return f.l().SetDraining(ctx, p, e, d)
}

func (f *faultLedger) KeepAlive(ctx context.Context, p ledger.PoolID, h ledger.HolderID, ttl time.Duration) (ledger.Session, error) {
	if err := f.gate(ctx); err != nil {
		return ledger.Session{}, err
	}
	s, err := f.l().KeepAlive(ctx, p, h, ttl)
	if err == nil {
		f.mu.Lock()
		f.lastSession = s
		f.mu.Unlock()
	}
	return s, err
}

func (f *faultLedger) Acquire(ctx context.Context, r ledger.AcquireRequest) (ledger.Grant, error) {
	f.acquires.Add(1)
	if err := f.gate(ctx); err != nil {
		return ledger.Grant{}, err
	}
	if f.holdAcquire.Add(-1) >= 0 {
		f.mu.Lock()
		f.held = append(f.held, r)
		f.mu.Unlock()
		return ledger.Grant{}, fmt.Errorf("%w: held in the network", errUnreachable)
	}
	if f.refuseAcquire.Add(-1) >= 0 {
		return ledger.Grant{}, fmt.Errorf("fault: %w", ledger.ErrNoSession)
	}
	g, err := f.l().Acquire(ctx, r)
	if err == nil && f.dropAcquire.Add(-1) >= 0 {
		return ledger.Grant{}, fmt.Errorf("%w: reply lost", errUnreachable)
	}
	return g, err
}

func (f *faultLedger) Renew(ctx context.Context, r ledger.LeaseRef, ttl time.Duration) (ledger.Renewal, error) {
	if err := f.gate(ctx); err != nil {
		return ledger.Renewal{}, err
	}
	return f.l().Renew(ctx, r, ttl)
}

func (f *faultLedger) Resize(ctx context.Context, r ledger.LeaseRef, kv int64) (ledger.Renewal, error) {
	if err := f.gate(ctx); err != nil {
		return ledger.Renewal{}, err
	}
	return f.l().Resize(ctx, r, kv)
}

func (f *faultLedger) Grow(ctx context.Context, r ledger.LeaseRef, kv int64) (ledger.Renewal, error) {
	if err := f.gate(ctx); err != nil {
		return ledger.Renewal{}, err
	}
	return f.l().Grow(ctx, r, kv)
}

func (f *faultLedger) Release(ctx context.Context, r ledger.LeaseRef, u ledger.Usage) (ledger.Released, error) {
	f.releases.Add(1)
	if err := f.gate(ctx); err != nil {
		return ledger.Released{}, err
	}
	rel, err := f.l().Release(ctx, r, u)
	if err == nil && rel.Released {
		f.mu.Lock()
		f.released = append(f.released, u)
		f.mu.Unlock()
	}
	return rel, err
}

// outcomes returns the outcomes of the releases the ledger applied, in
// order.
func (f *faultLedger) outcomes() []ledger.Outcome {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]ledger.Outcome, len(f.released))
	for i, u := range f.released {
		out[i] = u.Outcome
	}
	return out
}

func (f *faultLedger) Reassert(ctx context.Context, l ledger.Lease, ttl time.Duration) (ledger.Grant, error) {
	if err := f.gate(ctx); err != nil {
		return ledger.Grant{}, err
	}
	return f.l().Reassert(ctx, l, ttl)
}

func (f *faultLedger) Observe(ctx context.Context, o ledger.Observation) (ledger.Observed, error) {
	if err := f.gate(ctx); err != nil {
		return ledger.Observed{}, err
	}
	return f.l().Observe(ctx, o)
}

func (f *faultLedger) Sweep(ctx context.Context, p ledger.PoolID, n int) (ledger.Swept, error) {
	if err := f.gate(ctx); err != nil {
		return ledger.Swept{}, err
	}
	return f.l().Sweep(ctx, p, n)
}

func (f *faultLedger) Pools(ctx context.Context) ([]ledger.PoolID, error) {
	if err := f.gate(ctx); err != nil {
		return nil, err
	}
	return f.l().Pools(ctx)
}

func (f *faultLedger) List(ctx context.Context, flt ledger.Filter) ([]ledger.Lease, error) {
	if err := f.gate(ctx); err != nil {
		return nil, err
	}
	return f.l().List(ctx, flt)
}

func (f *faultLedger) Stats(ctx context.Context, p ledger.PoolID) (ledger.PoolStats, error) {
	if err := f.gate(ctx); err != nil {
		return ledger.PoolStats{}, err
	}
	return f.l().Stats(ctx, p)
}

func (f *faultLedger) Close() error { return f.l().Close() }

// backend is a real ledger under test, with a way to lose its state.
type backend struct {
	name string
	open func(t *testing.T) (l ledger.Ledger, wipe func(t *testing.T))
}

var prefixSeq atomic.Int64

func backends() []backend {
	return []backend{
		{name: "memory", open: func(t *testing.T) (ledger.Ledger, func(*testing.T)) {
			// The memory ledger keeps no state elsewhere: losing it is a new one.
			return memory.New(ledger.Options{RecoveryWindow: -1}, nil), nil
		}},
		{name: "redis", open: func(t *testing.T) (ledger.Ledger, func(*testing.T)) {
			srv := redisserver.Start(t)
			l := lhredis.New(srv.Client(), lhredis.Options{
				Options: ledger.Options{RecoveryWindow: -1},
				Prefix:  fmt.Sprintf("lease%d", prefixSeq.Add(1)),
			})
			return l, func(t *testing.T) {
				if err := srv.Client().FlushAll(ctxT(t, 5*time.Second)).Err(); err != nil {
					t.Fatalf("FLUSHALL: %v", err)
				}
			}
		}},
	}
}

// fixture is a configured real ledger behind a fault proxy.
type fixture struct {
	fault *faultLedger
	wipe  func(t *testing.T) // loses the ledger's state
}

func newFixture(t *testing.T, b backend) *fixture {
	t.Helper()
	l, wipe := b.open(t)
	f := &fixture{fault: newFault(l)}
	t.Cleanup(func() { _ = f.fault.Close() })
	if wipe == nil {
		wipe = func(*testing.T) { // memory: a fresh, empty ledger
			old := f.fault.l()
			f.fault.swap(memory.New(ledger.Options{RecoveryWindow: -1}, nil))
			_ = old.Close()
		}
	}
	f.wipe = wipe
	if _, err := f.fault.Configure(ctxT(t, 5*time.Second), spec()); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	return f
}

// fastConfig is a Config with a 1s session, for tests that wait for it.
func (f *fixture) fastConfig() lease.Config {
	return lease.Config{
		Ledger:            f.fault,
		Pools:             []ledger.PoolID{pool},
		HolderName:        "router-a",
		SessionTTL:        time.Second,
		KeepAliveInterval: 150 * time.Millisecond,
		SafetyMargin:      300 * time.Millisecond,
		LeaseTTL:          time.Second,
		RenewInterval:     100 * time.Millisecond,
		CallTimeout:       200 * time.Millisecond,
		Reconfigure: func(ctx context.Context, p ledger.PoolID) error {
			_, err := f.fault.Configure(ctx, spec())
			return err
		},
	}
}

func newManager(t *testing.T, cfg lease.Config) *lease.Manager {
	t.Helper()
	m, err := lease.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	if err := m.WaitReady(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	return m
}

// acquire takes a lease of kv KV tokens, failing the test if it is not
// granted.
func acquire(t *testing.T, m *lease.Manager, kv int64) *lease.Held {
	t.Helper()
	h, err := m.Acquire(ctxT(t, 5*time.Second), request(kv))
	if err != nil {
		t.Fatalf("Acquire(%d): %v", kv, err)
	}
	return h
}

// acquireAll is acquire for each of kvs, in order.
func acquireAll(t *testing.T, m *lease.Manager, kvs ...int64) []*lease.Held {
	t.Helper()
	held := make([]*lease.Held, 0, len(kvs))
	for _, kv := range kvs {
		held = append(held, acquire(t, m, kv))
	}
	return held
}

// ended checks that x (a held lease or a sub-request, named what) has ended
// with want: Done closed, at once (wait 0) or within wait, and Err want.
func ended(t *testing.T, what string, x interface {
	Done() <-chan struct{}
	Err() error
}, wait time.Duration, want error) {
	t.Helper()
	if wait == 0 {
		select {
		case <-x.Done():
		default:
			t.Fatalf("%s: Done not closed", what)
		}
	} else {
		select {
		case <-x.Done():
		case <-time.After(wait):
			t.Fatalf("%s: Done not closed within %s", what, wait)
		}
	}
	if err := x.Err(); !errors.Is(err, want) {
		t.Errorf("%s: Err = %v, want %v", what, err, want)
	}
}

// wantLedgerLeases checks how many leases the ledger behind fx holds; when
// says at what point of the test.
func wantLedgerLeases(t *testing.T, fx *fixture, when string, want int64) {
	t.Helper()
	if got := ledgerStats(t, fx.fault).Leases; got != want {
		t.Errorf("ledger leases %s = %d, want %d", when, got, want)
	}
}

func ledgerStats(t *testing.T, l ledger.Ledger) ledger.PoolStats {
	t.Helper()
	s, err := l.Stats(ctxT(t, 5*time.Second), pool)
	if err != nil {
		t.Fatalf("ledger Stats: %v", err)
	}
	return s
}

func forEachBackend(t *testing.T, f func(t *testing.T, fx *fixture)) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { f(t, newFixture(t, b)) })
	}
}
