package redis_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/ledger"
	lhredis "github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// TestScriptErrors drives each script into each error it can reply with and
// checks the sentinel the caller sees.
func TestScriptErrors(t *testing.T) {
	srv := redisserver.Start(t)
	l := newLedger(t, srv, noWindow)
	ctx := ctxT(t)
	mustConfigure(t, l, basicSpec())
	mustKeepAlive(t, l, "llama", "h1", time.Minute)
	mustKeepAlive(t, l, "llama", "h2", time.Minute)
	g, err := l.Acquire(ctx, req("h1", "r1", 10, 1))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	other := g.Lease.Ref()
	other.Holder = "h2"
	ghost := g.Lease.Ref()
	ghost.ID = ledger.MakeLeaseID(ledger.Fence{Epoch: g.Epoch, Seq: 999})
	withReq := func(f func(*ledger.AcquireRequest)) ledger.AcquireRequest {
		r := req("h1", "r-new", 10, 1)
		f(&r)
		return r
	}
	reassert := func(f func(*ledger.Lease)) ledger.Lease {
		x := g.Lease
		x.Fence = ledger.Fence{Epoch: g.Epoch, Seq: 500}
		x.ID = ledger.MakeLeaseID(x.Fence)
		f(&x)
		return x
	}
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"acquire unknown pool", func() error {
			_, err := l.Acquire(ctx, withReq(func(r *ledger.AcquireRequest) { r.Pool = "nope" }))
			return err
		}, ledger.ErrUnknownPool},
		{"acquire unknown tenant", func() error {
			_, err := l.Acquire(ctx, withReq(func(r *ledger.AcquireRequest) { r.Tenant = "nope" }))
			return err
		}, ledger.ErrUnknownTenant},
		{"acquire unknown priority", func() error {
			_, err := l.Acquire(ctx, withReq(func(r *ledger.AcquireRequest) { r.Priority = "nope" }))
			return err
		}, ledger.ErrUnknownPriority},
		{"acquire unknown engine", func() error {
			_, err := l.Acquire(ctx, withReq(func(r *ledger.AcquireRequest) { r.Candidates = []ledger.EngineID{"gpu-0", "nope"} }))
			return err
		}, ledger.ErrUnknownEngine},
		{"acquire no session", func() error {
			_, err := l.Acquire(ctx, withReq(func(r *ledger.AcquireRequest) { r.Holder = "ghost" }))
			return err
		}, ledger.ErrNoSession},
		{"acquire invalid", func() error {
			_, err := l.Acquire(ctx, withReq(func(r *ledger.AcquireRequest) { r.KVTokens = 0 }))
			return err
		}, ledger.ErrInvalidArgument},
		{"keepalive unknown pool", func() error { _, err := l.KeepAlive(ctx, "nope", "h1", time.Second); return err }, ledger.ErrUnknownPool},
		{"drain unknown engine", func() error { return l.SetDraining(ctx, "llama", "nope", true) }, ledger.ErrUnknownEngine},
		{"drain unknown pool", func() error { return l.SetDraining(ctx, "nope", "gpu-0", true) }, ledger.ErrUnknownPool},
		{"renew not holder", func() error { _, err := l.Renew(ctx, other, time.Second); return err }, ledger.ErrNotHolder},
		{"renew not found", func() error { _, err := l.Renew(ctx, ghost, time.Second); return err }, ledger.ErrLeaseNotFound},
		{"resize not holder", func() error { _, err := l.Resize(ctx, other, 5); return err }, ledger.ErrNotHolder},
		{"resize not found", func() error { _, err := l.Resize(ctx, ghost, 5); return err }, ledger.ErrLeaseNotFound},
		{"release not holder", func() error { _, err := l.Release(ctx, other, ledger.Usage{}); return err }, ledger.ErrNotHolder},
		{"release bad lease id", func() error {
			r := g.Lease.Ref()
			r.ID = "zz"
			_, err := l.Release(ctx, r, ledger.Usage{})
			return err
		}, ledger.ErrInvalidArgument},
		{"reassert no session", func() error {
			_, err := l.Reassert(ctx, reassert(func(x *ledger.Lease) { x.Holder = "ghost" }), time.Second)
			return err
		}, ledger.ErrNoSession},
		{"reassert not holder", func() error {
			_, err := l.Reassert(ctx, reassert(func(x *ledger.Lease) { x.ID, x.Fence = g.Lease.ID, g.Lease.Fence; x.Holder = "h2" }), time.Second)
			return err
		}, ledger.ErrNotHolder},
		{"reassert unknown engine", func() error {
			_, err := l.Reassert(ctx, reassert(func(x *ledger.Lease) { x.Engine = "nope" }), time.Second)
			return err
		}, ledger.ErrUnknownEngine},
		{"reassert unknown tenant", func() error {
			_, err := l.Reassert(ctx, reassert(func(x *ledger.Lease) { x.Tenant = "nope" }), time.Second)
			return err
		}, ledger.ErrUnknownTenant},
		{"reassert unknown priority", func() error {
			_, err := l.Reassert(ctx, reassert(func(x *ledger.Lease) { x.Priority = "nope" }), time.Second)
			return err
		}, ledger.ErrUnknownPriority},
		{"reassert huge sequence", func() error {
			_, err := l.Reassert(ctx, reassert(func(x *ledger.Lease) {
				x.Fence = ledger.Fence{Epoch: g.Epoch, Seq: 1 << 60}
				x.ID = ledger.MakeLeaseID(x.Fence)
			}), time.Second)
			return err
		}, ledger.ErrInvalidArgument},
		{"observe unknown engine", func() error {
			_, err := l.Observe(ctx, ledger.Observation{Pool: "llama", Engine: "nope", ObservedAt: time.Now()})
			return err
		}, ledger.ErrUnknownEngine},
		{"stats unknown pool", func() error { _, err := l.Stats(ctx, "nope"); return err }, ledger.ErrUnknownPool},
		{"sweep unknown pool", func() error { _, err := l.Sweep(ctx, "nope", 0); return err }, ledger.ErrUnknownPool},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, tc.want) {
				t.Fatalf("error = %v, want errors.Is %v", err, tc.want)
			}
			// Errors say what was in progress.
			if !regexp.MustCompile(`^redis (acquire|keepalive|set draining|renew|resize|release|reassert|observe|stats|sweep)\b`).MatchString(err.Error()) {
				t.Errorf("error %q does not start with the operation", err)
			}
		})
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := l.KeepAlive(ctx, "llama", "h1", time.Second); !errors.Is(err, ledger.ErrClosed) {
		t.Errorf("KeepAlive after Close error = %v, want ErrClosed", err)
	}
}

// TestKeysWritten checks that every key a pool's scripts write follows the
// schema in doc.go, and that ended leases leave no keys behind.
func TestKeysWritten(t *testing.T) {
	srv := redisserver.Start(t)
	client := srv.Client()
	ctx := ctxT(t)
	l, p := newLedgerOn(t, client, noWindow)
	mustConfigure(t, l, basicSpec())
	mustKeepAlive(t, l, "llama", "h1", time.Minute)
	var leases []ledger.Lease
	for i, id := range []string{"a", "b", "c"} {
		g, err := l.Acquire(ctx, req("h1", id, int64(10*(i+1)), 1))
		if err != nil {
			t.Fatalf("Acquire(%s): %v", id, err)
		}
		leases = append(leases, g.Lease)
	}
	if _, err := l.Observe(ctx, ledger.Observation{Pool: "llama", Engine: "gpu-1", KVTokensUsed: 5, ObservedAt: time.Now()}); err != nil {
		t.Fatalf("Observe: %v", err)
	}
	schema := regexp.MustCompile(`^` + p + `:(pools|\{llama\}:(state|engines|tenants|deadlines|holders|req|leases|holder:h1))$`)
	keys := keysOf(t, ctx, client, p)
	for _, k := range keys {
		if !schema.MatchString(k) {
			t.Errorf("key %q is not in the schema", k)
		}
	}
	for _, x := range leases {
		if _, err := l.Release(ctx, x.Ref(), ledger.Usage{}); err != nil {
			t.Fatalf("Release(%s): %v", x.ID, err)
		}
	}
	for _, k := range keysOf(t, ctx, client, p) {
		if strings.HasSuffix(k, ":leases") || strings.Contains(k, ":holder:") || strings.HasSuffix(k, ":req") || strings.HasSuffix(k, ":deadlines") {
			t.Errorf("key %q left after every lease was released", k)
		}
	}
}

// TestFunctionLoadFallback deletes the ledger's function library from the
// server (FUNCTION FLUSH, as a server restarted without persistence has
// none): calls must still work, the store loading it again, on the plain
// path and on the WAIT path (wait_replicas, with a replica attached).
func TestFunctionLoadFallback(t *testing.T) {
	srv := redisserver.Start(t)
	client := srv.Client()
	for _, tc := range []struct {
		name string
		opts lhredis.Options
	}{
		{"plain", lhredis.Options{Options: noWindow}},
		{"wait_replicas", lhredis.Options{Options: noWindow, WaitReplicas: 1, WaitTimeout: 2 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.opts.WaitReplicas > 0 {
				redisserver.StartReplica(t, srv)
			}
			tc.opts.Prefix = newPrefix()
			l := lhredis.New(client, tc.opts)
			t.Cleanup(func() { _ = l.Close() })
			ctx := ctxT(t)
			flush := func(after string) {
				t.Helper()
				if err := client.FunctionFlush(ctx).Err(); err != nil {
					t.Fatalf("FUNCTION FLUSH after %s: %v", after, err)
				}
				if libs, err := client.FunctionList(ctx, goredis.FunctionListQuery{}).Result(); err != nil || len(libs) != 0 {
					t.Fatalf("FUNCTION LIST after FUNCTION FLUSH = %v, %v; want none", libs, err)
				}
			}
			flush("start")
			mustConfigure(t, l, basicSpec())
			flush("Configure")
			mustKeepAlive(t, l, "llama", "h1", time.Minute)
			flush("KeepAlive")
			g, err := l.Acquire(ctx, req("h1", "r1", 10, 1))
			if err != nil {
				t.Fatalf("Acquire after FUNCTION FLUSH: %v", err)
			}
			flush("Acquire")
			if rel, err := l.Release(ctx, g.Lease.Ref(), ledger.Usage{}); err != nil || !rel.Released {
				t.Fatalf("Release after FUNCTION FLUSH = %+v, %v; want released", rel, err)
			}
			flush("Release")
			if _, err := l.Stats(ctx, "llama"); err != nil {
				t.Fatalf("Stats after FUNCTION FLUSH: %v", err)
			}
			libs, err := client.FunctionList(ctx, goredis.FunctionListQuery{}).Result()
			if err != nil || len(libs) != 1 || !strings.HasPrefix(libs[0].Name, "leasehold_") {
				t.Fatalf("FUNCTION LIST = %v, %v; want the ledger's library, loaded again", libs, err)
			}
		})
	}
}

// TestRestartNewEpoch restarts redis-server without persistence: the pool
// is unknown until configured again, which starts a later epoch with a
// recovery window that refuses grants but not reassertion.
func TestRestartNewEpoch(t *testing.T) {
	srv := redisserver.Start(t)
	const window = 500 * time.Millisecond
	l := newLedger(t, srv, ledger.Options{RecoveryWindow: window})
	ctx := ctxT(t)
	spec := basicSpec()
	ep1 := mustConfigure(t, l, spec)
	if again := mustConfigure(t, l, spec); again != ep1 {
		t.Fatalf("Configure twice: epoch %d then %d, want unchanged", ep1, again)
	}
	s := mustKeepAlive(t, l, "llama", "h1", time.Minute)
	if s.RecoveringUntil.IsZero() {
		t.Fatalf("first epoch RecoveringUntil is zero, want a window (a new pool cannot be told from a lost one)")
	}
	time.Sleep(time.Until(s.RecoveringUntil) + 20*time.Millisecond)
	g, err := l.Acquire(ctx, req("h1", "r1", 900, 1, "gpu-0"))
	if err != nil {
		t.Fatalf("Acquire after the window: %v", err)
	}

	srv.Restart()

	if _, err := l.KeepAlive(ctx, "llama", "h1", time.Minute); !errors.Is(err, ledger.ErrUnknownPool) {
		t.Fatalf("KeepAlive after restart error = %v, want ErrUnknownPool", err)
	}
	if _, err := l.Acquire(ctx, req("h1", "r2", 1, 1)); !errors.Is(err, ledger.ErrUnknownPool) {
		t.Fatalf("Acquire after restart error = %v, want ErrUnknownPool", err)
	}
	if pools, err := l.Pools(ctx); err != nil || len(pools) != 0 {
		t.Fatalf("Pools after restart = %v, %v; want none", pools, err)
	}
	ep2 := mustConfigure(t, l, spec)
	if ep2 <= ep1 {
		t.Fatalf("epoch after restart = %d, want > %d", ep2, ep1)
	}
	s = mustKeepAlive(t, l, "llama", "h1", time.Minute)
	if s.Epoch != ep2 || s.RecoveringUntil.IsZero() {
		t.Fatalf("KeepAlive after reconfigure = epoch %d recovering until %v, want epoch %d and a window", s.Epoch, s.RecoveringUntil, ep2)
	}
	_, err = l.Acquire(ctx, req("h1", "r3", 1, 1))
	rej := ledger.AsRejection(err)
	if rej == nil || rej.Reason != ledger.ReasonRecovering || rej.RetryAfter <= 0 || rej.RetryAfter > window || rej.Epoch != ep2 {
		t.Fatalf("Acquire in the window error = %v, want recovering with 0 < retry <= %s in epoch %d", err, window, ep2)
	}
	// Reassert above capacity: 900 held plus a second 900 on a 1000 engine.
	ra, err := l.Reassert(ctx, g.Lease, time.Minute)
	if err != nil || !ra.Lease.Reasserted || ra.Lease.Fence != g.Lease.Fence || ra.Epoch != ep2 {
		t.Fatalf("Reassert = %+v, %v; want the old fence, flagged, in epoch %d", ra, err, ep2)
	}
	x := g.Lease
	x.Fence = ledger.Fence{Epoch: ep2, Seq: 40}
	x.ID = ledger.MakeLeaseID(x.Fence)
	x.RequestID = "r-x"
	if _, err := l.Reassert(ctx, x, time.Minute); err != nil {
		t.Fatalf("Reassert above capacity: %v", err)
	}
	st, err := l.Stats(ctx, "llama")
	if err != nil {
		t.Fatal(err)
	}
	if st.Engines[0].ReservedKV != 1800 {
		t.Errorf("gpu-0 reserved after reasserts = %d, want 1800 (above capacity)", st.Engines[0].ReservedKV)
	}
	time.Sleep(time.Until(s.RecoveringUntil) + 20*time.Millisecond)
	g2, err := l.Acquire(ctx, req("h1", "r4", 1, 1))
	if err != nil {
		t.Fatalf("Acquire after the window: %v", err)
	}
	if g2.Lease.Engine != "gpu-1" || g2.Lease.Fence.Epoch != ep2 || g2.Lease.Fence.Seq <= 40 {
		t.Errorf("grant after reasserts = %s fence %s, want on gpu-1 (gpu-0 overloaded) with seq > 40 in epoch %d", g2.Lease.Engine, g2.Lease.Fence, ep2)
	}
}

func TestOpen(t *testing.T) {
	srv := redisserver.Start(t)
	l, err := lhredis.Open(srv.URL(), lhredis.Options{Options: noWindow, Prefix: newPrefix()})
	if err != nil {
		t.Fatalf("Open(%s): %v", srv.URL(), err)
	}
	mustConfigure(t, l, basicSpec())
	if pools, err := l.Pools(ctxT(t)); err != nil || len(pools) != 1 || pools[0] != "llama" {
		t.Errorf("Pools = %v, %v; want [llama]", pools, err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	for _, bad := range []string{"etcd://127.0.0.1:2379", "redis://127.0.0.1:1/notadb", "::"} {
		if l, err := lhredis.Open(bad, lhredis.Options{}); err == nil {
			_ = l.Close()
			t.Errorf("Open(%q) error = nil, want an error", bad)
		}
	}
	if l, err := lhredis.Open(srv.URL(), lhredis.Options{Prefix: "a{b"}); err == nil || !errors.Is(err, ledger.ErrInvalidArgument) {
		if l != nil {
			_ = l.Close()
		}
		t.Errorf("Open with prefix a{b error = %v, want ErrInvalidArgument", err)
	}
}
