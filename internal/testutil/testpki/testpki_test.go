package testpki_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"testing"

	"github.com/leasehold/leasehold/internal/testutil/testpki"
)

// TestIssuedCertificatesVerify checks that Server and Client certificates
// verify against their CA, for their usage only, and not against another
// CA; and that the files on disk are the pair returned.
func TestIssuedCertificatesVerify(t *testing.T) {
	ca := testpki.New(t, "clients")
	other := testpki.New(t, "other")
	if _, err := os.Stat(ca.File); err != nil {
		t.Fatalf("CA file: %v", err)
	}
	srvCert, srvKey, srv := ca.Server(t, "reserver")
	_, _, cli := ca.Client(t, "router-a")
	if pair, err := tls.LoadX509KeyPair(srvCert, srvKey); err != nil || !pair.Leaf.Equal(srv.Leaf) {
		t.Errorf("server files do not hold the returned pair (err %v)", err)
	}
	for _, tc := range []struct {
		name    string
		pair    tls.Certificate
		roots   *testpki.CA
		usage   x509.ExtKeyUsage
		host    string
		wantErr bool
	}{
		{"server for 127.0.0.1", srv, ca, x509.ExtKeyUsageServerAuth, "127.0.0.1", false},
		{"server for its DNS name", srv, ca, x509.ExtKeyUsageServerAuth, "reserver", false},
		{"server for another name", srv, ca, x509.ExtKeyUsageServerAuth, "elsewhere", true},
		{"server as a client", srv, ca, x509.ExtKeyUsageClientAuth, "", true},
		{"client", cli, ca, x509.ExtKeyUsageClientAuth, "", false},
		{"client as a server", cli, ca, x509.ExtKeyUsageServerAuth, "", true},
		{"client against another CA", cli, other, x509.ExtKeyUsageClientAuth, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.pair.Leaf.Verify(x509.VerifyOptions{Roots: tc.roots.Pool(), KeyUsages: []x509.ExtKeyUsage{tc.usage}, DNSName: tc.host})
			if (err != nil) != tc.wantErr {
				t.Errorf("Verify = %v, want error %v", err, tc.wantErr)
			}
		})
	}
	if got := cli.Leaf.DNSNames; len(got) != 1 || got[0] != "router-a" || cli.Leaf.Subject.CommonName != "router-a" {
		t.Errorf("client identity: DNS SANs %v, CN %q; want [router-a] and router-a", got, cli.Leaf.Subject.CommonName)
	}
	if ips := srv.Leaf.IPAddresses; len(ips) != 1 || !ips[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("server IP SANs %v, want [127.0.0.1]", ips)
	}
}
