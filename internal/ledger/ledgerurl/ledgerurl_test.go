package ledgerurl

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/ledgertest"
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
// scheme against a real server; grpc:// is tested beside the server, in
// the reserver's rpc/roundtrip tests.
func TestOpenEveryBackend(t *testing.T) {
	rs := redisserver.Start(t)
	es := etcdserver.Start(t, t.TempDir())
	for _, url := range []string{"memory://", rs.URL(), "etcd://" + es.HostPort() + "/ledgerurl"} {
		t.Run(url, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l, err := Open(url, Options{Options: ledger.Options{RecoveryWindow: -1}})
			if err != nil {
				t.Fatalf("Open(%q): %v", url, err)
			}
			defer l.Close()
			ledgertest.Smoke(ctx, t, l)
		})
	}
}
