package roundtrip

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/remote"
	"github.com/leasehold/leasehold/internal/reserver/rpc"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testToken is the shared token of the test reservers.
const testToken = "test-shared-token"

// reserver is a gRPC ledger server on a real loopback TCP port, as a
// reserver process would run it; restart brings it back on the same port
// with another ledger.
type reserver struct {
	t    testing.TB
	cfg  rpc.Config
	opts []grpc.ServerOption
	addr string

	mu sync.Mutex // guards l, g and doneC
	l  ledger.Ledger
	g  *grpc.Server
	// doneC is closed when the current Serve returns.
	doneC chan struct{}
}

// startReserver serves l with cfg on a free loopback port until the test
// ends; it closes l then.
func startReserver(t testing.TB, l ledger.Ledger, cfg rpc.Config, opts ...grpc.ServerOption) *reserver {
	t.Helper()
	r := &reserver{t: t, cfg: cfg, opts: opts, addr: "127.0.0.1:0"}
	r.serve(l)
	t.Cleanup(r.stop)
	return r
}

// URL returns the --ledger URL of the reserver.
func (r *reserver) URL() string { return "grpc://" + r.addr }

func (r *reserver) serve(l ledger.Ledger) {
	r.t.Helper()
	var lis net.Listener
	var err error
	for range 100 { // the port may linger briefly after a stop
		if lis, err = net.Listen("tcp", r.addr); !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		r.t.Fatalf("listen on %s: %v", r.addr, err)
	}
	g, err := rpc.NewGRPCServer(l, r.cfg, r.opts...)
	if err != nil {
		r.t.Fatalf("rpc.NewGRPCServer: %v", err)
	}
	doneC := make(chan struct{})
	go func() {
		defer close(doneC)
		_ = g.Serve(lis)
	}()
	r.mu.Lock()
	r.addr, r.l, r.g, r.doneC = lis.Addr().String(), l, g, doneC
	r.mu.Unlock()
}

// stop stops serving (dropping every connection) and closes the ledger.
func (r *reserver) stop() {
	r.mu.Lock()
	l, g, doneC := r.l, r.g, r.doneC
	r.l, r.g, r.doneC = nil, nil, nil
	r.mu.Unlock()
	if g == nil {
		return
	}
	g.Stop()
	<-doneC
	_ = l.Close()
}

// restart stops the reserver and serves l on the same port; c, a client of
// the reserver, is reconnected before restart returns: restart calls c
// until a call succeeds. A call on the dropped connection fails, so the
// first success has gone to the restarted reserver.
func (r *reserver) restart(l ledger.Ledger, c *remote.Ledger) {
	r.t.Helper()
	r.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.serve(l)
	for {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Pools(cctx)
		ccancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			r.t.Fatalf("client did not reconnect to the restarted reserver: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dial returns a client of r with opts, closed when the test ends.
func dial(t testing.TB, r *reserver, opts remote.Options) *remote.Ledger {
	t.Helper()
	c, err := remote.Dial(r.URL(), opts)
	if err != nil {
		t.Fatalf("remote.Dial(%s): %v", r.URL(), err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
