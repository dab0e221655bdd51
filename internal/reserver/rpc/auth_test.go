package rpc_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/memory"
	"github.com/leasehold/leasehold/internal/ledger/remote"
	"github.com/leasehold/leasehold/internal/reserver/rpc"
	"github.com/leasehold/leasehold/internal/testutil/syncbuf"
)

const (
	sharedToken = "shared-secret-token"
	adminToken  = "admin-secret-token"
	tokA        = "router-a-secret"
	tokB        = "router-b-secret"
	auditToken  = "audit-secret-token"
)

func authConfig() rpc.Config {
	return rpc.Config{
		Token:        sharedToken,
		AdminTokens:  []string{adminToken},
		RouterTokens: map[string]string{"router-a": tokA, "router-b": tokB},
		AuditTokens:  []string{auditToken},
	}
}

var spec = ledger.PoolSpec{
	Name:       "p",
	Engines:    []ledger.EngineSpec{{ID: "e1", KVTokens: 1000, Slots: 8}},
	Tenants:    []ledger.TenantSpec{{Name: "t", KVShare: 1}},
	Priorities: []ledger.PrioritySpec{{Name: "std", MaxFill: 1}},
}

func acquireReq(holder ledger.HolderID, id string) ledger.AcquireRequest {
	return ledger.AcquireRequest{
		Pool: "p", Candidates: []ledger.EngineID{"e1"}, Tenant: "t", Priority: "std",
		KVTokens: 100, Slots: 1, Holder: holder, RequestID: ledger.RequestID(id), TTL: time.Minute,
	}
}

// calls returns one call per Ledger method, each acting for holder on lease.
func calls(c ledger.Ledger, holder ledger.HolderID, lease ledger.Lease) map[string]func(context.Context) error {
	ref := lease.Ref()
	ref.Holder = holder
	mine := lease
	mine.Holder = holder
	return map[string]func(context.Context) error{
		"Configure":   func(ctx context.Context) error { _, err := c.Configure(ctx, spec); return err },
		"SetDraining": func(ctx context.Context) error { return c.SetDraining(ctx, "p", "e1", true) },
		"KeepAlive":   func(ctx context.Context) error { _, err := c.KeepAlive(ctx, "p", holder, time.Minute); return err },
		"Acquire":     func(ctx context.Context) error { _, err := c.Acquire(ctx, acquireReq(holder, "x1")); return err },
		"Renew":       func(ctx context.Context) error { _, err := c.Renew(ctx, ref, time.Minute); return err },
		"Resize":      func(ctx context.Context) error { _, err := c.Resize(ctx, ref, 50); return err },
		"Grow":        func(ctx context.Context) error { _, err := c.Grow(ctx, ref, 150); return err },
		"Release":     func(ctx context.Context) error { _, err := c.Release(ctx, ref, ledger.Usage{}); return err },
		"Reassert":    func(ctx context.Context) error { _, err := c.Reassert(ctx, mine, time.Minute); return err },
		"Observe": func(ctx context.Context) error {
			_, err := c.Observe(ctx, ledger.Observation{Pool: "p", Engine: "e1", KVTokensUsed: 999, ObservedAt: time.Now()})
			return err
		},
		"Sweep": func(ctx context.Context) error { _, err := c.Sweep(ctx, "p", 10); return err },
		"Pools": func(ctx context.Context) error { _, err := c.Pools(ctx); return err },
		"List":  func(ctx context.Context) error { _, err := c.List(ctx, ledger.Filter{}); return err },
		"Stats": func(ctx context.Context) error { _, err := c.Stats(ctx, "p"); return err },
	}
}

// holderOf is a holder id of name derived from c's holder key, as a
// lease.Manager on c makes them.
func holderOf(c *remote.Ledger, name string) ledger.HolderID {
	return ledger.HolderID(name + "/" + c.HolderKey().Suffix())
}

// fixture serves a configured pool where router-b holds one lease, under a
// holder derived from its client's key.
func fixture(t *testing.T) (*memory.Ledger, string, ledger.Lease) {
	t.Helper()
	l, url := serve(t, authConfig(), "127.0.0.1:0")
	ctx := t.Context()
	b := client(t, url, tokB)
	if _, err := client(t, url, sharedToken).Configure(ctx, spec); err != nil {
		t.Fatalf("Configure with the shared token: %v", err)
	}
	hb := holderOf(b, "router-b")
	if _, err := b.KeepAlive(ctx, "p", hb, time.Minute); err != nil {
		t.Fatalf("KeepAlive with router-b's token: %v", err)
	}
	g, err := b.Acquire(ctx, acquireReq(hb, "b-1"))
	if err != nil {
		t.Fatalf("Acquire with router-b's token: %v", err)
	}
	return l, url, g.Lease
}

// state describes the ledger for "nothing changed" checks.
func state(t *testing.T, l ledger.Ledger) string {
	t.Helper()
	st, err := l.Stats(t.Context(), "p")
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	ls, err := l.List(t.Context(), ledger.Filter{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var b strings.Builder
	for _, e := range st.Engines {
		fmt.Fprintf(&b, "%s draining=%v kv=%d slots=%d leases=%d corr=%d;", e.Spec.ID, e.Draining, e.ReservedKV, e.ReservedSlots, e.Leases, e.CorrectionKV)
	}
	fmt.Fprintf(&b, " holders=%d;", st.LiveHolders)
	for _, x := range ls {
		fmt.Fprintf(&b, " %s %s kv=%d deadline=%d;", x.ID, x.Holder, x.KVTokens, x.Deadline.UnixMilli())
	}
	return b.String()
}

func wantCode(t *testing.T, what string, err error, code codes.Code, sentinel error) {
	t.Helper()
	if got := status.Code(err); got != code || !errors.Is(err, sentinel) {
		t.Errorf("%s error = %v (code %s), want code %s matching %v", what, err, got, code, sentinel)
	}
}

func TestUnauthenticated(t *testing.T) {
	l, url, lease := fixture(t)
	before := state(t, l)
	for _, tc := range []struct{ name, token string }{
		{"no token", ""},
		{"wrong token", "not-a-configured-token"},
		{"token with a prefix of a real one", sharedToken[:5]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := client(t, url, tc.token)
			for name, call := range calls(c, lease.Holder, lease) {
				err := call(t.Context())
				wantCode(t, name, err, codes.Unauthenticated, remote.ErrUnauthenticated)
				if tc.token != "" && strings.Contains(fmt.Sprint(err), tc.token) {
					t.Errorf("%s error %q echoes the token", name, err)
				}
			}
		})
	}
	if after := state(t, l); after != before {
		t.Errorf("unauthenticated calls changed the ledger:\n got %s\nwant %s", after, before)
	}
}

func TestRouterTokenOwnHoldersOnly(t *testing.T) {
	l, url, lease := fixture(t)
	a := client(t, url, tokA)
	ha := holderOf(a, "router-a")
	// Another client with router-a's token: another session of router-a.
	a2 := client(t, url, tokA)
	before := state(t, l)
	// router-a acting for router-b's holder, for a holder that merely starts
	// with "router-a", or for a router-a holder its key did not derive, is
	// refused before the ledger sees the call.
	for _, holder := range []ledger.HolderID{lease.Holder, "router-b", "router-ab", ledger.HolderID("router-ab/" + a.HolderKey().Suffix()),
		"router", "", "router-a", "router-a/1", holderOf(a2, "router-a")} {
		for _, name := range []string{"KeepAlive", "Acquire", "Renew", "Resize", "Grow", "Release", "Reassert"} {
			err := calls(a, holder, lease)[name](t.Context())
			wantCode(t, fmt.Sprintf("%s for holder %q with router-a's token", name, holder), err, codes.PermissionDenied, ledger.ErrPermissionDenied)
		}
	}
	// Admin methods are refused too.
	for _, name := range []string{"Configure", "SetDraining", "Observe", "Sweep"} {
		err := calls(a, ha, lease)[name](t.Context())
		wantCode(t, name+" with a router token", err, codes.PermissionDenied, ledger.ErrPermissionDenied)
	}
	if after := state(t, l); after != before {
		t.Errorf("refused calls changed the ledger:\n got %s\nwant %s", after, before)
	}

	// router-a naming its own holder on router-b's lease: the ledger refuses.
	ctx := t.Context()
	if _, err := a.KeepAlive(ctx, "p", ha, time.Minute); err != nil {
		t.Fatalf("KeepAlive for its own holder: %v", err)
	}
	before = state(t, l)
	ref := lease.Ref()
	ref.Holder = ha
	_, err := a.Release(ctx, ref, ledger.Usage{})
	wantCode(t, "Release of router-b's lease as router-a's holder", err, codes.PermissionDenied, ledger.ErrNotHolder)
	if errors.Is(err, ledger.ErrPermissionDenied) {
		t.Errorf("ErrNotHolder also matches ErrPermissionDenied; want the two told apart")
	}
	_, err = a.Grow(ctx, ref, lease.KVTokens+50)
	wantCode(t, "Grow of router-b's lease as router-a's holder", err, codes.PermissionDenied, ledger.ErrNotHolder)
	if after := state(t, l); after != before {
		t.Errorf("a refused release and growth changed the ledger:\n got %s\nwant %s", after, before)
	}

	// Its own holders work (any nonce of its key), and reads are allowed.
	if _, err := a.KeepAlive(ctx, "p", holderOf(a, "router-a"), time.Minute); err != nil {
		t.Errorf("KeepAlive for another incarnation of its own: %v", err)
	}
	g, err := a.Acquire(ctx, acquireReq(ha, "a-1"))
	if err != nil {
		t.Fatalf("Acquire for its own holder: %v", err)
	}
	if rn, err := a.Grow(ctx, g.Lease.Ref(), g.Lease.KVTokens+50); err != nil || rn.Lease.KVTokens != g.Lease.KVTokens+50 {
		t.Errorf("Grow of its own lease = %d kv_tokens, %v; want %d", rn.Lease.KVTokens, err, g.Lease.KVTokens+50)
	}
	if _, err := a.Release(ctx, g.Lease.Ref(), ledger.Usage{}); err != nil {
		t.Errorf("Release of its own lease: %v", err)
	}
	for _, name := range []string{"Pools", "List", "Stats"} {
		if err := calls(a, ha, lease)[name](ctx); err != nil {
			t.Errorf("%s with a router token: %v", name, err)
		}
	}
}

func TestAuditTokenReadOnly(t *testing.T) {
	l, url, lease := fixture(t)
	c := client(t, url, auditToken)
	before := state(t, l)
	for name, call := range calls(c, lease.Holder, lease) {
		err := call(t.Context())
		switch name {
		case "Pools", "List", "Stats":
			if err != nil {
				t.Errorf("%s with the audit token: %v", name, err)
			}
		default:
			wantCode(t, name+" with the audit token", err, codes.PermissionDenied, ledger.ErrPermissionDenied)
		}
	}
	if after := state(t, l); after != before {
		t.Errorf("audit token changed the ledger:\n got %s\nwant %s", after, before)
	}
}

func TestAdminTokens(t *testing.T) {
	_, url, lease := fixture(t)
	for _, tok := range []string{sharedToken, adminToken} {
		c := client(t, url, tok)
		ctx := t.Context()
		if err := c.SetDraining(ctx, "p", "e1", false); err != nil {
			t.Errorf("SetDraining: %v", err)
		}
		if _, err := c.Sweep(ctx, "p", 10); err != nil {
			t.Errorf("Sweep: %v", err)
		}
		if _, err := c.Observe(ctx, ledger.Observation{Pool: "p", Engine: "e1", ObservedAt: time.Now()}); err != nil {
			t.Errorf("Observe: %v", err)
		}
		// Admin may act for any holder; the ledger still checks the lease.
		if _, err := c.Renew(ctx, lease.Ref(), time.Minute); err != nil {
			t.Errorf("Renew of router-b's lease with an admin token: %v", err)
		}
	}
}

func TestLoopbackOnlyWithoutToken(t *testing.T) {
	_, url := serve(t, rpc.Config{}, "127.0.0.1:0")
	c := client(t, url, "")
	if _, err := c.Configure(t.Context(), spec); err != nil {
		t.Fatalf("Configure from loopback without a token: %v", err)
	}
	if _, err := c.Pools(t.Context()); err != nil {
		t.Errorf("Pools from loopback without a token: %v", err)
	}

	// Refusal of non-loopback peers is checked at the unit level with
	// synthetic peer addresses (config_test.go): tests send traffic to
	// loopback only.
}

// TestRefusalsLogged: a refused call is logged once per peer, method and
// code per minute, naming the method, code, peer and who the caller was
// taken for, and never a token.
func TestRefusalsLogged(t *testing.T) {
	var buf syncbuf.Buffer
	cfg := authConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	_, url := serve(t, cfg, "127.0.0.1:0")
	ctx := context.Background()
	bad := client(t, url, "not-a-configured-token")
	for range 3 {
		if _, err := bad.KeepAlive(ctx, "p", "router-a/x", time.Minute); err == nil {
			t.Fatal("KeepAlive with an unknown token succeeded")
		}
	}
	a := client(t, url, tokA)
	for range 3 {
		if _, err := a.KeepAlive(ctx, "p", "router-b/x", time.Minute); err == nil {
			t.Fatal("router-a acting for router-b succeeded")
		}
	}
	logs := buf.String()
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines (one per code), got %d:\n%s", len(lines), logs)
	}
	for _, want := range []string{"method=KeepAlive", "code=Unauthenticated", "code=PermissionDenied", `as="router router-a"`, "peer=127.0.0.1:"} {
		if !strings.Contains(logs, want) {
			t.Errorf("refusal log lacks %q:\n%s", want, logs)
		}
	}
	for _, secret := range []string{"not-a-configured-token", tokA, tokB, sharedToken, adminToken, auditToken} {
		if strings.Contains(logs, secret) {
			t.Errorf("refusal log contains a token %q", secret)
		}
	}
}
