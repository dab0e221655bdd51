package rpc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/holderkey"
)

func ledgerHolder(h string) ledger.HolderID { return ledger.HolderID(h) }

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		cfg        Config
	}{
		{"zero is loopback only", "", Config{}},
		{"all roles", "", Config{Token: "a", AdminTokens: []string{"b"}, RouterRoleTokens: []string{"e"}, RouterTokens: map[string]string{"r": "c"}, AuditTokens: []string{"d"}}},
		{"empty router role token", "router_role_tokens[0] is empty", Config{RouterRoleTokens: []string{""}}},
		{"admin token as router role token", "router_role_tokens[0] is the same token as token (LEASEHOLD_TOKEN)", Config{Token: "a", RouterRoleTokens: []string{"a"}}},
		{"empty admin token", "admin_tokens[0] is empty", Config{AdminTokens: []string{""}}},
		{"empty router token", "router_tokens[r] is empty", Config{RouterTokens: map[string]string{"r": ""}}},
		{"shared reused", "same token as token (LEASEHOLD_TOKEN)", Config{Token: "a", AuditTokens: []string{"a"}}},
		{"router name with slash", "contains '/'", Config{RouterTokens: map[string]string{"r/1": "c"}}},
		{"empty router name", "empty router name", Config{RouterTokens: map[string]string{"": "c"}}},
		{"whitespace", "contains whitespace", Config{Token: "a b"}},
		{"client certs alone", "", Config{ClientCerts: true}},
		{"identities", "", Config{ClientCerts: true, AdminIdentities: []string{"ops"}, AuditIdentities: []string{"audit"}}},
		{"identities without client certs", "client certificates are not verified", Config{AdminIdentities: []string{"ops"}}},
		{"empty identity", "audit_identities[0] is empty", Config{ClientCerts: true, AuditIdentities: []string{""}}},
		{"identity with space", "admin_identities[0]", Config{ClientCerts: true, AdminIdentities: []string{"o ps"}}},
		{"identity in both lists", "already listed as admin_identities[0]", Config{ClientCerts: true, AdminIdentities: []string{"x"}, AuditIdentities: []string{"x"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
			for _, tok := range []string{"a b", "c"} {
				if strings.Contains(err.Error(), `"`+tok+`"`) {
					t.Errorf("Validate() error %q quotes a token", err)
				}
			}
		})
	}
}

func TestLoadRouterTokens(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "tokens.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, err := LoadRouterTokens(write("# routers\nrouter-a: tok-a\n\nrouter-b:  \"tok:b\"\n"))
	if err != nil || len(got) != 2 || got["router-a"] != "tok-a" || got["router-b"] != "tok:b" {
		t.Fatalf("LoadRouterTokens = %v, %v; want router-a and router-b", got, err)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"no colon", "router-a s3cr3t\n", ":1: want"},
		{"empty token", "router-a:\n", ":1: want"},
		{"duplicate", "a: s3cr3t\na: s3cr3t2\n", ":2: router \"a\" listed twice"},
		{"slash in name", "a/b: s3cr3t\n", ":1: rpc config: router name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadRouterTokens(write(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadRouterTokens(%q) = %v, want an error containing %q", tc.body, err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("error %q contains a token", err)
			}
		})
	}
	if _, err := LoadRouterTokens(filepath.Join(dir, "missing")); err == nil {
		t.Errorf("LoadRouterTokens(missing file) = nil error")
	}
}

func TestAuthenticate(t *testing.T) {
	loop := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}}
	remote := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 1}}
	mapped := &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("::ffff:10.1.2.3"), Port: 1}}
	v6loop := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv6loopback, Port: 1}}
	unix := &peer.Peer{Addr: &net.UnixAddr{Name: "/run/reserver.sock", Net: "unix"}}
	none := newAuthenticator(Config{})
	with := newAuthenticator(Config{Token: "s", RouterTokens: map[string]string{"r": "rt"}, RouterRoleTokens: []string{"any"}, AuditTokens: []string{"au"}})
	runAuthCases(t, []authCase{
		{"no token, loopback v4", none, incoming(loop), codes.OK, principal{role: roleAdmin}},
		{"no token, loopback v6", none, incoming(v6loop), codes.OK, principal{role: roleAdmin}},
		{"no token, unix socket", none, incoming(unix), codes.OK, principal{role: roleAdmin}},
		{"no token, remote peer", none, incoming(remote), codes.PermissionDenied, principal{}},
		{"no token, v4-mapped remote", none, incoming(mapped), codes.PermissionDenied, principal{}},
		{"no token, no peer", none, incoming(nil), codes.PermissionDenied, principal{}},
		{"token, loopback but none sent", with, incoming(loop), codes.Unauthenticated, principal{}},
		{"shared", with, incoming(remote, "Bearer s"), codes.OK, principal{role: roleAdmin}},
		{"lower-case scheme", with, incoming(remote, "bearer s"), codes.OK, principal{role: roleAdmin}},
		{"router", with, incoming(remote, "Bearer rt"), codes.OK, principal{role: roleRouter, router: "r"}},
		{"router token", with, incoming(remote, "Bearer any"), codes.OK, principal{role: roleRouter}},
		{"audit", with, incoming(remote, "Bearer au"), codes.OK, principal{role: roleAudit}},
		{"basic scheme", with, incoming(remote, "Basic s"), codes.Unauthenticated, principal{}},
		{"bare token", with, incoming(remote, "s"), codes.Unauthenticated, principal{}},
		{"unknown", with, incoming(remote, "Bearer nope"), codes.Unauthenticated, principal{}},
	})
}

// incoming is the context of a call from p (nil: no peer) with auth, if
// given, as its authorization metadata.
func incoming(p *peer.Peer, auth ...string) context.Context {
	c := context.Background()
	if p != nil {
		c = peer.NewContext(c, p)
	}
	if len(auth) > 0 {
		c = metadata.NewIncomingContext(c, metadata.Pairs("authorization", auth[0]))
	}
	return c
}

// authCase is a call an authenticator authenticates: the status code and
// principal it must give.
type authCase struct {
	name string
	a    *authenticator
	ctx  context.Context
	code codes.Code
	want principal
}

func runAuthCases(t *testing.T, cases []authCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, st := tc.a.authenticate(tc.ctx)
			if st.Code() != tc.code || p != tc.want {
				t.Fatalf("authenticate = %+v, %v; want %+v, %s", p, st.Err(), tc.want, tc.code)
			}
		})
	}
}

// tlsPeer is a remote peer whose TLS handshake presented leaf, verified
// against the client CA or not.
func tlsPeer(leaf *x509.Certificate, verified bool) *peer.Peer {
	st := tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
	if verified {
		st.VerifiedChains = [][]*x509.Certificate{{leaf}}
	}
	return &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 1}, AuthInfo: credentials.TLSInfo{State: st}}
}

func TestAuthenticateClientCert(t *testing.T) {
	cert := func(cn string, dns ...string) *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, DNSNames: dns}
	}
	loop := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}}
	certs := newAuthenticator(Config{ClientCerts: true, AdminIdentities: []string{"ops"}, AuditIdentities: []string{"aud"}})
	both := newAuthenticator(Config{Token: "s", RouterTokens: map[string]string{"r": "rt"}, ClientCerts: true})
	tokensOnly := newAuthenticator(Config{Token: "s"})
	none := newAuthenticator(Config{})
	runAuthCases(t, []authCase{
		{"SAN is the router", certs, incoming(tlsPeer(cert("cn", "router-a", "router-b"), true)), codes.OK, principal{role: roleRouter, router: "router-a"}},
		{"CommonName without SAN", certs, incoming(tlsPeer(cert("router-c"), true)), codes.OK, principal{role: roleRouter, router: "router-c"}},
		{"admin identity", certs, incoming(tlsPeer(cert("ops"), true)), codes.OK, principal{role: roleAdmin}},
		{"audit identity", certs, incoming(tlsPeer(cert("x", "aud"), true)), codes.OK, principal{role: roleAudit}},
		{"unverified certificate", certs, incoming(tlsPeer(cert("ops", "ops"), false)), codes.Unauthenticated, principal{}},
		{"no certificate, loopback", certs, incoming(loop), codes.Unauthenticated, principal{}},
		{"no identity in certificate", certs, incoming(tlsPeer(cert(""), true)), codes.Unauthenticated, principal{}},
		{"identity unusable as router", certs, incoming(tlsPeer(cert("a/b"), true)), codes.PermissionDenied, principal{}},
		{"no tokens configured, token sent", certs, incoming(tlsPeer(cert("ops"), true), "Bearer s"), codes.Unauthenticated, principal{}},
		{"token wins", both, incoming(tlsPeer(cert("r2"), true), "Bearer s"), codes.OK, principal{role: roleAdmin}},
		{"router token wins", both, incoming(tlsPeer(cert("r2"), true), "Bearer rt"), codes.OK, principal{role: roleRouter, router: "r"}},
		{"unknown token, good certificate", both, incoming(tlsPeer(cert("r2"), true), "Bearer nope"), codes.Unauthenticated, principal{}},
		{"malformed authorization, good certificate", both, incoming(tlsPeer(cert("r2"), true), "Basic s"), codes.Unauthenticated, principal{}},
		{"certificate alone, tokens configured too", both, incoming(tlsPeer(cert("r2"), true)), codes.OK, principal{role: roleRouter, router: "r2"}},
		{"certificates not configured: ignored", tokensOnly, incoming(tlsPeer(cert("r2"), true)), codes.Unauthenticated, principal{}},
		{"nothing configured: remote certificate still refused", none, incoming(tlsPeer(cert("ops"), true)), codes.PermissionDenied, principal{}},
	})
	if !none.loopbackOnly() || certs.loopbackOnly() || tokensOnly.loopbackOnly() {
		t.Errorf("loopbackOnly: none=%v certs=%v tokens=%v, want true false false", none.loopbackOnly(), certs.loopbackOnly(), tokensOnly.loopbackOnly())
	}
}

func TestAuthorize(t *testing.T) {
	admin, router, audit := principal{role: roleAdmin}, principal{role: roleRouter, router: "r"}, principal{role: roleAudit}
	anyRouter := principal{role: roleRouter}
	k, other := holderkey.New(), holderkey.New()
	own := "r/" + k.Suffix()
	withKey := func(vals ...string) context.Context {
		md := metadata.MD{}
		for _, v := range vals {
			md.Append(holderkey.MetadataKey, v)
		}
		return metadata.NewIncomingContext(context.Background(), md)
	}
	kctx, none := withKey(k.Encode()), context.Background()
	for _, tc := range []struct {
		name   string
		p      principal
		ctx    context.Context
		acc    access
		holder string
		want   string // "" allowed, else a part of the PermissionDenied message
	}{
		{"admin admin", admin, none, accessAdmin, "", ""},
		{"admin any holder without a key", admin, none, accessHolder, "x/1", ""},
		{"router own holder", router, kctx, accessHolder, own, ""},
		{"router own tag, another nonce", router, kctx, accessHolder, "r/" + k.Suffix(), ""},
		{"router own holder, key in upper case", router, withKey(strings.ToUpper(k.Encode())), accessHolder, own, ""},
		{"router no key", router, none, accessHolder, own, "sent no holder key"},
		{"router two keys", router, withKey(k.Encode(), k.Encode()), accessHolder, own, "sent 2 holder keys"},
		{"router malformed key", router, withKey("abc"), accessHolder, own, "malformed holder key"},
		{"router wrong key", router, withKey(other.Encode()), accessHolder, own, "is not"},
		{"router other router's holder", router, kctx, accessHolder, "s/" + other.Suffix(), "is not"},
		{"router wrong prefix, own key", router, kctx, accessHolder, "s/" + k.Suffix(), `not "s/`},
		{"router name prefix only", router, kctx, accessHolder, "rr/" + k.Suffix(), `not "rr/`},
		{"router nested name", router, kctx, accessHolder, "r/x/" + k.Suffix(), `not "r/x/`},
		{"router bare name", router, kctx, accessHolder, "r", "is not"},
		{"router random suffix", router, kctx, accessHolder, "r/0123456789abcdef", "is not"},
		{"router empty holder", router, kctx, accessHolder, "", "is not"},
		{"router read", router, none, accessRead, "", ""},
		{"router admin", router, kctx, accessAdmin, "", "needs the shared"},
		{"router token any name", anyRouter, kctx, accessHolder, "whoever/" + k.Suffix(), ""},
		{"router token no key", anyRouter, none, accessHolder, "whoever/" + k.Suffix(), "sent no holder key"},
		{"router token other session", anyRouter, kctx, accessHolder, "whoever/" + other.Suffix(), "is not"},
		{"router token admin", anyRouter, kctx, accessAdmin, "", "needs the shared"},
		{"audit read", audit, none, accessRead, "", ""},
		{"audit holder with a key", audit, kctx, accessHolder, own, "may only read"},
		{"audit admin", audit, none, accessAdmin, "", "needs the shared"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := authorize(tc.ctx, tc.p, "M", tc.acc, ledgerHolder(tc.holder))
			if tc.want == "" {
				if st != nil {
					t.Fatalf("authorize = %v, want allowed", st.Err())
				}
				return
			}
			if st == nil || st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), tc.want) {
				t.Fatalf("authorize = %v, want PermissionDenied containing %q", st.Err(), tc.want)
			}
			if strings.Contains(strings.ToLower(st.Message()), k.Encode()) {
				t.Errorf("message %q contains the key", st.Message())
			}
		})
	}
}
