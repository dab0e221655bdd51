package redisserver_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testutil/redisserver"
	"github.com/leasehold/leasehold/internal/testutil/slow"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStartRestartFlush(t *testing.T) {
	srv := redisserver.Start(t)
	if srv.Addr() == "127.0.0.1:6379" {
		t.Fatalf("Addr = %s, want a port other than Redis's default", srv.Addr())
	}
	c := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	addr := srv.Addr()
	srv.Restart()
	if srv.Addr() != addr {
		t.Errorf("Restart moved the server from %s to %s, want the same port", addr, srv.Addr())
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Errorf("EXISTS k after Restart = %d, %v; want 0 (no persistence)", n, err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET after Restart: %v", err)
	}
	srv.FlushAll()
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("DBSIZE after FlushAll = %d, %v; want 0", n, err)
	}
}

// TestShardedClusterMigrate starts three masters, finds a key's slot on
// one of them, moves the slot to another with its keys, and reads the key
// there through a cluster client.
func TestShardedClusterMigrate(t *testing.T) {
	c := redisserver.StartShardedCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := c.Client()
	const key = "{pool-a}:state"
	if err := cc.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatalf("SET through the cluster client: %v", err)
	}
	slot := int(cc.ClusterKeySlot(ctx, key).Val())
	from, err := c.MasterOf(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	to := (from + 1) % 3
	m, err := c.MigrateSlot(ctx, slot, to, 0)
	if err != nil {
		t.Fatalf("MigrateSlot(%d to %d): %v", slot, to, err)
	}
	if m.Keys != 1 {
		t.Errorf("MigrateSlot moved %d keys, want 1", m.Keys)
	}
	if now, err := c.MasterOf(ctx, slot); err != nil || now != to {
		t.Errorf("slot %d on master %d (%v) after the move, want %d", slot, now, err, to)
	}
	if v, err := cc.Get(ctx, key).Result(); err != nil || v != "v" {
		t.Errorf("GET after the move = %q, %v; want v (the client follows MOVED)", v, err)
	}
}

// TestTopologySentinelFailover starts a primary, a replica and three Sentinels,
// SIGKILLs the primary and sees the replica promoted and announced.
func TestTopologySentinelFailover(t *testing.T) {
	slow.Topologies(t)
	primary := redisserver.Start(t)
	replica := redisserver.StartReplica(t, primary)
	s := redisserver.StartSentinels(t, primary, redisserver.SentinelConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if addr, err := s.MasterAddr(ctx); err != nil || addr != primary.Addr() {
		t.Fatalf("MasterAddr = %s, %v; want the primary %s", addr, err, primary.Addr())
	}
	switched, stop := s.SwitchMaster(ctx)
	defer stop()
	killed := time.Now()
	primary.Kill()
	promoted := redisserver.WaitRole(t, replica.Addr(), "master", 20*time.Second)
	select {
	case sw := <-switched:
		if sw.Addr != replica.Addr() {
			t.Errorf("+switch-master to %s, want the replica %s", sw.Addr, replica.Addr())
		}
		t.Logf("killed → promoted %s, → +switch-master %s", promoted.Sub(killed), sw.At.Sub(killed))
	case <-ctx.Done():
		t.Fatal("no +switch-master")
	}
	if addr, err := s.MasterAddr(ctx); err != nil || addr != replica.Addr() {
		t.Errorf("MasterAddr after failover = %s, %v; want the replica %s", addr, err, replica.Addr())
	}
}
