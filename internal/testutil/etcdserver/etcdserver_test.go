package etcdserver

import (
	"context"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testutil/slow"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(IgnoreLeaks(), goleak.Cleanup(func(code int) {
		RemoveBinaries()
		os.Exit(code)
	}))...)
}

func TestRestartKeepsWipeLoses(t *testing.T) {
	s := Start(t, t.TempDir())
	cli := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put: %v", err)
	}
	s.Restart()
	s.WaitReady(t, cli)
	resp, err := cli.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("after restart: got %v, %v; want k=v", resp, err)
	}
	s.Wipe()
	s.WaitReady(t, cli)
	resp, err = cli.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("after wipe: got %v, %v; want no k", resp, err)
	}
}

// TestTopologyClusterLeaderKill starts three members, SIGKILLs the leader,
// sees another elected and a write succeed, then restarts the killed member
// and reads the write from it.
func TestTopologyClusterLeaderKill(t *testing.T) {
	slow.Topologies(t)
	c := StartCluster(t, 3)
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "before"); err != nil {
		t.Fatalf("put: %v", err)
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	c.Kill(leader)
	for {
		wctx, wcancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Put(wctx, "k", "after")
		wcancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no write after the leader's kill: %v", err)
		}
	}
	t.Logf("killed the leader (member %d); a write succeeded %s later", leader, time.Since(killed).Round(time.Millisecond))
	now, err := c.Leader(ctx)
	if err != nil || now == leader {
		t.Errorf("leader after the kill: %d, %v; want another member than %d", now, err, leader)
	}
	c.Restart(leader)
	one := c.clientOf(t, c.Endpoints()[leader])
	defer one.Close()
	resp, err := one.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "after" {
		t.Errorf("read from the restarted member: %v, %v; want k=after", resp, err)
	}
}
