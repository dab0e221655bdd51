package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/etcd"
	"github.com/leasehold/leasehold/internal/testutil/etcdserver"
)

func spec(kv, slots int64) ledger.PoolSpec {
	return ledger.PoolSpec{
		Name:       "p",
		Engines:    []ledger.EngineSpec{{ID: "e1", KVTokens: kv, Slots: slots}},
		Tenants:    []ledger.TenantSpec{{Name: "t", KVShare: 1}},
		Priorities: []ledger.PrioritySpec{{Name: "std", MaxFill: 1}},
	}
}

func req(holder ledger.HolderID, id string, kv int64, ttl time.Duration) ledger.AcquireRequest {
	return ledger.AcquireRequest{Pool: "p", Candidates: []ledger.EngineID{"e1"}, Tenant: "t", Priority: "std",
		KVTokens: kv, Slots: 1, Holder: holder, RequestID: ledger.RequestID(id), TTL: ttl}
}

func newLedger(t *testing.T, srv *etcdserver.Server, opts etcd.Options) *etcd.Ledger {
	t.Helper()
	l, err := etcd.New(srv.Client(t), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func must[T any](t *testing.T, what string) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

func reserved(t *testing.T, l ledger.Ledger) (kv, slots, leases int64) {
	t.Helper()
	st := must[ledger.PoolStats](t, "Stats")(l.Stats(t.Context(), "p"))
	for _, e := range st.Engines {
		kv, slots, leases = kv+e.ReservedKV, slots+e.ReservedSlots, leases+e.Leases
	}
	return kv, slots, leases
}

// TestTwoRoutersLastCapacity: two ledgers (two clients, as two router
// processes) race for ten slots; exactly ten grants happen.
func TestTwoRoutersLastCapacity(t *testing.T) {
	srv := etcdserver.Start(t, t.TempDir())
	opts := etcd.Options{Options: ledger.Options{RecoveryWindow: -1}, Prefix: "/race/"}
	a, b := newLedger(t, srv, opts), newLedger(t, srv, opts)
	ctx := t.Context()
	must[ledger.Epoch](t, "Configure")(a.Configure(ctx, spec(1000, 10)))
	for _, l := range []*etcd.Ledger{a, b} {
		must[ledger.Session](t, "KeepAlive")(l.KeepAlive(ctx, "p", "h", time.Minute))
	}
	var mu sync.Mutex
	granted := 0
	var wg sync.WaitGroup
	for i := range 40 {
		l := a
		if i%2 == 1 {
			l = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := l.Acquire(ctx, req("h", fmt.Sprint(i), 1, time.Minute))
			switch {
			case err == nil:
				mu.Lock()
				granted++
				mu.Unlock()
			case !errors.Is(err, ledger.ErrRejected):
				t.Errorf("Acquire %d: %v, want a grant or a rejection", i, err)
			}
		}()
	}
	wg.Wait()
	if granted != 10 {
		t.Errorf("granted %d leases on 10 slots, want 10", granted)
	}
	if _, slots, leases := reserved(t, b); slots != 10 || leases != 10 {
		t.Errorf("Stats reserved slots=%d leases=%d, want 10 and 10", slots, leases)
	}
}

// TestWatcherFreesExpired: with the watch on, an expired lease and a dead
// session's leases are freed without any call; the delay past the nominal
// deadline is logged.
func TestWatcherFreesExpired(t *testing.T) {
	srv := etcdserver.Start(t, t.TempDir())
	l := newLedger(t, srv, etcd.Options{Options: ledger.Options{RecoveryWindow: -1}, LeaseSlack: -1})
	ctx := t.Context()
	must[ledger.Epoch](t, "Configure")(l.Configure(ctx, spec(1000, 10)))
	must[ledger.Session](t, "KeepAlive")(l.KeepAlive(ctx, "p", "h", time.Minute))
	sess := must[ledger.Session](t, "KeepAlive")(l.KeepAlive(ctx, "p", "dies", time.Second))
	g := must[ledger.Grant](t, "Acquire")(l.Acquire(ctx, req("h", "a", 100, time.Second)))
	must[ledger.Grant](t, "Acquire")(l.Acquire(ctx, req("dies", "b", 200, time.Hour)))

	wait := func(what string, cond func() bool, from time.Time) {
		t.Helper()
		for !cond() {
			if time.Since(from) > 5*time.Second {
				t.Fatalf("%s: not freed 5s after its deadline", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("%s freed %s after its nominal time", what, time.Since(from).Round(time.Millisecond))
	}
	wait("expired lease", func() bool {
		ls := must[[]ledger.Lease](t, "List")(l.List(ctx, ledger.Filter{Holder: "h"}))
		return len(ls) == 0
	}, g.Lease.Deadline)
	wait("dead session's lease", func() bool {
		kv, _, _ := reserved(t, l)
		return kv == 0
	}, sess.Expires)
	st := must[ledger.PoolStats](t, "Stats")(l.Stats(ctx, "p"))
	if st.Counters[ledger.CounterExpired] != 1 || st.Counters[ledger.CounterRevoked] != 1 || st.LiveHolders != 1 {
		t.Errorf("Stats expired=%d revoked=%d live=%d, want 1, 1, 1", st.Counters[ledger.CounterExpired], st.Counters[ledger.CounterRevoked], st.LiveHolders)
	}
	// The dead holder was removed: its id may start afresh.
	must[ledger.Session](t, "KeepAlive(dies)")(l.KeepAlive(ctx, "p", "dies", time.Minute))
}

// TestRestartKeepsGrants stops and restarts etcd (data kept) while routers
// acquire: callers retry failed calls with the same request id, and in the
// end every request holds exactly one lease and Stats matches the grants.
func TestRestartKeepsGrants(t *testing.T) {
	srv := etcdserver.Start(t, t.TempDir())
	l := newLedger(t, srv, etcd.Options{Options: ledger.Options{RecoveryWindow: -1}})
	ctx := t.Context()
	must[ledger.Epoch](t, "Configure")(l.Configure(ctx, spec(1_000_000, 1000)))
	must[ledger.Session](t, "KeepAlive")(l.KeepAlive(ctx, "p", "h", time.Minute))

	const workers, perWorker = 8, 15
	var mu sync.Mutex
	leases := map[ledger.RequestID]ledger.LeaseID{}
	var retried int
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range perWorker {
				r := req("h", fmt.Sprintf("w%d-%d", w, i), 10, time.Minute)
				for attempt := 0; ; attempt++ {
					cctx, cancel := context.WithTimeout(ctx, time.Second)
					g, err := l.Acquire(cctx, r)
					cancel()
					if err == nil {
						mu.Lock()
						if prev, ok := leases[r.RequestID]; ok && prev != g.Lease.ID {
							t.Errorf("request %s got lease %s, earlier %s", r.RequestID, g.Lease.ID, prev)
						}
						leases[r.RequestID] = g.Lease.ID
						if attempt > 0 {
							retried++
						}
						mu.Unlock()
						break
					}
					if attempt > 300 {
						t.Errorf("Acquire %s: still failing: %v", r.RequestID, err)
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	close(start)
	time.Sleep(30 * time.Millisecond)
	srv.Restart()
	wg.Wait()
	t.Logf("%d grants, %d after retries across the restart", len(leases), retried)
	if len(leases) != workers*perWorker {
		t.Fatalf("granted %d requests, want %d", len(leases), workers*perWorker)
	}
	ls := must[[]ledger.Lease](t, "List")(l.List(ctx, ledger.Filter{Pool: "p"}))
	if len(ls) != len(leases) {
		t.Errorf("List has %d leases, want %d (one per request)", len(ls), len(leases))
	}
	for _, x := range ls {
		if leases[x.RequestID] != x.ID {
			t.Errorf("List lease %s for %s, want %s", x.ID, x.RequestID, leases[x.RequestID])
		}
	}
	kv, slots, n := reserved(t, l)
	if kv != 10*int64(len(leases)) || slots != int64(len(leases)) || n != int64(len(leases)) {
		t.Errorf("Stats reserved kv=%d slots=%d leases=%d, want %d, %d, %d", kv, slots, n, 10*len(leases), len(leases), len(leases))
	}
	// The session survived the restart: its etcd lease is persisted.
	must[ledger.Session](t, "KeepAlive after restart")(l.KeepAlive(ctx, "p", "h", time.Minute))
	// Retrying every request after the restart replays, reserving nothing.
	for rid := range leases {
		g := must[ledger.Grant](t, "replay")(l.Acquire(ctx, req("h", string(rid), 10, time.Minute)))
		if !g.Replayed || g.Lease.ID != leases[rid] {
			t.Errorf("replay of %s = %s replayed=%v, want %s replayed", rid, g.Lease.ID, g.Replayed, leases[rid])
		}
	}
	if _, _, n2 := reserved(t, l); n2 != n {
		t.Errorf("leases after replays = %d, want %d", n2, n)
	}
}

// TestWipedDataDir wipes etcd's data dir: the pool is unknown until
// configured again, with a greater epoch and a recovery window during which
// the holder re-asserts what it holds and new grants wait.
func TestWipedDataDir(t *testing.T) {
	srv := etcdserver.Start(t, t.TempDir())
	cli := srv.Client(t)
	l, err := etcd.New(cli, etcd.Options{Options: ledger.Options{RecoveryWindow: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := t.Context()
	ep1 := must[ledger.Epoch](t, "Configure")(l.Configure(ctx, spec(1000, 10)))
	must[ledger.Session](t, "KeepAlive")(l.KeepAlive(ctx, "p", "h", time.Minute))
	var rej *ledger.Rejection
	if _, err := l.Acquire(ctx, req("h", "early", 1, time.Minute)); !errors.As(err, &rej) || rej.Reason != ledger.ReasonRecovering {
		t.Fatalf("Acquire in the first window: %v, want %s", err, ledger.ReasonRecovering)
	}
	var held ledger.Lease
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		g, err := l.Acquire(ctx, req("h", "held", 600, time.Minute))
		if err == nil {
			held = g.Lease
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire after the first window: %v", err)
		}
	}

	t0 := time.Now()
	srv.Wipe()
	srv.WaitReady(t, cli)
	t.Logf("wiped and ready in %s", time.Since(t0).Round(time.Millisecond))
	if _, err := l.Acquire(ctx, req("h", "x", 1, time.Minute)); !errors.Is(err, ledger.ErrUnknownPool) {
		t.Fatalf("Acquire after wipe: %v, want ErrUnknownPool", err)
	}
	t.Logf("unknown pool after %s", time.Since(t0).Round(time.Millisecond))
	ep2 := must[ledger.Epoch](t, "Configure after wipe")(l.Configure(ctx, spec(1000, 10)))
	if ep2 <= ep1 {
		t.Fatalf("epoch after wipe = %d, want > %d", ep2, ep1)
	}
	sess := must[ledger.Session](t, "KeepAlive after wipe")(l.KeepAlive(ctx, "p", "h", time.Minute))
	if sess.Epoch != ep2 || sess.RecoveringUntil.IsZero() {
		t.Errorf("session epoch %d recovering until %v, want %d and a window", sess.Epoch, sess.RecoveringUntil, ep2)
	}
	if _, err := l.Acquire(ctx, req("h", "new", 1, time.Minute)); !errors.As(err, &rej) || rej.Reason != ledger.ReasonRecovering || rej.RetryAfter <= 0 {
		t.Fatalf("Acquire in the recovery window: %v, want %s with a hint", err, ledger.ReasonRecovering)
	}
	t.Logf("recovering after %s", time.Since(t0).Round(time.Millisecond))
	g := must[ledger.Grant](t, "Reassert")(l.Reassert(ctx, held, time.Minute))
	t.Logf("reasserted after %s", time.Since(t0).Round(time.Millisecond))
	if !g.Lease.Reasserted || g.Lease.ID != held.ID || g.Epoch != ep2 {
		t.Errorf("Reassert = %s reasserted=%v epoch %d, want %s reasserted in %d", g.Lease.ID, g.Lease.Reasserted, g.Epoch, held.ID, ep2)
	}
	if kv, _, _ := reserved(t, l); kv != 600 {
		t.Errorf("reserved after reassert = %d, want 600", kv)
	}
	// Nothing observes e1: it takes grants again when the window ends,
	// and the reasserted load counts (the tenant's quota is the pool's
	// 1000 KV tokens).
	var g2 ledger.Grant
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		g2, err = l.Acquire(ctx, req("h", "fits", 400, time.Minute))
		if err == nil {
			break
		}
		if !errors.As(err, &rej) || rej.Reason != ledger.ReasonRecovering || time.Now().After(deadline) {
			t.Fatalf("Acquire after the second window: %v, want a grant", err)
		}
	}
	if _, err := l.Acquire(ctx, req("h", "after", 1, time.Minute)); !errors.As(err, &rej) || rej.Reason != ledger.ReasonTenantKV {
		t.Fatalf("Acquire past the quota after the window: %v, want %s", err, ledger.ReasonTenantKV)
	}
	if !held.Fence.Less(g2.Lease.Fence) {
		t.Errorf("new fence %s, want after the reasserted %s", g2.Lease.Fence, held.Fence)
	}
}

func TestParseURL(t *testing.T) {
	cases := []struct {
		name, url, prefix string
		endpoints         []string
		bad               bool
	}{
		{name: "one", url: "etcd://127.0.0.1:2379", endpoints: []string{"http://127.0.0.1:2379"}},
		{name: "several with prefix", url: "etcd://a:1,b:2/lh/", prefix: "/lh/", endpoints: []string{"http://a:1", "http://b:2"}},
		{name: "scheme", url: "redis://a:1", bad: true},
		{name: "no port", url: "etcd://a", bad: true},
		{name: "empty host", url: "etcd://a:1,", bad: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eps, prefix, err := etcd.ParseURL(tc.url)
			if tc.bad {
				if !errors.Is(err, ledger.ErrInvalidArgument) {
					t.Errorf("ParseURL(%q) error = %v, want ErrInvalidArgument", tc.url, err)
				}
				return
			}
			if err != nil || fmt.Sprint(eps) != fmt.Sprint(tc.endpoints) || prefix != tc.prefix {
				t.Errorf("ParseURL(%q) = %v %q %v, want %v %q", tc.url, eps, prefix, err, tc.endpoints, tc.prefix)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	srv := etcdserver.Start(t, t.TempDir())
	l, err := etcd.Open("etcd://"+srv.HostPort()+"/open/", etcd.Options{Options: ledger.Options{RecoveryWindow: -1}})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if _, err := l.Configure(t.Context(), spec(10, 1)); err != nil {
		t.Errorf("Configure: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := l.Pools(t.Context()); !errors.Is(err, ledger.ErrClosed) {
		t.Errorf("Pools after Close: %v, want ErrClosed", err)
	}
}

// TestRecoveryWindowReported: the recovery window ends when etcd expires its
// marker, which may be up to about a second after the nominal end. What
// Stats reports must agree with what Acquire decides: once Stats says the
// window is over, Acquire does not say "recovering"; and a router that
// waits each rejection's RetryAfter is not sent into a hot retry loop while
// the marker outlives the nominal end.
func TestRecoveryWindowReported(t *testing.T) {
	srv := etcdserver.Start(t, t.TempDir())
	l := newLedger(t, srv, etcd.Options{Options: ledger.Options{RecoveryWindow: 800 * time.Millisecond}})
	ctx := t.Context()
	must[ledger.Epoch](t, "Configure")(l.Configure(ctx, spec(1000, 10)))
	sess := must[ledger.Session](t, "KeepAlive")(l.KeepAlive(ctx, "p", "h", time.Minute))
	if sess.RecoveringUntil.IsZero() {
		t.Fatalf("KeepAlive RecoveringUntil is zero, want the window's end")
	}
	start := time.Now()
	var rejections int
	var lastUntil time.Time
	for i := 0; ; i++ {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("still recovering after 10s")
		}
		st := must[ledger.PoolStats](t, "Stats")(l.Stats(ctx, "p"))
		open := st.Now.Before(st.RecoveringUntil)
		if open && st.RecoveringUntil.Before(lastUntil) {
			t.Errorf("Stats RecoveringUntil went back from %s to %s", lastUntil.Format(time.StampMilli), st.RecoveringUntil.Format(time.StampMilli))
		}
		lastUntil = st.RecoveringUntil
		_, err := l.Acquire(ctx, req("h", fmt.Sprint(i), 1, time.Minute))
		rej := ledger.AsRejection(err)
		switch {
		case err == nil:
			t.Logf("granted %s after the nominal end, after %d recovering rejections",
				time.Since(sess.RecoveringUntil).Round(time.Millisecond), rejections)
			if rejections > 10 {
				t.Errorf("%d recovering rejections before the window ended, want at most 10 for a caller that waits RetryAfter", rejections)
			}
			return
		case rej == nil || rej.Reason != ledger.ReasonRecovering:
			t.Fatalf("Acquire: %v, want a grant or %s", err, ledger.ReasonRecovering)
		case !open:
			t.Fatalf("Stats said the window was over (now %s, until %v) but Acquire said %s",
				st.Now.Format(time.StampMilli), st.RecoveringUntil, rej.Reason)
		}
		rejections++
		if rej.RetryAfter <= 0 {
			t.Fatalf("recovering RetryAfter = %s, want > 0", rej.RetryAfter)
		}
		time.Sleep(rej.RetryAfter)
	}
}

// TestGrowRemovedEngineAndTenant: Configure keeps the last spec of an
// engine and a tenant it drops while they have leases, so their leases grow
// against the capacity and quota they were granted on, and Stats reports
// those specs.
func TestGrowRemovedEngineAndTenant(t *testing.T) {
	srv := etcdserver.Start(t, t.TempDir())
	l := newLedger(t, srv, etcd.Options{Options: ledger.Options{RecoveryWindow: -1}, Prefix: "/removed/"})
	ctx := t.Context()
	full := spec(1000, 4)
	gone := ledger.EngineSpec{ID: "e2", URL: "http://e2", KVTokens: 500, Slots: 4}
	small := ledger.TenantSpec{Name: "u", KVShare: 0.1}
	full.Engines = append(full.Engines, gone)
	full.Tenants = append(full.Tenants, small)
	must[ledger.Epoch](t, "Configure")(l.Configure(ctx, full))
	must[ledger.Session](t, "KeepAlive")(l.KeepAlive(ctx, "p", "h", time.Minute))
	onE2 := req("h", "a", 100, time.Minute)
	onE2.Candidates = []ledger.EngineID{"e2"}
	a := must[ledger.Grant](t, "Acquire on e2")(l.Acquire(ctx, onE2)).Lease
	byU := req("h", "b", 50, time.Minute)
	byU.Tenant = "u"
	b := must[ledger.Grant](t, "Acquire for u")(l.Acquire(ctx, byU)).Lease

	must[ledger.Epoch](t, "Configure without e2 and u")(l.Configure(ctx, spec(1000, 4)))
	st := must[ledger.PoolStats](t, "Stats")(l.Stats(ctx, "p"))
	if len(st.Engines) != 2 || !st.Engines[1].Removed || st.Engines[1].Spec != gone {
		t.Errorf("Stats engines = %+v, want e2 removed with its last spec %+v", st.Engines, gone)
	}
	if len(st.Tenants) != 2 || !st.Tenants[1].Removed || st.Tenants[1].Spec != small {
		t.Errorf("Stats tenants = %+v, want u removed with its last spec %+v", st.Tenants, small)
	}

	for _, tc := range []struct {
		name          string
		lease         ledger.Lease
		kv            int64
		wantErr       error
		wantOvergrown bool
	}{
		{"within e2's last capacity", a, 500, nil, false},
		{"above e2's last capacity", a, 501, ledger.ErrInvalidArgument, false},
		{"within u's last quota", b, 100, nil, false},
		{"above u's last quota", b, 101, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := must[ledger.PoolStats](t, "Stats")(l.Stats(ctx, "p"))
			rn, err := l.Grow(ctx, tc.lease.Ref(), tc.kv)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Grow(%d) = %v, want %v", tc.kv, err, tc.wantErr)
				}
				after := must[ledger.PoolStats](t, "Stats")(l.Stats(ctx, "p"))
				if fmt.Sprint(after.Engines, after.Tenants, after.Counters) != fmt.Sprint(before.Engines, before.Tenants, before.Counters) {
					t.Errorf("refused Grow changed Stats:\n got %+v\nwant %+v", after, before)
				}
				return
			}
			if err != nil || rn.Lease.KVTokens != tc.kv || rn.Lease.Overgrown != tc.wantOvergrown {
				t.Fatalf("Grow(%d) = kv %d overgrown %v, %v; want kv %d overgrown %v", tc.kv, rn.Lease.KVTokens, rn.Lease.Overgrown, err, tc.kv, tc.wantOvergrown)
			}
		})
	}
	if got := must[ledger.PoolStats](t, "Stats")(l.Stats(ctx, "p")).Counters; got[ledger.CounterGrowths] != 3 || got[ledger.CounterGrownKV] != 400+51 || got[ledger.CounterOvergrowths] != 1 {
		t.Errorf("counters = %v, want growths 3, grown_kv_tokens 451, overgrowths 1", got)
	}
}
