// Package etcdserver runs etcd for tests: an embedded single member
// (Start) with free loopback ports, fast elections, no fsync, no logging,
// whose Stop and Restart keep the data directory (a restart) and whose
// Wipe starts again with an empty one (a lost store); and a multi-member
// cluster (StartCluster, cluster.go) whose members are processes of the
// etcdmember command, so that a test can SIGKILL its leader.
package etcdserver

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/leasehold/leasehold/internal/freeport"
)

// startTimeout bounds how long a start may take before the test fails.
const startTimeout = 30 * time.Second

// Server is an embedded etcd member. Its endpoint stays the same across
// Stop, Restart and Wipe so that clients reconnect.
type Server struct {
	t       testing.TB
	dir     string
	client  url.URL
	peer    url.URL
	metrics url.URL

	// mu guards etcd.
	mu   sync.Mutex
	etcd *embed.Etcd // nil while stopped
}

// Start runs an etcd member with its data in dir/etcd (dir is usually
// t.TempDir()) and stops it when the test ends.
func Start(t testing.TB, dir string) *Server {
	t.Helper()
	s := &Server{t: t, dir: filepath.Join(dir, "etcd")}
	s.client = url.URL{Scheme: "http", Host: freeport.AddrT(t)}
	s.peer = url.URL{Scheme: "http", Host: freeport.AddrT(t)}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) config() *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = "leasehold-test"
	cfg.Dir = s.dir
	cfg.ListenClientUrls = []url.URL{s.client}
	cfg.AdvertiseClientUrls = []url.URL{s.client}
	cfg.ListenPeerUrls = []url.URL{s.peer}
	cfg.AdvertisePeerUrls = []url.URL{s.peer}
	cfg.ListenMetricsUrls = nil
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.InitialClusterToken = "leasehold-test"
	cfg.TickMs = 10
	cfg.ElectionMs = 100
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	return cfg
}

func (s *Server) start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.etcd != nil {
		return
	}
	var e *embed.Etcd
	var err error
	// A port found free may be taken by the time etcd binds it; the data
	// dir decides the member, so retrying the same ports is safe.
	for attempt := 0; attempt < 20; attempt++ {
		if e, err = embed.StartEtcd(s.config()); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("etcdserver: start: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		s.t.Fatalf("etcdserver: start: %v", err)
	case <-time.After(startTimeout):
		e.Close()
		s.t.Fatalf("etcdserver: not ready after %s", startTimeout)
	}
	s.etcd = e
}

// Endpoint is the client URL, "http://127.0.0.1:port".
func (s *Server) Endpoint() string { return s.client.String() }

// HostPort is the client address, for "etcd://host:port" ledger URLs.
func (s *Server) HostPort() string { return s.client.Host }

// Stop stops the member, keeping its data. Stopping twice is a no-op.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.etcd == nil {
		return
	}
	s.etcd.Close()
	<-s.etcd.Server.StopNotify()
	s.etcd = nil
}

// Restart stops the member and starts it again on the same data and ports.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Wipe stops the member, deletes its data and starts an empty one on the
// same ports: every key, lease and revision is gone.
func (s *Server) Wipe() {
	s.t.Helper()
	s.Stop()
	if err := os.RemoveAll(s.dir); err != nil {
		s.t.Fatalf("etcdserver: wipe %s: %v", s.dir, err)
	}
	s.start()
}

// Client returns a client of the member, closed when the test ends.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{s.Endpoint()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		// Reconnect quickly after Restart and Wipe (gRPC's default backoff
		// grows to minutes).
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 300 * time.Millisecond},
			MinConnectTimeout: time.Second,
		})},
	})
	if err != nil {
		t.Fatalf("etcdserver: client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// WaitReady blocks until the member answers a read, or fails the test.
func (s *Server) WaitReady(t testing.TB, cli *clientv3.Client) {
	t.Helper()
	if err := waitRead(cli); err != nil {
		t.Fatalf("etcdserver: not answering: %v", fmt.Errorf("%s: %w", s.Endpoint(), err))
	}
}

// waitRead retries a linearizable read through cli every 20 ms until one
// answers (nil) or startTimeout passes (the last error).
func waitRead(cli *clientv3.Client) error {
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "health")
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
