package redisserver_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testutil/redisserver"
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
