package reserver_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/remote"
	"github.com/leasehold/leasehold/internal/reserver"
)

// pki writes a CA and certificates it signs into a temporary directory.
type pki struct {
	dir    string
	ca     *x509.Certificate
	key    *ecdsa.PrivateKey
	serial int64
}

func newPKI(t *testing.T) (*pki, string) {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	var err error
	if p.key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &p.key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	if p.ca, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	return p, p.write(t, "ca.pem", "CERTIFICATE", der)
}

func (p *pki) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	f := filepath.Join(p.dir, name)
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// issue returns the certificate and key files of a leaf named name (its
// first DNS SAN), for a server at 127.0.0.1 or a client.
func (p *pki) issue(t *testing.T, name string, server bool) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial + 1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+"-key.pem", "EC PRIVATE KEY", kder)
}

// TestMTLSWithoutToken: a reserver with a client CA and no token serves
// remote routers identified by their certificates (the flags are wired
// through to the gRPC service): a router acts for its own holders only and
// an admin identity may configure.
func TestMTLSWithoutToken(t *testing.T) {
	p, caFile := newPKI(t)
	srvCert, srvKey := p.issue(t, "reserver", true)
	r := start(t, writeFile(t, t.TempDir(), "fleet.yaml", fleetYAML), func(c *reserver.Config) {
		c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = srvCert, srvKey, caFile
		c.AdminIdentities = []string{"ops"}
	})
	dialCert := func(name string) *remote.Ledger {
		cert, key := p.issue(t, name, false)
		c, err := remote.Dial("grpc://"+r.GRPCAddr(), remote.Options{CAFile: caFile, CertFile: cert, KeyFile: key})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ctx := t.Context()
	a := dialCert("router-a")
	keepAlive(t, a, "router-a/x", 10*time.Second)
	acquire(t, a, "router-a/x", "r1", "gpu-0", 1000)
	if _, err := a.KeepAlive(ctx, "llama", "router-b/x", time.Second); status.Code(err) != codes.PermissionDenied {
		t.Errorf("KeepAlive for router-b/x as router-a = %v, want PermissionDenied", err)
	}
	spec := ledger.PoolSpec{Name: "other", Engines: []ledger.EngineSpec{{ID: "e", KVTokens: 10, Slots: 1}}}
	if _, err := a.Configure(ctx, spec); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Configure as router-a = %v, want PermissionDenied", err)
	}
	if _, err := dialCert("ops").Configure(ctx, spec); err != nil {
		t.Errorf("Configure as the admin identity: %v", err)
	}
}
