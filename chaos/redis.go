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
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"
)

func (c *cluster) startRedis(ctx context.Context) error {
	bin := c.bins.RedisServer
	if bin == "" {
		bin = os.Getenv("REDIS_SERVER")
	}
	if bin == "" {
		bin = "redis-server"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return fmt.Errorf("chaos: topology.ledger redis needs redis-server >= 7 (apt-get install redis-server, or set REDIS_SERVER): %w", err)
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		if redisPing(c.redisAddr) == nil {
			return nil
		}
		if !c.redis.running() || time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer PING: %s", c.redisAddr, c.redis.logTail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
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
