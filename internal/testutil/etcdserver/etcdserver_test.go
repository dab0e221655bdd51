package etcdserver

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, IgnoreLeaks()...)
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
