package remote

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/memory"
	"github.com/leasehold/leasehold/internal/reserver/rpc"
)

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"grpc://127.0.0.1:7070", "127.0.0.1:7070", ""},
		{"grpc://reserver.internal:7070/", "reserver.internal:7070", ""},
		{"grpc://[::1]:7070", "[::1]:7070", ""},
		{"redis://127.0.0.1:6379", "", "scheme"},
		{"grpc://127.0.0.1", "", "want grpc://host:port"},
		{"grpc://host:1/path", "", "want grpc://host:port"},
		{"grpc://u:p@host:1", "", "want grpc://host:port"},
		{"127.0.0.1:7070", "", "ledger URL"},
	} {
		got, err := ParseTarget(tc.in)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("ParseTarget(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParseTarget(%q) error = %v, want one containing %q", tc.in, err, tc.err)
		}
	}
	if _, err := Dial("grpc://127.0.0.1:1", Options{CertFile: "x"}); err == nil {
		t.Errorf("Dial with a cert file and no key file succeeded")
	}
	if _, err := Dial("grpc://127.0.0.1:1", Options{CAFile: filepath.Join(t.TempDir(), "missing.pem")}); err == nil {
		t.Errorf("Dial with a missing CA file succeeded")
	}
}

func TestClosedAndUnreachable(t *testing.T) {
	r := startReserver(t, memory.New(ledger.Options{}, nil), rpc.Config{Token: testToken})
	c := dial(t, r, Options{Token: testToken})
	ctx := t.Context()
	if _, err := c.Pools(ctx); err != nil {
		t.Fatalf("Pools: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Pools(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Pools with a cancelled ctx error = %v, want context.Canceled", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := c.Pools(ctx); !errors.Is(err, ledger.ErrClosed) {
		t.Errorf("Pools after Close error = %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	// A reserver that is gone: the error matches no sentinel (outcome
	// unknown), and the call fails fast rather than hanging.
	c2 := dial(t, r, Options{Token: testToken})
	r.stop()
	start := time.Now()
	_, err := c2.Acquire(ctx, ledger.AcquireRequest{Pool: "p"})
	if err == nil || errors.Is(err, ledger.ErrClosed) || errors.Is(err, ledger.ErrInvalidArgument) || ledger.AsRejection(err) != nil {
		t.Errorf("Acquire on a stopped reserver error = %v, want a transport error matching no sentinel", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Acquire on a stopped reserver took %s, want it to fail fast", d)
	}
}

// TestMutualTLS serves over TLS requiring a client certificate, and checks a
// client with the CA and its certificate gets through, one without its
// certificate or without the CA does not.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCert(t, dir, "ca", nil, nil)
	_, _ = newCert(t, dir, "server", ca, caKey)
	_, _ = newCert(t, dir, "client", ca, caKey)
	serverCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	})
	r := startReserver(t, memory.New(ledger.Options{}, nil), rpc.Config{Token: testToken}, grpc.Creds(creds))

	good := dial(t, r, Options{Token: testToken, CAFile: filepath.Join(dir, "ca.pem"),
		CertFile: filepath.Join(dir, "client.pem"), KeyFile: filepath.Join(dir, "client.key")})
	if _, err := good.Pools(t.Context()); err != nil {
		t.Fatalf("Pools over mTLS: %v", err)
	}
	noCert := dial(t, r, Options{Token: testToken, CAFile: filepath.Join(dir, "ca.pem")})
	if _, err := noCert.Pools(t.Context()); err == nil {
		t.Errorf("Pools over TLS without a client certificate succeeded")
	}
	noCA := dial(t, r, Options{Token: testToken, TLS: true, CertFile: filepath.Join(dir, "client.pem"), KeyFile: filepath.Join(dir, "client.key")})
	if _, err := noCA.Pools(t.Context()); err == nil {
		t.Errorf("Pools over TLS trusting only the system roots succeeded")
	}
	plain := dial(t, r, Options{Token: testToken})
	if _, err := plain.Pools(t.Context()); err == nil {
		t.Errorf("Pools in plaintext against a TLS reserver succeeded")
	}
}

// newCert writes name.pem and name.key in dir: a CA when parent is nil,
// else a leaf for 127.0.0.1 signed by parent.
func newCert(t *testing.T, dir, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign
	} else {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for file, block := range map[string]*pem.Block{
		name + ".pem": {Type: "CERTIFICATE", Bytes: der},
		name + ".key": {Type: "EC PRIVATE KEY", Bytes: kb},
	} {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return cert, key
}
