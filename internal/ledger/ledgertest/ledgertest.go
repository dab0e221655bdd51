// Package ledgertest is the conformance suite every ledger backend passes
// unchanged: the limits, idempotence, expiry, epochs, recovery after a new
// epoch (per engine, on telemetry, with a partitioned holder), what Reassert may
// claim and its confirmation by telemetry, bad arguments, elastic
// reservations (modes, growth headroom, Grow, reported capacity, completion
// counters), the circuit breaker per engine, tenants' rate budgets, a concurrent safety check and a linearizability check of
// recorded histories, both with growth.
//
// A backend's test calls Run with a Backend that makes isolated, empty
// ledgers. The suite cannot fake time (backends use their own clock, such as
// Redis TIME), so it uses real short durations and reads the ledger's clock
// through PoolStats.Now when it must wait for a deadline to pass. Every
// subtest builds its own ledger and pool; the whole suite takes well under
// half a minute on a local store.
package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Backend makes ledgers for the suite.
type Backend struct {
	// Name labels the backend in test output.
	Name string
	// New returns an empty ledger isolated from every other ledger New
	// returned (its own store, key prefix or data directory). The suite
	// closes it; New may also register its own cleanup.
	New func(t testing.TB, opts ledger.Options) ledger.Ledger
	// Lose simulates the loss of all of l's state (a store restarted without
	// persistence, a flushed Redis, a wiped etcd, a restarted reserver) and
	// returns the ledger to use afterwards, which may be l itself. A nil Lose
	// skips the subtests that need it.
	Lose func(t testing.TB, l ledger.Ledger) ledger.Ledger
	// MinTTL is the shortest lease or session TTL the backend honours
	// exactly (etcd leases count whole seconds); the suite raises shorter
	// TTLs to it and waits for expiry accordingly: it allows a lease,
	// session or recovery window to end up to 2*MinTTL after its nominal
	// time (ending late is safe, ending early never is). 0 means 1ms, and
	// then everything must end on time to the millisecond.
	MinTTL time.Duration
	// BackgroundSweep says the backend also ends expired leases and dead
	// sessions on its own, between calls (the contract allows it). Sweep may
	// then find less to do than the suite expects, and a dead session may be
	// fully swept before the suite gets to call KeepAlive on it. The suite
	// then checks the outcome rather than which call did the work: capacity
	// is freed, the expired and revoked counters reach their totals, every
	// Sweep stays within its bound, and a swept holder may start afresh.
	// Without it every expiry must be left to Sweep and the mutating calls,
	// and the suite holds each Sweep to exact counts.
	BackgroundSweep bool
	// Groups, when set, runs only the groups of the suite it names (Limits,
	// Idempotence, ...: the subtests of Run), for a store topology slow
	// enough that the whole suite would take minutes; nil runs them all.
	Groups []string
}

// Run runs the whole suite against b. Subtests run one after another: most
// of them wait on real deadlines, which parallel load would make flaky.
func Run(t *testing.T, b Backend) {
	t.Helper()
	if b.New == nil {
		t.Fatal("ledgertest: Backend.New is nil")
	}
	t.Logf("ledgertest: running the conformance suite against backend %q", b.Name)
	s := &suite{b: b}
	groups := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"Limits", s.testLimits},
		{"Telemetry", s.testTelemetry},
		{"Idempotence", s.testIdempotence},
		{"Leases", s.testLeases},
		{"Sessions", s.testSessions},
		{"Epochs", s.testEpochs},
		{"Recovery", s.testRecovery},
		{"Reassert", s.testReassert},
		{"Audit", s.testAudit},
		{"BadArguments", s.testBadArguments},
		{"Elastic", s.testElastic},
		{"Breaker", s.testBreaker},
		{"Rates", s.testRates},
		{"Concurrency", s.testConcurrency},
		{"Linearizability", s.testLinearizability},
	}
	for _, g := range groups {
		if b.Groups != nil && !slices.Contains(b.Groups, g.name) {
			continue
		}
		t.Run(g.name, g.run)
	}
}

// suite carries the backend through the subtests.
type suite struct {
	b Backend
	// backendFailures counts undefined errors retried in the concurrent
	// subtests, for the log.
	backendFailures atomic.Int64
}

// Names used throughout the suite.
const (
	pool ledger.PoolID = "p"

	e1 ledger.EngineID = "e1"
	e2 ledger.EngineID = "e2"
	e3 ledger.EngineID = "e3"

	h1 ledger.HolderID = "h1"
	h2 ledger.HolderID = "h2"

	tenantAll ledger.TenantID     = "t1" // kv_share 1: never binds
	prioStd   ledger.PriorityName = "std"

	// longTTL is long enough that nothing expires during a subtest unless
	// the subtest means it to.
	longTTL = time.Minute
	// retryHint is the RetryAfter every default spec configures, so the suite
	// can tell a backend's own default from the configured hint.
	retryHint = 250 * time.Millisecond
	// waitSlack bounds how long past a ledger-clock instant the suite waits
	// before it gives up.
	waitSlack = 5 * time.Second
)

// noWindow are the options of every subtest that does not test epochs: no
// recovery window, so a fresh pool grants at once.
var noWindow = ledger.Options{RecoveryWindow: -1}

// engine returns an engine spec.
func engine(id ledger.EngineID, kv, slots int64) ledger.EngineSpec {
	return ledger.EngineSpec{ID: id, URL: "http://" + string(id) + ".invalid", KVTokens: kv, Slots: slots}
}

// poolSpec returns a spec for pool with the given engines, tenant t1
// (kv_share 1), priority std (max_fill 1) and RetryAfter retryHint.
func poolSpec(name ledger.PoolID, engines ...ledger.EngineSpec) ledger.PoolSpec {
	return ledger.PoolSpec{
		Name:       name,
		Engines:    engines,
		Tenants:    []ledger.TenantSpec{{Name: tenantAll, KVShare: 1}},
		Priorities: []ledger.PrioritySpec{{Name: prioStd, MaxFill: 1}},
		RetryAfter: retryHint,
	}
}

// fixture is one subtest's ledger with one configured pool.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	l     ledger.Ledger
	spec  ledger.PoolSpec
	epoch ledger.Epoch
	seq   int           // request-id counter
	min   time.Duration // Backend.MinTTL
	bg    bool          // Backend.BackgroundSweep
}

// ttl returns d raised to the backend's MinTTL: every short lease or session
// TTL goes through it, and every wait reads the resulting deadline from the
// ledger.
func (f *fixture) ttl(d time.Duration) time.Duration {
	return max(d, f.min)
}

// slack is how late the backend may end a lease, session or window.
func (f *fixture) slack() time.Duration { return 2 * f.min }

// open returns a new ledger that the test closes at cleanup.
func (s *suite) open(t *testing.T, opts ledger.Options) ledger.Ledger {
	t.Helper()
	l := s.b.New(t, opts)
	if l == nil {
		t.Fatal("Backend.New returned a nil ledger")
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// setup opens a ledger with opts, configures spec and starts sessions for h1
// and h2.
func (s *suite) setup(t *testing.T, spec ledger.PoolSpec, opts ledger.Options) *fixture {
	t.Helper()
	f := &fixture{t: t, ctx: t.Context(), l: s.open(t, opts), spec: spec, min: s.b.MinTTL, bg: s.b.BackgroundSweep}
	f.configure(spec)
	f.keepAlive(h1, longTTL)
	f.keepAlive(h2, longTTL)
	return f
}

// configure applies spec and records the epoch.
func (f *fixture) configure(spec ledger.PoolSpec) ledger.Epoch {
	f.t.Helper()
	ep, err := f.l.Configure(f.ctx, spec)
	if err != nil {
		f.t.Fatalf("Configure(%s) error = %v, want nil", spec.Name, err)
	}
	if ep == ledger.NoEpoch {
		f.t.Fatalf("Configure(%s) epoch = 0, want non-zero", spec.Name)
	}
	if spec.Name == f.spec.Name {
		f.spec, f.epoch = spec, ep
	}
	return ep
}

func (f *fixture) keepAlive(h ledger.HolderID, ttl time.Duration) ledger.Session {
	f.t.Helper()
	sess, err := f.l.KeepAlive(f.ctx, f.spec.Name, h, ttl)
	if err != nil {
		f.t.Fatalf("KeepAlive(%s, %s, %s) error = %v, want nil", f.spec.Name, h, ttl, err)
	}
	if sess.Epoch != f.epoch {
		f.t.Errorf("KeepAlive(%s) epoch = %d, want %d", h, sess.Epoch, f.epoch)
	}
	return sess
}

// req returns an acquire request in the fixture's pool for tenant t1 and
// priority std with a fresh request id and a long TTL.
func (f *fixture) req(h ledger.HolderID, kv, slots int64, cands ...ledger.EngineID) ledger.AcquireRequest {
	f.seq++
	return ledger.AcquireRequest{
		Pool: f.spec.Name, Candidates: cands, Tenant: tenantAll, Priority: prioStd,
		KVTokens: kv, Slots: slots, Holder: h,
		RequestID: ledger.RequestID(fmt.Sprintf("r%d", f.seq)), TTL: longTTL,
	}
}

// shortReq is req with a short TTL, d raised to the backend's MinTTL.
func (f *fixture) shortReq(d time.Duration, h ledger.HolderID, kv, slots int64, cands ...ledger.EngineID) ledger.AcquireRequest {
	r := f.req(h, kv, slots, cands...)
	r.TTL = f.ttl(d)
	return r
}

func describe(r ledger.AcquireRequest) string {
	return fmt.Sprintf("%s kv=%d slots=%d on %v tenant=%s priority=%s holder=%s req=%s",
		r.Pool, r.KVTokens, r.Slots, r.Candidates, r.Tenant, r.Priority, r.Holder, r.RequestID)
}

// acquire wants a fresh grant on engine want ("" accepts any candidate) and
// checks the lease against the request.
func (f *fixture) acquire(r ledger.AcquireRequest, want ledger.EngineID) ledger.Lease {
	f.t.Helper()
	g, err := f.l.Acquire(f.ctx, r)
	if err != nil {
		f.t.Fatalf("Acquire(%s) error = %v, want a grant", describe(r), err)
	}
	if g.Replayed {
		f.t.Errorf("Acquire(%s) Replayed = true, want false for a new request id", describe(r))
	}
	if want != "" && g.Lease.Engine != want {
		f.t.Errorf("Acquire(%s) granted on %s, want %s", describe(r), g.Lease.Engine, want)
	}
	if g.Epoch != f.epoch {
		f.t.Errorf("Acquire(%s) epoch = %d, want %d", describe(r), g.Epoch, f.epoch)
	}
	f.checkLease("Acquire", g.Lease, r)
	return g.Lease
}

// checkLease compares a granted lease with its request.
func (f *fixture) checkLease(op string, l ledger.Lease, r ledger.AcquireRequest) {
	f.t.Helper()
	got := fmt.Sprintf("pool=%s tenant=%s priority=%s kv=%d slots=%d holder=%s req=%s reasserted=%v",
		l.Pool, l.Tenant, l.Priority, l.KVTokens, l.Slots, l.Holder, l.RequestID, l.Reasserted)
	want := fmt.Sprintf("pool=%s tenant=%s priority=%s kv=%d slots=%d holder=%s req=%s reasserted=false",
		r.Pool, r.Tenant, r.Priority, r.KVTokens, r.Slots, r.Holder, r.RequestID)
	if got != want {
		f.t.Errorf("%s lease = %s, want %s", op, got, want)
	}
	if !contains(r.Candidates, l.Engine) {
		f.t.Errorf("%s lease engine = %s, want one of %v", op, l.Engine, r.Candidates)
	}
	fence, err := ledger.ParseLeaseID(l.ID)
	if err != nil {
		f.t.Errorf("%s lease id %q does not parse: %v", op, l.ID, err)
	} else if fence != l.Fence {
		f.t.Errorf("%s lease id %q encodes fence %s, want the lease's fence %s", op, l.ID, fence, l.Fence)
	}
	if l.Fence.Epoch != f.epoch {
		f.t.Errorf("%s lease fence epoch = %d, want %d", op, l.Fence.Epoch, f.epoch)
	}
	if l.Created.IsZero() {
		f.t.Errorf("%s lease Created is zero, want the ledger time of the grant", op)
	}
	if d := l.Deadline.Sub(l.Created); d < r.TTL-time.Millisecond || d > r.TTL+time.Millisecond {
		f.t.Errorf("%s lease Deadline-Created = %s, want the TTL %s (±1ms)", op, d, r.TTL)
	}
}

func contains[T comparable](xs []T, x T) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// reject wants Acquire to refuse r with reason on engine (empty for
// pool-wide reasons) and checks the rejection's epoch and retry hint.
func (f *fixture) reject(r ledger.AcquireRequest, reason ledger.Reason, eng ledger.EngineID) *ledger.Rejection {
	f.t.Helper()
	g, err := f.l.Acquire(f.ctx, r)
	if err == nil {
		f.t.Fatalf("Acquire(%s) granted lease %s on %s, want rejection %s", describe(r), g.Lease.ID, g.Lease.Engine, reason)
	}
	return f.checkRejection("Acquire("+describe(r)+")", err, reason, eng)
}

// checkRejection checks that err is the wanted *ledger.Rejection.
func (f *fixture) checkRejection(op string, err error, reason ledger.Reason, eng ledger.EngineID) *ledger.Rejection {
	f.t.Helper()
	if !errors.Is(err, ledger.ErrRejected) {
		f.t.Fatalf("%s error = %v, want errors.Is(err, ledger.ErrRejected) with reason %s", op, err, reason)
	}
	rej := ledger.AsRejection(err)
	if rej == nil {
		f.t.Fatalf("%s error = %v (%T), want a *ledger.Rejection in its chain", op, err, err)
	}
	if rej.Reason != reason || rej.Engine != eng {
		f.t.Errorf("%s rejection = %s on %q, want %s on %q", op, rej.Reason, rej.Engine, reason, eng)
	}
	if rej.Epoch != f.epoch {
		f.t.Errorf("%s rejection epoch = %d, want %d", op, rej.Epoch, f.epoch)
	}
	switch {
	case rej.Reason == ledger.ReasonTooLarge:
		if rej.RetryAfter != 0 {
			f.t.Errorf("%s too_large RetryAfter = %s, want 0 (never fits: no retry hint)", op, rej.RetryAfter)
		}
	case rej.Reason == ledger.ReasonRecovering:
		if rej.RetryAfter <= 0 {
			f.t.Errorf("%s recovering RetryAfter = %s, want the remaining window (> 0)", op, rej.RetryAfter)
		}
	default:
		want := f.spec.RetryAfter
		if want == 0 {
			want = ledger.DefaultRetryAfter
		}
		if rej.RetryAfter != want {
			f.t.Errorf("%s %s RetryAfter = %s, want the pool's hint %s", op, rej.Reason, rej.RetryAfter, want)
		}
	}
	return rej
}

// wantErr checks that err matches target with errors.Is.
func wantErr(t testing.TB, op string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s error = %v, want errors.Is(err, %v)", op, err, target)
	}
}

func (f *fixture) release(l ledger.Lease) {
	f.t.Helper()
	rel, err := f.l.Release(f.ctx, l.Ref(), ledger.Usage{})
	if err != nil {
		f.t.Fatalf("Release(%s) error = %v, want nil", l.ID, err)
	}
	if !rel.Released {
		f.t.Errorf("Release(%s) Released = false, want true for an outstanding lease", l.ID)
	}
}

func (f *fixture) stats() ledger.PoolStats {
	f.t.Helper()
	return f.statsOf(f.spec.Name)
}

func (f *fixture) statsOf(p ledger.PoolID) ledger.PoolStats {
	f.t.Helper()
	st, err := f.l.Stats(f.ctx, p)
	if err != nil {
		f.t.Fatalf("Stats(%s) error = %v, want nil", p, err)
	}
	return st
}

// engineStats returns id's stats in st; ok is false if it is absent.
func engineStats(st ledger.PoolStats, id ledger.EngineID) (ledger.EngineStats, bool) {
	for _, e := range st.Engines {
		if e.Spec.ID == id {
			return e, true
		}
	}
	return ledger.EngineStats{}, false
}

func tenantStats(st ledger.PoolStats, id ledger.TenantID) (ledger.TenantStats, bool) {
	for _, x := range st.Tenants {
		if x.Spec.Name == id {
			return x, true
		}
	}
	return ledger.TenantStats{}, false
}

// wantCounters checks the pool's counters named in want (a name absent
// from Counters reads 0); why, if not empty, explains the numbers in a
// failure.
func (f *fixture) wantCounters(why string, want map[string]int64) {
	f.t.Helper()
	c := f.stats().Counters
	if why != "" {
		why = " (" + why + ")"
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if got := c[name]; got != want[name] {
			f.t.Errorf("Counters[%s] = %d, want %d%s", name, got, want[name], why)
		}
	}
}

// wantReserved checks an engine's reserved KV tokens, slots and lease count.
func (f *fixture) wantReserved(id ledger.EngineID, kv, slots, leases int64) {
	f.t.Helper()
	st := f.stats()
	e, ok := engineStats(st, id)
	if !ok {
		f.t.Fatalf("Stats(%s) has no engine %s", st.Pool, id)
	}
	if e.ReservedKV != kv || e.ReservedSlots != slots || e.Leases != leases {
		f.t.Errorf("Stats engine %s reserved kv=%d slots=%d leases=%d, want kv=%d slots=%d leases=%d",
			id, e.ReservedKV, e.ReservedSlots, e.Leases, kv, slots, leases)
	}
}

// list returns the leases matching flt.
func (f *fixture) list(flt ledger.Filter) []ledger.Lease {
	f.t.Helper()
	ls, err := f.l.List(f.ctx, flt)
	if err != nil {
		f.t.Fatalf("List(%+v) error = %v, want nil", flt, err)
	}
	return ls
}

// ledgerNow returns the ledger's clock, read through Stats.
func (f *fixture) ledgerNow() time.Time {
	f.t.Helper()
	now := f.stats().Now
	if now.IsZero() {
		f.t.Fatalf("Stats(%s).Now is zero, want the ledger clock", f.spec.Name)
	}
	return now
}

// waitPast polls the ledger clock until a deadline, session expiry or
// recovery window ending at when must have ended: past when by the
// backend's slack. The ledger works in milliseconds, so it waits one more
// millisecond however a backend rounds.
func (f *fixture) waitPast(when time.Time) {
	f.t.Helper()
	when = when.Add(f.slack() + time.Millisecond)
	limit := time.Now().Add(time.Until(when)).Add(waitSlack)
	for {
		now := f.ledgerNow()
		if now.After(when) {
			return
		}
		if time.Now().After(limit) {
			f.t.Fatalf("ledger clock %s did not pass %s within %s", now.Format(time.StampMilli), when.Format(time.StampMilli), waitSlack)
		}
		d := when.Sub(now) + time.Millisecond
		if d > 50*time.Millisecond {
			d = 50 * time.Millisecond
		}
		time.Sleep(d)
	}
}

// sweepAll calls Sweep until it removes nothing more and returns what the
// calls removed (on a BackgroundSweep backend, a lower bound of what was
// due).
func (f *fixture) sweepAll() ledger.Swept {
	f.t.Helper()
	var total ledger.Swept
	for range 1000 {
		sw, err := f.l.Sweep(f.ctx, f.spec.Name, 64)
		if err != nil {
			f.t.Fatalf("Sweep(%s, 64) error = %v, want nil", f.spec.Name, err)
		}
		total.Expired += sw.Expired
		total.Revoked += sw.Revoked
		total.Holders += sw.Holders
		if sw == (ledger.Swept{}) {
			return total
		}
	}
	f.t.Fatalf("Sweep(%s) still removing after 1000 calls", f.spec.Name)
	return total
}

// maxAttempts bounds the attempts of one call in the concurrent subtests.
const maxAttempts = 10

// definedErrors are the errors the contract gives a meaning; any other error
// is a transport or backend failure whose outcome is unknown.
var definedErrors = []error{
	ledger.ErrRejected, ledger.ErrInvalidArgument, ledger.ErrUnknownPool, ledger.ErrUnknownEngine,
	ledger.ErrUnknownTenant, ledger.ErrUnknownPriority, ledger.ErrNoSession, ledger.ErrSessionExpired,
	ledger.ErrLeaseNotFound, ledger.ErrNotHolder, ledger.ErrClosed, ledger.ErrFenceExhausted,
}

func defined(err error) bool {
	for _, d := range definedErrors {
		if errors.Is(err, d) {
			return true
		}
	}
	return false
}

// retry calls op until it succeeds or fails with a defined error, at most
// maxAttempts times, as a router would: after a backend failure the outcome
// is unknown and the contract makes every call safe to retry (Acquire on its
// request id, Release on its lease id, Renew and Resize to absolute values).
// unknown reports whether some attempt failed that way; the count of such
// attempts is added to *failures.
func retry[T any](failures *atomic.Int64, op func() (T, error)) (v T, unknown bool, err error) {
	for i := range maxAttempts {
		v, err = op()
		if err == nil || defined(err) {
			return v, unknown, err
		}
		unknown = true
		failures.Add(1)
		if i < maxAttempts-1 {
			time.Sleep(time.Duration(1+rand.IntN(1<<min(i, 5))) * time.Millisecond)
		}
	}
	return v, unknown, err
}
