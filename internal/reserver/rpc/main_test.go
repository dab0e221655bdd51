package rpc_test

import (
	"net"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/memory"
	"github.com/leasehold/leasehold/internal/ledger/remote"
	"github.com/leasehold/leasehold/internal/reserver/rpc"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// serve serves a fresh memory ledger with cfg and opts (credentials) on a
// TCP listener at addr ("127.0.0.1:0" for loopback) until the test ends,
// and returns the ledger (for checks behind the server's back) and the
// reserver's URL.
func serve(t *testing.T, cfg rpc.Config, addr string, opts ...grpc.ServerOption) (*memory.Ledger, string) {
	t.Helper()
	l := memory.New(ledger.Options{RecoveryWindow: -1}, nil)
	g, err := rpc.NewGRPCServer(l, cfg, opts...)
	if err != nil {
		t.Fatalf("NewGRPCServer: %v", err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	doneC := make(chan struct{})
	go func() {
		defer close(doneC)
		_ = g.Serve(lis)
	}()
	t.Cleanup(func() {
		g.Stop()
		<-doneC
		_ = l.Close()
	})
	return l, "grpc://" + lis.Addr().String()
}

// client dials url with token, closed when the test ends.
func client(t *testing.T, url, token string) *remote.Ledger {
	t.Helper()
	c, err := remote.Dial(url, remote.Options{Token: token})
	if err != nil {
		t.Fatalf("Dial(%s): %v", url, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
