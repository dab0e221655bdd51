package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test. Its files live in a
// temporary directory of its own, removed when the test ends.
type CA struct {
	// File is the CA certificate's PEM file: what a reserver's
	// --tls-client-ca-file or a router's --ledger-ca-file names.
	File string
	// Cert is the CA certificate.
	Cert *x509.Certificate

	dir string
	key *ecdsa.PrivateKey
}

// New makes a CA whose CommonName is name; its certificate is written to
// name-ca.pem.
func New(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("testpki: CA %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testpki: CA %s: %v", name, err)
	}
	ca := &CA{Cert: cert, dir: t.TempDir(), key: key}
	ca.File = ca.write(t, name+"-ca.pem", "CERTIFICATE", der)
	return ca
}

// Pool returns a certificate pool holding only the CA, for a tls.Config's
// RootCAs or ClientCAs.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue signs a leaf certificate with CommonName cn, the DNS and IP SANs
// given (either may be nil) and one extended key usage. It writes
// file.pem and file-key.pem and returns their paths and the parsed pair.
func (ca *CA) Issue(t testing.TB, file, cn string, dnsNames []string, ips []net.IP, usage x509.ExtKeyUsage) (certFile, keyFile string, pair tls.Certificate) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("testpki: issue %s: %v", file, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatalf("testpki: issue %s: %v", file, err)
	}
	certFile = ca.write(t, file+".pem", "CERTIFICATE", der)
	keyFile = ca.write(t, file+"-key.pem", "EC PRIVATE KEY", kder)
	pair, err = tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatalf("testpki: issue %s: %v", file, err)
	}
	return certFile, keyFile, pair
}

// Server issues a server certificate for a reserver on loopback: name is
// its CommonName and DNS SAN, 127.0.0.1 its IP SAN. The files are name.pem
// and name-key.pem.
func (ca *CA) Server(t testing.TB, name string) (certFile, keyFile string, pair tls.Certificate) {
	t.Helper()
	return ca.Issue(t, name, name, []string{name}, []net.IP{net.IPv4(127, 0, 0, 1)}, x509.ExtKeyUsageServerAuth)
}

// Client issues a client certificate whose CommonName and only DNS SAN are
// name: to a reserver with this CA as client CA, the identity name (a
// router's --id, or an admin or audit identity). The files are name.pem
// and name-key.pem.
func (ca *CA) Client(t testing.TB, name string) (certFile, keyFile string, pair tls.Certificate) {
	t.Helper()
	return ca.Issue(t, name, name, []string{name}, nil, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) write(t testing.TB, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("testpki: %v", err)
	}
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testpki: generate key: %v", err)
	}
	return key
}

// serial returns a random 127-bit serial number, so certificates of
// different CAs and tests never share one.
func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatalf("testpki: serial: %v", err)
	}
	return n.Add(n, big.NewInt(1)) // never 0
}
