package portprobe

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serveGRPC runs a gRPC server (TLS when creds are given) on a loopback
// port until the test ends and returns its address.
func serveGRPC(t *testing.T, opts ...grpc.ServerOption) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

func TestProbe(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	plain := httptest.NewServer(ok)
	defer plain.Close()
	tlsHTTP := httptest.NewTLSServer(ok)
	defer tlsHTTP.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts (the kernel does), never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	for _, tc := range []struct {
		name string
		addr string
		want Kind
	}{
		{"http", strings.TrimPrefix(plain.URL, "http://"), HTTP1},
		{"https", strings.TrimPrefix(tlsHTTP.URL, "https://"), HTTP1},
		{"grpc", serveGRPC(t), GRPC},
		{"grpc over tls", serveGRPC(t, grpc.Creds(credentials.NewServerTLSFromCert(&tlsHTTP.TLS.Certificates[0]))), Unknown},
		{"silent", silent.Addr().String(), Unknown},
		{"closed port", closedAddr, Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if got := Probe(ctx, tc.addr); got != tc.want {
				t.Errorf("Probe(%s) = %s, want %s", tc.addr, got, tc.want)
			}
		})
	}
}
