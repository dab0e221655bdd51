package rpc_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/holderkey"
	"github.com/leasehold/leasehold/internal/testutil/rawrpc"
)

const routerRoleToken = "router-role-secret"

// rawConn is a plaintext connection to the server at url ("grpc://..."),
// closed when the test ends; calls on it send only the metadata given.
func rawConn(t *testing.T, url string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(url, "grpc://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient(%s): %v", url, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestHolderKey: a router principal (named token, router token) acts for a
// holder only when the call presents the holder key the holder id was
// derived from, and for a named router only under its name; an admin
// needs no key; an audit token gets nothing with one. A refused call
// never reaches the ledger.
func TestHolderKey(t *testing.T) {
	cfg := authConfig()
	cfg.RouterRoleTokens = []string{routerRoleToken}
	l, url := serve(t, cfg, "127.0.0.1:0")
	ctx := t.Context()
	conn := rawConn(t, url)
	if _, err := client(t, url, sharedToken).Configure(ctx, spec); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	ka, kb, kx := holderkey.New(), holderkey.New(), holderkey.New()

	// router-b's session holds the victim lease.
	hb := ledger.HolderID("router-b/" + kb.Suffix())
	acquired := func(t *testing.T, md []string, holder ledger.HolderID, reqID string) ledger.Lease {
		t.Helper()
		c := rawrpc.Calls(conn, rawrpc.MD(md[0], md[1]), rawrpc.Target{Holder: holder, Lease: ledger.Lease{Pool: "p", Engine: "e1"}, Acquire: acquireReq(holder, reqID)})
		for _, m := range []string{"KeepAlive", "Acquire"} {
			if err := c[m](ctx); err != nil {
				t.Fatalf("%s for %s: %v", m, holder, err)
			}
		}
		ls, err := l.List(ctx, ledger.Filter{Holder: holder})
		if err != nil || len(ls) != 1 {
			t.Fatalf("List of %s = %v, %v; want its one lease", holder, ls, err)
		}
		return ls[0]
	}
	victim := acquired(t, []string{tokB, kb.Encode()}, hb, "victim")
	tg := func(holder ledger.HolderID, lease ledger.Lease) rawrpc.Target {
		return rawrpc.Target{Holder: holder, Lease: lease, Acquire: acquireReq(holder, "x"), Spec: spec}
	}

	for _, tc := range []struct {
		name, token, key string
		holder           ledger.HolderID
		want             string // "" allowed, else part of the PermissionDenied message
	}{
		{"named router, right key", tokB, kb.Encode(), ledger.HolderID("router-b/" + kb.Suffix()), ""},
		{"router token, right key, any name", routerRoleToken, kx.Encode(), ledger.HolderID("pod-7f9c/" + kx.Suffix()), ""},
		{"admin without a key", adminToken, "", ledger.HolderID("anyone/" + kx.Suffix()), ""},
		{"named router, wrong key", tokB, ka.Encode(), hb, "is not"},
		{"named router, no key", tokB, "", hb, "sent no holder key"},
		{"named router, malformed key", tokB, "0123", hb, "malformed holder key"},
		{"named router, other router's holder", tokA, ka.Encode(), hb, "is not"},
		{"named router, wrong prefix, own key", tokA, ka.Encode(), ledger.HolderID("router-b/" + ka.Suffix()), `not "router-b/`},
		{"router token, other session's holder", routerRoleToken, kx.Encode(), hb, "is not"},
		{"router token, no key", routerRoleToken, "", hb, "sent no holder key"},
		{"audit token, right key", auditToken, kb.Encode(), hb, "may only read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := rawrpc.MD(tc.token, tc.key)
			if tc.want == "" {
				own := acquired(t, []string{tc.token, tc.key}, tc.holder, "own")
				calls := rawrpc.Calls(conn, md, tg(tc.holder, own))
				for _, m := range []string{"Renew", "Resize", "Grow", "Reassert", "Release"} {
					if err := calls[m](ctx); err != nil {
						t.Errorf("%s of its own lease: %v", m, err)
					}
				}
				return
			}
			before := state(t, l)
			calls := rawrpc.Calls(conn, md, tg(tc.holder, victim))
			for _, m := range rawrpc.HolderMethods {
				err := calls[m](ctx)
				if st := status.Convert(err); st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), tc.want) {
					t.Errorf("%s: %v; want PermissionDenied containing %q", m, err, tc.want)
				}
				if tc.key != "" && strings.Contains(strings.ToLower(status.Convert(err).Message()), strings.ToLower(tc.key)) {
					t.Errorf("%s: the refusal quotes the key", m)
				}
			}
			if after := state(t, l); after != before {
				t.Errorf("refused calls changed the ledger:\n got %s\nwant %s", after, before)
			}
		})
	}

	// Router roles never call an admin method, key or not.
	before := state(t, l)
	for _, who := range []struct{ token, key string }{{tokB, kb.Encode()}, {routerRoleToken, kx.Encode()}, {routerRoleToken, ""}} {
		calls := rawrpc.Calls(conn, rawrpc.MD(who.token, who.key), tg(hb, victim))
		for _, m := range rawrpc.AdminMethods {
			if err := calls[m](ctx); status.Code(err) != codes.PermissionDenied {
				t.Errorf("%s with a router credential: %v; want PermissionDenied", m, err)
			}
		}
	}
	if after := state(t, l); after != before {
		t.Errorf("refused admin calls changed the ledger:\n got %s\nwant %s", after, before)
	}
	if ls, err := l.List(context.Background(), ledger.Filter{Holder: hb}); err != nil || len(ls) != 1 || ls[0].ID != victim.ID {
		t.Errorf("the victim's leases = %v, %v; want %s untouched", ls, err, victim.ID)
	}
}
