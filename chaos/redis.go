package chaos

// The run's own redis-server (topology.ledger redis): empty, no
// persistence, on a free loopback port, restartable to lose the ledger.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"
)

func (c *cluster) startRedis(ctx context.Context) error {
	path, err := c.redisBinary()
	if err != nil {
		return err
	}
	port, err := freeport.Port()
	if err != nil {
		return err
	}
	rdir := filepath.Join(c.dir, "redis")
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		return err
	}
	c.redisAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c.redis = &proc{
		name: "redis", bin: path, logPath: c.logPath("redis"),
		args: []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", rdir, "--daemonize", "no"},
	}
	return c.restartRedis(ctx)
}

// restartRedis starts redis-server (empty) and waits for PING.
func (c *cluster) restartRedis(ctx context.Context) error {
	if err := c.redis.start(); err != nil {
		return err
	}
	return waitPing(ctx, c.redis, c.redisAddr)
}

func redisPing(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING: %q", line)
	}
	return nil
}
