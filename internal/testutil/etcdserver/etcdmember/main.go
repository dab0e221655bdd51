// Command etcdmember runs one member of a multi-member etcd cluster for
// tests (etcdserver.StartCluster) as its own process, so that a test can
// SIGKILL it: an embedded etcd (server/v3/embed) with the tests' settings
// (no fsync, quiet logs) and the cluster given by flags. It serves until
// SIGTERM or SIGINT, then closes the member.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "etcdmember:", err)
		os.Exit(1)
	}
}

func run() error {
	name := flag.String("name", "", "member name")
	dir := flag.String("data-dir", "", "data directory")
	client := flag.String("client", "", "client URL (http://127.0.0.1:port)")
	peer := flag.String("peer", "", "peer URL (http://127.0.0.1:port)")
	cluster := flag.String("initial-cluster", "", "name=peerURL,... of every member")
	state := flag.String("initial-cluster-state", "new", "new, or existing (a member rejoining)")
	tick := flag.Duration("tick", 50*time.Millisecond, "Raft heartbeat interval")
	election := flag.Duration("election", 500*time.Millisecond, "Raft election timeout")
	flag.Parse()
	cu, err := url.Parse(*client)
	if err != nil {
		return fmt.Errorf("--client: %w", err)
	}
	pu, err := url.Parse(*peer)
	if err != nil {
		return fmt.Errorf("--peer: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = *name, *dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.ListenMetricsUrls = nil
	cfg.InitialCluster, cfg.ClusterState = *cluster, *state
	cfg.InitialClusterToken = "leasehold-test"
	cfg.TickMs, cfg.ElectionMs = uint(tick.Milliseconds()), uint(election.Milliseconds())
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println("etcdmember: ready")
	case err := <-e.Err():
		return err
	case <-sig:
		return nil
	}
	select {
	case err := <-e.Err():
		return err
	case <-sig:
		return nil
	}
}
