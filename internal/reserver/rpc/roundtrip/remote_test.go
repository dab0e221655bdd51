package roundtrip

import (
	"context"
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/ledgertest"
	"github.com/leasehold/leasehold/internal/ledger/ledgerurl"
	"github.com/leasehold/leasehold/internal/ledger/memory"
	"github.com/leasehold/leasehold/internal/ledger/remote"
	"github.com/leasehold/leasehold/internal/reserver/rpc"
	"github.com/leasehold/leasehold/internal/testutil/testpki"
)

func TestClosedAndUnreachable(t *testing.T) {
	r := startReserver(t, memory.New(ledger.Options{}, nil), rpc.Config{Token: testToken})
	c := dial(t, r, remote.Options{Token: testToken})
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
	c2 := dial(t, r, remote.Options{Token: testToken})
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
	ca := testpki.New(t, "ca")
	_, _, serverCert := ca.Server(t, "server")
	clientCert, clientKey, _ := ca.Client(t, "client")
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert}, ClientCAs: ca.Pool(),
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	})
	r := startReserver(t, memory.New(ledger.Options{}, nil), rpc.Config{Token: testToken}, grpc.Creds(creds))

	good := dial(t, r, remote.Options{Token: testToken, CAFile: ca.File, CertFile: clientCert, KeyFile: clientKey})
	if _, err := good.Pools(t.Context()); err != nil {
		t.Fatalf("Pools over mTLS: %v", err)
	}
	noCert := dial(t, r, remote.Options{Token: testToken, CAFile: ca.File})
	if _, err := noCert.Pools(t.Context()); err == nil {
		t.Errorf("Pools over TLS without a client certificate succeeded")
	}
	noCA := dial(t, r, remote.Options{Token: testToken, TLS: true, CertFile: clientCert, KeyFile: clientKey})
	if _, err := noCA.Pools(t.Context()); err == nil {
		t.Errorf("Pools over TLS trusting only the system roots succeeded")
	}
	plain := dial(t, r, remote.Options{Token: testToken})
	if _, err := plain.Pools(t.Context()); err == nil {
		t.Errorf("Pools in plaintext against a TLS reserver succeeded")
	}
}

// TestOpenGRPC opens a grpc:// --ledger URL with ledgerurl against a
// reserver with no token (loopback-only) and takes a lease through it.
func TestOpenGRPC(t *testing.T) {
	r := startReserver(t, memory.New(ledger.Options{RecoveryWindow: -1}, nil), rpc.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := ledgerurl.Open(r.URL(), ledgerurl.Options{Options: ledger.Options{RecoveryWindow: -1}})
	if err != nil {
		t.Fatalf("Open(%q): %v", r.URL(), err)
	}
	defer l.Close()
	ledgertest.Smoke(ctx, t, l)
}
