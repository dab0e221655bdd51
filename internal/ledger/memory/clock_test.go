package memory

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Deterministic tests of everything time decides — lease expiry, session
// death, bounded sweeping, the recovery window, stale telemetry — driven by
// advancing an injected clock.

// fakeClock is a ledger.Clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 678_901_234, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

const (
	testPool   ledger.PoolID       = "llama"
	testTenant ledger.TenantID     = "acme"
	testPrio   ledger.PriorityName = "standard"
)

// testSpec is a pool of two engines of 1000 KV tokens and 10 slots each.
func testSpec() ledger.PoolSpec {
	return ledger.PoolSpec{
		Name: testPool,
		Engines: []ledger.EngineSpec{
			{ID: "e0", KVTokens: 1000, Slots: 10},
			{ID: "e1", KVTokens: 1000, Slots: 10},
		},
		Tenants: []ledger.TenantSpec{
			{Name: testTenant, KVShare: 1},
			{Name: "small", KVShare: 0.1, SlotShare: 0.1},
		},
		Priorities: []ledger.PrioritySpec{
			{Name: testPrio, MaxFill: 1},
			{Name: "batch", MaxFill: 0.5},
		},
		RetryAfter: 250 * time.Millisecond,
	}
}

// fixture is a configured ledger on a fake clock, past its recovery window
// unless opts says otherwise.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	clock *fakeClock
	l     *Ledger
	epoch ledger.Epoch
}

func newFixture(t *testing.T, opts ledger.Options) *fixture {
	t.Helper()
	if opts.RecoveryWindow == 0 {
		opts.RecoveryWindow = -1
	}
	f := &fixture{t: t, ctx: context.Background(), clock: newFakeClock()}
	f.l = New(opts, f.clock)
	t.Cleanup(func() { _ = f.l.Close() })
	var err error
	if f.epoch, err = f.l.Configure(f.ctx, testSpec()); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	return f
}

func (f *fixture) keepAlive(h ledger.HolderID, ttl time.Duration) ledger.Session {
	f.t.Helper()
	s, err := f.l.KeepAlive(f.ctx, testPool, h, ttl)
	if err != nil {
		f.t.Fatalf("KeepAlive(%s): %v", h, err)
	}
	return s
}

func (f *fixture) request(h ledger.HolderID, id ledger.RequestID, kv int64, ttl time.Duration) ledger.AcquireRequest {
	return ledger.AcquireRequest{
		Pool: testPool, Candidates: []ledger.EngineID{"e0"}, Tenant: testTenant, Priority: testPrio,
		KVTokens: kv, Slots: 1, Holder: h, RequestID: id, TTL: ttl,
	}
}

func (f *fixture) acquire(h ledger.HolderID, id ledger.RequestID, kv int64, ttl time.Duration) ledger.Lease {
	f.t.Helper()
	g, err := f.l.Acquire(f.ctx, f.request(h, id, kv, ttl))
	if err != nil {
		f.t.Fatalf("Acquire(%s, %s): %v", h, id, err)
	}
	return g.Lease
}

func (f *fixture) stats() ledger.PoolStats {
	f.t.Helper()
	s, err := f.l.Stats(f.ctx, testPool)
	if err != nil {
		f.t.Fatalf("Stats: %v", err)
	}
	return s
}

func (f *fixture) engine(id ledger.EngineID) ledger.EngineStats {
	f.t.Helper()
	for _, e := range f.stats().Engines {
		if e.Spec.ID == id {
			return e
		}
	}
	f.t.Fatalf("engine %s not in stats", id)
	return ledger.EngineStats{}
}

func (f *fixture) leases() int {
	f.t.Helper()
	ls, err := f.l.List(f.ctx, ledger.Filter{Pool: testPool})
	if err != nil {
		f.t.Fatalf("List: %v", err)
	}
	return len(ls)
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func wantReason(t *testing.T, what string, err error, want ledger.Reason) {
	t.Helper()
	r := ledger.AsRejection(err)
	if r == nil || r.Reason != want {
		t.Fatalf("%s: got %v, want rejection %s", what, err, want)
	}
}

func TestLeaseExpiresAtDeadline(t *testing.T) {
	f := newFixture(t, ledger.Options{})
	f.keepAlive("r1", time.Hour)
	start := toMillis(f.clock.Now())
	ls := f.acquire("r1", "q1", 800, 1500*time.Microsecond) // 1.5ms: honoured as 1ms

	if want := start.Add(time.Millisecond); !ls.Deadline.Equal(want) || !ls.Created.Equal(start) {
		t.Fatalf("created %v deadline %v, want %v and %v (millisecond precision)", ls.Created, ls.Deadline, start, want)
	}
	f.clock.Advance(-f.clock.Now().Sub(start)) // back to the whole millisecond
	ls = f.acquire("r1", "q1", 800, time.Second)
	if ls.Deadline.Sub(ls.Created) != time.Millisecond {
		t.Fatalf("replay changed the lease: %+v", ls)
	}
	if _, err := f.l.Renew(f.ctx, ls.Ref(), 10*time.Second); err != nil {
		t.Fatalf("Renew before the deadline: %v", err)
	}
	f.clock.Advance(10*time.Second - time.Millisecond)

	// Still live one millisecond before the deadline: it blocks a second
	// request that would not fit beside it.
	_, err := f.l.Acquire(f.ctx, f.request("r1", "q2", 800, time.Second))
	wantReason(t, "acquire beside a live lease", err, ledger.ReasonEngineKV)
	if r, err := f.l.Renew(f.ctx, ls.Ref(), time.Second); err != nil || !r.Lease.Deadline.Equal(toMillis(f.clock.Now()).Add(time.Second)) {
		t.Fatalf("Renew = %+v, %v; want deadline now+1s", r, err)
	}

	// At the deadline the lease has ended: not renewable, capacity free.
	f.clock.Advance(time.Second)
	if f.leases() != 1 {
		t.Fatalf("an expired lease should stay listed until swept")
	}
	_, err = f.l.Renew(f.ctx, ls.Ref(), time.Second)
	wantErr(t, "renew at the deadline", err, ledger.ErrLeaseNotFound)
	if f.leases() != 0 {
		t.Fatalf("the renew's sweep should have removed the expired lease")
	}
	if e := f.engine("e0"); e.ReservedKV != 0 || e.ReservedSlots != 0 || e.Leases != 0 {
		t.Fatalf("engine after expiry = %+v, want nothing reserved", e)
	}
	if got := f.stats().Counters[ledger.CounterExpired]; got != 1 {
		t.Fatalf("expired counter = %d, want 1", got)
	}
	f.acquire("r1", "q2", 800, time.Second)
	if r, err := f.l.Release(f.ctx, ls.Ref(), ledger.Usage{}); err != nil || r.Released {
		t.Fatalf("Release of the expired lease = %+v, %v; want Released=false", r, err)
	}
}

func TestReleaseOfEndedLeaseBeforeSweep(t *testing.T) {
	f := newFixture(t, ledger.Options{SweepBatch: 1})
	f.keepAlive("r1", time.Hour)
	f.acquire("r1", "a", 10, time.Second)
	b := f.acquire("r1", "b", 10, time.Second)
	f.clock.Advance(time.Second)
	// The release's sweep takes a; b has ended but is still there.
	r, err := f.l.Release(f.ctx, b.Ref(), ledger.Usage{PromptTokens: 5})
	if err != nil || r.Released {
		t.Fatalf("Release(ended b) = %+v, %v; want Released=false", r, err)
	}
	s := f.stats()
	if s.Leases != 0 || s.Counters[ledger.CounterExpired] != 2 || s.Counters[ledger.CounterReleases] != 0 ||
		s.Counters[ledger.CounterActualPrompt] != 0 {
		t.Fatalf("after releasing an ended lease: leases %d, counters %v", s.Leases, s.Counters)
	}
}

func TestSessionDeathRevokesLeases(t *testing.T) {
	f := newFixture(t, ledger.Options{})
	s := f.keepAlive("r1", 2*time.Second)
	if s.LiveHolders != 1 || s.Epoch != f.epoch || !s.RecoveringUntil.IsZero() {
		t.Fatalf("session = %+v", s)
	}
	f.keepAlive("r2", time.Hour)
	a := f.acquire("r1", "a", 100, time.Hour)
	f.acquire("r1", "b", 100, time.Hour)
	other := f.acquire("r2", "c", 100, time.Hour)

	f.clock.Advance(1999 * time.Millisecond)
	if s := f.keepAlive("r1", 2*time.Second); s.LiveHolders != 2 {
		t.Fatalf("live holders = %d, want 2", s.LiveHolders)
	}
	f.clock.Advance(2 * time.Second) // r1's session ends exactly now

	// Reads do not sweep: the leases are still listed and counted.
	if f.leases() != 3 || f.stats().LiveHolders != 1 {
		t.Fatalf("before any sweep: %d leases, %d live holders; want 3, 1", f.leases(), f.stats().LiveHolders)
	}
	_, err := f.l.Acquire(f.ctx, f.request("r1", "d", 1, time.Second))
	wantErr(t, "acquire with a dead session", err, ledger.ErrSessionExpired)
	_, err = f.l.Renew(f.ctx, a.Ref(), time.Second)
	wantErr(t, "renew a revoked lease", err, ledger.ErrLeaseNotFound)
	// The acquire's sweep removed r1's leases and then its session.
	_, err = f.l.Reassert(f.ctx, a, time.Second)
	wantErr(t, "reassert after the session was swept", err, ledger.ErrNoSession)

	if f.leases() != 1 {
		t.Fatalf("after sweeping, %d leases, want only r2's", f.leases())
	}
	if c := f.stats().Counters; c[ledger.CounterRevoked] != 2 {
		t.Fatalf("revoked = %d, want 2", c[ledger.CounterRevoked])
	}
	// The session row is gone with its leases: r1 may start afresh.
	if s := f.keepAlive("r1", time.Second); s.LiveHolders != 2 {
		t.Fatalf("fresh session: live holders %d, want 2", s.LiveHolders)
	}
	if _, err := f.l.Renew(f.ctx, other.Ref(), time.Hour); err != nil {
		t.Fatalf("r2's lease was touched: %v", err)
	}
}

func TestKeepAliveOnDeadSession(t *testing.T) {
	f := newFixture(t, ledger.Options{SweepBatch: 2})
	f.keepAlive("r1", time.Second)
	for _, id := range []ledger.RequestID{"a", "b", "c", "d"} {
		f.acquire("r1", id, 1, time.Hour)
	}
	f.clock.Advance(time.Second)
	// Each refused KeepAlive sweeps 2 items: 4 leases, then the session.
	for i, want := range []error{ledger.ErrSessionExpired, ledger.ErrSessionExpired, ledger.ErrSessionExpired, nil} {
		_, err := f.l.KeepAlive(f.ctx, testPool, "r1", time.Second)
		if !errors.Is(err, want) || (want == nil && err != nil) {
			t.Fatalf("KeepAlive #%d: got %v, want %v", i, err, want)
		}
	}
	if f.leases() != 0 {
		t.Fatalf("%d leases left", f.leases())
	}
	// A dead session without leases is reported once, then swept.
	f.clock.Advance(time.Second)
	_, err := f.l.KeepAlive(f.ctx, testPool, "r1", time.Second)
	wantErr(t, "keepalive after death", err, ledger.ErrSessionExpired)
	f.keepAlive("r1", time.Second)
}

func TestSweepIsBounded(t *testing.T) {
	f := newFixture(t, ledger.Options{SweepBatch: 3})
	spec := testSpec()
	spec.Engines[0].Slots = 100
	if _, err := f.l.Configure(f.ctx, spec); err != nil {
		t.Fatal(err)
	}
	f.keepAlive("r1", time.Hour)
	f.keepAlive("r2", time.Second)
	for i := range 10 {
		f.acquire("r1", ledger.RequestID(rune('a'+i)), 1, time.Second)
	}
	for i := range 4 {
		f.acquire("r2", ledger.RequestID(rune('a'+i)), 1, time.Hour)
	}
	f.clock.Advance(time.Second)

	// A mutating call sweeps at most SweepBatch items.
	f.keepAlive("r1", time.Hour)
	if got := f.leases(); got != 11 {
		t.Fatalf("after one keepalive: %d leases, want 14-3", got)
	}
	steps := []struct {
		max  int
		want ledger.Swept
	}{
		{max: 2, want: ledger.Swept{Expired: 2}},
		{max: 6, want: ledger.Swept{Expired: 5, Revoked: 1}},
		{max: 0, want: ledger.Swept{Revoked: 3}}, // 0: SweepBatch
		{max: 5, want: ledger.Swept{Holders: 1}},
		{max: 5, want: ledger.Swept{}},
	}
	for i, s := range steps {
		got, err := f.l.Sweep(f.ctx, testPool, s.max)
		if err != nil || got != s.want {
			t.Fatalf("Sweep #%d(%d) = %+v, %v; want %+v", i, s.max, got, err, s.want)
		}
	}
	st := f.stats()
	if st.Leases != 0 || st.LiveHolders != 1 || st.Counters[ledger.CounterExpired] != 10 || st.Counters[ledger.CounterRevoked] != 4 {
		t.Fatalf("after sweeping: leases %d, live holders %d, counters %v", st.Leases, st.LiveHolders, st.Counters)
	}
}

func TestRecoveryWindow(t *testing.T) {
	clock := newFakeClock()
	l := New(ledger.Options{RecoveryWindow: 3 * time.Second}, clock)
	defer l.Close()
	ctx := context.Background()
	epoch, err := l.Configure(ctx, testSpec())
	if err != nil {
		t.Fatal(err)
	}
	if want := ledger.Epoch(clock.Now().UnixMicro()); epoch != want {
		t.Fatalf("epoch %d, want the clock in microseconds %d", epoch, want)
	}
	s, err := l.KeepAlive(ctx, testPool, "r1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if want := toMillis(clock.Now()).Add(3 * time.Second); !s.RecoveringUntil.Equal(want) {
		t.Fatalf("recovering until %v, want %v", s.RecoveringUntil, want)
	}
	req := ledger.AcquireRequest{
		Pool: testPool, Candidates: []ledger.EngineID{"e0"}, Tenant: testTenant, Priority: testPrio,
		KVTokens: 10, Slots: 1, Holder: "r1", RequestID: "q", TTL: time.Minute,
	}
	clock.Advance(time.Second)
	_, err = l.Acquire(ctx, req)
	wantReason(t, "acquire while recovering", err, ledger.ReasonRecovering)
	if r := ledger.AsRejection(err); r.RetryAfter != testSpec().RetryAfter || r.Engine != "e0" || r.Epoch != epoch {
		t.Fatalf("rejection %+v, want recovering on e0, retry after the pool's %s (shorter than the 2s left) in epoch %d", r, testSpec().RetryAfter, epoch)
	}
	lost := ledger.Lease{
		ID: ledger.MakeLeaseID(ledger.Fence{Epoch: epoch, Seq: 7}), Fence: ledger.Fence{Epoch: epoch, Seq: 7}, Pool: testPool, Engine: "e0",
		Tenant: testTenant, Priority: testPrio, KVTokens: 1000, Slots: 1, Holder: "r1", RequestID: "old",
	}
	g, err := l.Reassert(ctx, lost, time.Minute)
	if err != nil || !g.Lease.Reasserted || g.Lease.Fence.Seq != 7 {
		t.Fatalf("Reassert while recovering = %+v, %v", g, err)
	}
	if again, err := l.Reassert(ctx, lost, time.Minute); err != nil || !again.Replayed || again.Lease != g.Lease {
		t.Fatalf("second Reassert = %+v, %v; want the same lease, replayed", again, err)
	}
	if _, err := l.Resize(ctx, g.Lease.Ref(), 995); err != nil {
		t.Fatalf("shrink while recovering: %v", err)
	}
	_, err = l.Resize(ctx, g.Lease.Ref(), 996)
	wantReason(t, "grow while recovering", err, ledger.ReasonRecovering)
	if _, err := l.Configure(ctx, testSpec()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	// Past the window, the reasserted lease fills e0: grants go elsewhere,
	// and the sequence continues above the reasserted one.
	req.Candidates = []ledger.EngineID{"e0", "e1"}
	got, err := l.Acquire(ctx, req)
	if err != nil || got.Lease.Engine != "e1" || got.Lease.Fence != (ledger.Fence{Epoch: epoch, Seq: 8}) {
		t.Fatalf("Acquire after the window = %+v, %v; want e1 with fence %d.8", got, err, epoch)
	}
	st, err := l.Stats(ctx, testPool)
	if err != nil || !st.RecoveringUntil.IsZero() || st.Counters[ledger.CounterReasserts] != 1 || st.Counters["rejections:recovering"] != 2 {
		t.Fatalf("Stats = %+v, %v", st, err)
	}
}

func TestStaleTelemetry(t *testing.T) {
	tests := []struct {
		name   string
		policy ledger.StalePolicy
		// want is the outcome of acquiring 500 tokens with 600 observed in
		// use: "" for a grant.
		fresh, stale ledger.Reason
	}{
		{"hold", ledger.StaleHold, ledger.ReasonEngineKV, ledger.ReasonEngineKV},
		{"default is hold", "", ledger.ReasonEngineKV, ledger.ReasonEngineKV},
		{"block", ledger.StaleBlock, ledger.ReasonEngineKV, ledger.ReasonTelemetryStale},
		{"ignore", ledger.StaleIgnore, ledger.ReasonEngineKV, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, ledger.Options{})
			f.keepAlive("r1", time.Hour)
			f.acquire("r1", "mine", 100, time.Hour)
			spec := testSpec()
			spec.Engines[0].StaleAfter = 5 * time.Second
			spec.Engines[0].StalePolicy = tt.policy
			if _, err := f.l.Configure(f.ctx, spec); err != nil {
				t.Fatal(err)
			}
			if !f.engine("e0").Stale {
				t.Fatalf("a never-observed engine with StaleAfter should be stale")
			}
			at := f.clock.Now()
			obs := ledger.Observation{Pool: testPool, Engine: "e0", KVTokensUsed: 700, Running: 3, ObservedAt: at}
			if r, err := f.l.Observe(f.ctx, obs); err != nil || !r.Applied || r.Epoch != f.epoch {
				t.Fatalf("Observe = %+v, %v", r, err)
			}
			if r, err := f.l.Observe(f.ctx, obs); err != nil || r.Applied {
				t.Fatalf("Observe of the same scrape = %+v, %v; want ignored", r, err)
			}
			older := obs
			older.ObservedAt, older.KVTokensUsed = at.Add(-time.Second), 0
			if r, err := f.l.Observe(f.ctx, older); err != nil || r.Applied {
				t.Fatalf("Observe of an older scrape = %+v, %v; want ignored", r, err)
			}
			e := f.engine("e0")
			if e.CorrectionKV != 600 || e.CorrectionSlots != 2 || e.Stale || !e.ObservedAt.Equal(toMillis(at)) {
				t.Fatalf("engine = %+v; want correction 600 KV, 2 slots, fresh", e)
			}
			try := func(id ledger.RequestID, want ledger.Reason) {
				t.Helper()
				_, err := f.l.Acquire(f.ctx, f.request("r1", id, 500, time.Second))
				if want == "" {
					if err != nil {
						t.Fatalf("Acquire %s: %v, want a grant", id, err)
					}
					return
				}
				wantReason(t, "acquire "+string(id), err, want)
			}
			try("fresh", tt.fresh)
			f.clock.Advance(5 * time.Second)
			try("edge", tt.fresh) // stale only after more than StaleAfter
			f.clock.Advance(time.Millisecond)
			if !f.engine("e0").Stale {
				t.Fatalf("engine should be stale")
			}
			try("stale", tt.stale)
		})
	}
}

func TestGrowAtDeadlineAndSessionDeath(t *testing.T) {
	f := newFixture(t, ledger.Options{})
	f.keepAlive("r1", time.Hour)
	f.keepAlive("r2", 5*time.Second)
	a := f.acquire("r1", "q1", 300, 10*time.Second)
	b := f.acquire("r2", "q2", 200, time.Hour)

	// One millisecond before its deadline a lease still grows, and growing
	// leaves the deadline where it was.
	f.clock.Advance(10*time.Second - time.Millisecond)
	r, err := f.l.Grow(f.ctx, a.Ref(), 400)
	if err != nil || r.Lease.KVTokens != 400 || !r.Lease.Deadline.Equal(a.Deadline) {
		t.Fatalf("Grow before the deadline = %+v, %v; want kv 400 and deadline %v", r.Lease, err, a.Deadline)
	}
	// At the deadline it has ended: Grow finds no lease and frees it.
	f.clock.Advance(time.Millisecond)
	_, err = f.l.Grow(f.ctx, a.Ref(), 500)
	wantErr(t, "grow at the deadline", err, ledger.ErrLeaseNotFound)
	// b's holder session died 5s in: its lease ended with it.
	_, err = f.l.Grow(f.ctx, b.Ref(), 300)
	wantErr(t, "grow after the holder's session died", err, ledger.ErrLeaseNotFound)
	if e := f.engine("e0"); e.ReservedKV != 0 || e.Leases != 0 {
		t.Fatalf("engine after both leases ended = %+v, want nothing reserved", e)
	}
	c := f.stats().Counters
	if c[ledger.CounterGrowths] != 1 || c[ledger.CounterGrownKV] != 100 || c[ledger.CounterOvergrowths] != 0 {
		t.Fatalf("counters growths=%d grown_kv=%d overgrowths=%d, want 1, 100, 0",
			c[ledger.CounterGrowths], c[ledger.CounterGrownKV], c[ledger.CounterOvergrowths])
	}
}

// The sweep a call makes is skipped while the pool's SweepFrom lies ahead,
// so every write that makes a lease or session end sooner than all the
// others must lower it: each case leaves the earliest end to such a
// write, then a call after it must sweep what ended.
func TestSweepFromFollowsEveryEnd(t *testing.T) {
	for _, tc := range []struct {
		name        string
		setup       func(f *fixture)
		wantExpired int64
		wantRevoked int64
	}{
		{"renew shortens the deadline", func(f *fixture) {
			ls := f.acquire("r1", "long", 10, 10*time.Second)
			if _, err := f.l.Renew(f.ctx, ls.Ref(), time.Second); err != nil {
				f.t.Fatalf("Renew: %v", err)
			}
		}, 1, 0},
		{"a later lease ends sooner", func(f *fixture) {
			f.acquire("r1", "long", 10, 10*time.Second)
			f.acquire("r1", "short", 10, time.Second)
		}, 1, 0},
		{"a later session dies sooner", func(f *fixture) {
			f.acquire("r1", "long", 10, 10*time.Second)
			f.keepAlive("r2", time.Second)
			f.acquire("r2", "orphan", 10, 10*time.Second)
		}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, ledger.Options{})
			f.keepAlive("r1", time.Hour)
			tc.setup(f)
			before := f.leases()
			f.clock.Advance(999 * time.Millisecond)
			f.acquire("r1", "probe-early", 10, time.Hour)
			if got := f.leases(); got != before+1 {
				t.Fatalf("leases before anything ended = %d, want %d", got, before+1)
			}
			f.clock.Advance(time.Millisecond)
			f.acquire("r1", "probe", 10, time.Hour)
			c := f.stats().Counters
			if c[ledger.CounterExpired] != tc.wantExpired || c[ledger.CounterRevoked] != tc.wantRevoked {
				t.Fatalf("after the end, a call swept expired %d revoked %d, want %d and %d",
					c[ledger.CounterExpired], c[ledger.CounterRevoked], tc.wantExpired, tc.wantRevoked)
			}
			if got, want := f.leases(), before+2-int(tc.wantExpired+tc.wantRevoked); got != want {
				t.Fatalf("leases after the sweep = %d, want %d", got, want)
			}
		})
	}
}
