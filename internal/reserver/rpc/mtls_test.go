package rpc_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/remote"
	"github.com/leasehold/leasehold/internal/reserver/rpc"
	"github.com/leasehold/leasehold/internal/testutil/testpki"
)

// mtlsServer serves cfg over TLS on loopback, requiring client
// certificates signed by ca, with a server certificate for 127.0.0.1.
func mtlsServer(t *testing.T, ca *testpki.CA, cfg rpc.Config) (ledger.Ledger, string) {
	t.Helper()
	_, _, pair := ca.Issue(t, "server", "reserver", nil, []net.IP{net.IPv4(127, 0, 0, 1)}, x509.ExtKeyUsageServerAuth)
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientCAs:    ca.Pool(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	})
	return serve(t, cfg, "127.0.0.1:0", grpc.Creds(creds))
}

// tlsClient dials url verifying the server against ca, presenting the
// client certificate in certFile/keyFile (none when empty) and token.
func tlsClient(t *testing.T, url string, ca *testpki.CA, certFile, keyFile, token string) *remote.Ledger {
	t.Helper()
	c, err := remote.Dial(url, remote.Options{Token: token, CAFile: ca.File, CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatalf("Dial(%s): %v", url, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestMTLSIdentities(t *testing.T) {
	ca := testpki.New(t, "leasehold-clients")
	l, url := mtlsServer(t, ca, rpc.Config{
		ClientCerts:     true,
		AdminIdentities: []string{"ops-admin"},
		AuditIdentities: []string{"auditor"},
	})
	ctx := t.Context()
	// The admin certificate has no SAN: its CommonName is its identity.
	adminCert, adminKey, _ := ca.Issue(t, "admin", "ops-admin", nil, nil, x509.ExtKeyUsageClientAuth)
	// A router certificate's first DNS SAN wins over its CommonName.
	aCert, aKey, _ := ca.Issue(t, "router-a", "ignored-cn", []string{"router-a", "router-b"}, nil, x509.ExtKeyUsageClientAuth)
	bCert, bKey, _ := ca.Issue(t, "router-b", "router-b", nil, nil, x509.ExtKeyUsageClientAuth)
	auditCert, auditKey, _ := ca.Issue(t, "auditor", "x", []string{"auditor"}, nil, x509.ExtKeyUsageClientAuth)

	admin := tlsClient(t, url, ca, adminCert, adminKey, "")
	if _, err := admin.Configure(ctx, spec); err != nil {
		t.Fatalf("Configure with an admin identity: %v", err)
	}
	b := tlsClient(t, url, ca, bCert, bKey, "")
	hb := holderOf(b, "router-b")
	if _, err := b.KeepAlive(ctx, "p", hb, time.Minute); err != nil {
		t.Fatalf("KeepAlive for %s as router-b: %v", hb, err)
	}
	bg, err := b.Acquire(ctx, acquireReq(hb, "b-1"))
	if err != nil {
		t.Fatalf("Acquire for %s as router-b: %v", hb, err)
	}

	a := tlsClient(t, url, ca, aCert, aKey, "")
	ha := holderOf(a, "router-a")
	before := state(t, l)
	// router-b's holder, and a router-b holder from router-a's own key.
	for _, h := range []ledger.HolderID{hb, holderOf(a, "router-b")} {
		for _, name := range []string{"KeepAlive", "Acquire", "Renew", "Resize", "Grow", "Release", "Reassert"} {
			err := calls(a, h, bg.Lease)[name](ctx)
			wantCode(t, fmt.Sprintf("%s for %s as router-a", name, h), err, codes.PermissionDenied, ledger.ErrPermissionDenied)
		}
	}
	for _, name := range []string{"Configure", "SetDraining", "Observe", "Sweep"} {
		err := calls(a, ha, bg.Lease)[name](ctx)
		wantCode(t, name+" as router-a", err, codes.PermissionDenied, ledger.ErrPermissionDenied)
	}
	if after := state(t, l); after != before {
		t.Errorf("refused calls changed the ledger:\n got %s\nwant %s", after, before)
	}

	if _, err := a.KeepAlive(ctx, "p", ha, time.Minute); err != nil {
		t.Fatalf("KeepAlive for %s as router-a: %v", ha, err)
	}
	g, err := a.Acquire(ctx, acquireReq(ha, "a-1"))
	if err != nil {
		t.Fatalf("Acquire for %s as router-a: %v", ha, err)
	}
	if _, err := a.Release(ctx, g.Lease.Ref(), ledger.Usage{}); err != nil {
		t.Errorf("Release of its own lease as router-a: %v", err)
	}
	if _, err := a.List(ctx, ledger.Filter{}); err != nil {
		t.Errorf("List as router-a: %v", err)
	}

	au := tlsClient(t, url, ca, auditCert, auditKey, "")
	if _, err := au.Stats(ctx, "p"); err != nil {
		t.Errorf("Stats as the audit identity: %v", err)
	}
	_, err = au.KeepAlive(ctx, "p", "auditor", time.Minute)
	wantCode(t, "KeepAlive as the audit identity", err, codes.PermissionDenied, ledger.ErrPermissionDenied)
	_, err = au.Configure(ctx, spec)
	wantCode(t, "Configure as the audit identity", err, codes.PermissionDenied, ledger.ErrPermissionDenied)

	// The admin identity may act for any holder.
	if _, err := admin.Renew(ctx, bg.Lease.Ref(), time.Minute); err != nil {
		t.Errorf("Renew of router-b's lease as the admin identity: %v", err)
	}
}

// TestMTLSTokenWins: with tokens and a client CA, a token that is sent
// decides, whatever the certificate says; without one the certificate does.
func TestMTLSTokenWins(t *testing.T) {
	ca := testpki.New(t, "leasehold-clients")
	cfg := authConfig()
	cfg.ClientCerts = true
	_, url := mtlsServer(t, ca, cfg)
	ctx := t.Context()
	aCert, aKey, _ := ca.Issue(t, "router-a", "router-a", []string{"router-a"}, nil, x509.ExtKeyUsageClientAuth)

	if _, err := tlsClient(t, url, ca, aCert, aKey, sharedToken).Configure(ctx, spec); err != nil {
		t.Fatalf("Configure with router-a's certificate and the shared token: %v", err)
	}
	asB := tlsClient(t, url, ca, aCert, aKey, tokB)
	if _, err := asB.KeepAlive(ctx, "p", holderOf(asB, "router-b"), time.Minute); err != nil {
		t.Errorf("KeepAlive for router-b with router-b's token over router-a's certificate: %v", err)
	}
	_, err := asB.KeepAlive(ctx, "p", holderOf(asB, "router-a"), time.Minute)
	wantCode(t, "KeepAlive for router-a with router-b's token", err, codes.PermissionDenied, ledger.ErrPermissionDenied)
	bad := tlsClient(t, url, ca, aCert, aKey, "not-a-token")
	_, err = bad.KeepAlive(ctx, "p", holderOf(bad, "router-a"), time.Minute)
	wantCode(t, "KeepAlive with an unknown token and a good certificate", err, codes.Unauthenticated, remote.ErrUnauthenticated)
	asA := tlsClient(t, url, ca, aCert, aKey, "")
	if _, err := asA.KeepAlive(ctx, "p", holderOf(asA, "router-a"), time.Minute); err != nil {
		t.Errorf("KeepAlive for router-a with router-a's certificate alone: %v", err)
	}
}

// TestMTLSRefused: without a certificate, or with one the client CA did not
// sign, nothing is served.
func TestMTLSRefused(t *testing.T) {
	ca := testpki.New(t, "leasehold-clients")
	l, url := mtlsServer(t, ca, rpc.Config{ClientCerts: true, AdminIdentities: []string{"ops-admin"}})
	other := testpki.New(t, "someone-else")
	// Same names as the trusted ones, signed by the other CA.
	uCert, uKey, _ := other.Issue(t, "untrusted-admin", "ops-admin", []string{"ops-admin"}, nil, x509.ExtKeyUsageClientAuth)
	for _, tc := range []struct {
		name            string
		certFile, keyFl string
	}{
		{"no client certificate", "", ""},
		{"untrusted client certificate", uCert, uKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tlsClient(t, url, ca, tc.certFile, tc.keyFl, "")
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			for name, call := range calls(c, "ops-admin", ledger.Lease{Pool: "p", Engine: "e1"}) {
				err := call(ctx)
				if code := status.Code(err); code != codes.Unavailable && code != codes.Unauthenticated {
					t.Errorf("%s: %v (code %s), want the handshake to fail (Unavailable) or Unauthenticated", name, err, code)
				}
			}
		})
	}
	if ps, err := l.Pools(t.Context()); err != nil || len(ps) != 0 {
		t.Errorf("Pools after refused calls = %v, %v; want none configured", ps, err)
	}
}
