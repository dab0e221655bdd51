package ledgerurl

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/memory"
	"github.com/leasehold/leasehold/internal/reserver/rpc"
	"github.com/leasehold/leasehold/internal/testutil/etcdserver"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, etcdserver.IgnoreLeaks()...) }

func TestOpenRejectsBadURLs(t *testing.T) {
	for _, tc := range []struct{ name, url string }{
		{"no scheme", "localhost:6379"},
		{"unknown scheme", "zookeeper://h:1"},
		{"memory with host", "memory://somewhere"},
		{"etcd without port", "etcd://host"},
		{"redis bad db", "redis://127.0.0.1:1/notanumber"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Open(tc.url, Options{})
			if err == nil {
				l.Close()
				t.Fatalf("Open(%q) succeeded, want an error", tc.url)
			}
		})
	}
	if _, err := Open("zookeeper://h:1", Options{}); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Errorf("unknown scheme error %v, want ErrInvalidArgument", err)
	}
}

// TestOpenEveryBackend configures a pool and takes a lease through each URL
// scheme against a real server.
func TestOpenEveryBackend(t *testing.T) {
	rs := redisserver.Start(t)
	es := etcdserver.Start(t, t.TempDir())
	grpcURL := serveReserver(t)
	for _, url := range []string{"memory://", rs.URL(), "etcd://" + es.HostPort() + "/ledgerurl", grpcURL} {
		t.Run(url, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l, err := Open(url, Options{Options: ledger.Options{RecoveryWindow: -1}})
			if err != nil {
				t.Fatalf("Open(%q): %v", url, err)
			}
			defer l.Close()
			spec := ledger.PoolSpec{
				Name:       "p",
				Engines:    []ledger.EngineSpec{{ID: "e", KVTokens: 100, Slots: 1}},
				Tenants:    []ledger.TenantSpec{{Name: "t", KVShare: 1}},
				Priorities: []ledger.PrioritySpec{{Name: "std", MaxFill: 1}},
			}
			if _, err := l.Configure(ctx, spec); err != nil {
				t.Fatalf("Configure: %v", err)
			}
			if _, err := l.KeepAlive(ctx, "p", "h", 5*time.Second); err != nil {
				t.Fatalf("KeepAlive: %v", err)
			}
			g, err := l.Acquire(ctx, ledger.AcquireRequest{Pool: "p", Candidates: []ledger.EngineID{"e"}, Tenant: "t",
				Priority: "std", KVTokens: 100, Slots: 1, Holder: "h", RequestID: "r", TTL: 5 * time.Second})
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			if _, err := l.Acquire(ctx, ledger.AcquireRequest{Pool: "p", Candidates: []ledger.EngineID{"e"}, Tenant: "t",
				Priority: "std", KVTokens: 1, Slots: 1, Holder: "h", RequestID: "r2", TTL: 5 * time.Second}); ledger.AsRejection(err) == nil {
				t.Fatalf("second Acquire on a full engine: %v, want a rejection", err)
			}
			if r, err := l.Release(ctx, g.Lease.Ref(), ledger.Usage{}); err != nil || !r.Released {
				t.Fatalf("Release = %+v, %v", r, err)
			}
		})
	}
}

// serveReserver serves a memory ledger over gRPC on a loopback port with no
// token (loopback-only) and returns its grpc:// URL.
func serveReserver(t *testing.T) string {
	t.Helper()
	srv, err := rpc.NewGRPCServer(memory.New(ledger.Options{RecoveryWindow: -1}, nil), rpc.Config{})
	if err != nil {
		t.Fatalf("rpc server: %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return "grpc://" + lis.Addr().String()
}
