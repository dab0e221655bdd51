package redisserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/freeport"
)

// Binary is the redis-server executable Start runs; REDIS_SERVER overrides it.
var Binary = "redis-server"

const startTimeout = 10 * time.Second

// Server is one running redis-server.
type Server struct {
	tb   testing.TB
	bin  string
	dir  string
	port int
	// pre are arguments before the common ones (a Sentinel's config file
	// and --sentinel); extra are more after them (a replica's --replicaof).
	pre, extra []string
	// launcher, when set, runs the server: its first element is the
	// program, redis-server and its arguments follow the rest (valgrind).
	launcher []string

	mu      sync.Mutex // guards cmd, waitC, clients
	cmd     *exec.Cmd
	waitC   chan error // receives cmd.Wait's result
	clients []*goredis.Client
}

// Start launches redis-server on a free loopback port, waits until it
// answers PING and registers cleanup that kills it and closes the clients
// Client returned.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return start(tb)
}

// StartReplica starts a server replicating primary (--replicaof) and waits
// until the replication link is up.
func StartReplica(tb testing.TB, primary *Server) *Server {
	tb.Helper()
	// Full syncs start at once rather than after Redis's 5 s default delay.
	pc := goredis.NewClient(&goredis.Options{Addr: primary.Addr()})
	err := pc.ConfigSet(context.Background(), "repl-diskless-sync-delay", "0").Err()
	_ = pc.Close()
	if err != nil {
		tb.Fatalf("redisserver: primary %s: CONFIG SET repl-diskless-sync-delay: %v", primary.Addr(), err)
	}
	s := start(tb, "--replicaof", "127.0.0.1", strconv.Itoa(primary.port))
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	defer c.Close()
	pc = goredis.NewClient(&goredis.Options{Addr: primary.Addr()})
	defer pc.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		// Linked on the replica's side, and online on the primary's: only
		// then does WAIT count it.
		info, err := c.Info(context.Background(), "replication").Result()
		pinfo, perr := pc.Info(context.Background(), "replication").Result()
		online := perr == nil && strings.Contains(pinfo, "port="+strconv.Itoa(s.port)+",state=online")
		if err == nil && strings.Contains(info, "master_link_status:up") && online {
			return s
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redisserver: replica of %s not linked within %s: %v\n%s", primary.Addr(), startTimeout, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StartCluster starts a one-node Redis Cluster: a server with cluster mode
// on that serves every hash slot. A script there may touch only keys of
// one slot, so it holds a caller to its key schema's hash tags.
func StartCluster(tb testing.TB) *Server {
	tb.Helper()
	s := start(tb, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	defer c.Close()
	ctx := context.Background()
	if err := c.Do(ctx, "cluster", "addslotsrange", 0, 16383).Err(); err != nil {
		tb.Fatalf("redisserver: cluster %s: CLUSTER ADDSLOTSRANGE: %v", s.Addr(), err)
	}
	deadline := time.Now().Add(startTimeout)
	for {
		info, err := c.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return s
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redisserver: cluster %s not ok within %s: %v\n%s", s.Addr(), startTimeout, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func start(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	return startWith(tb, nil, extra)
}

// StartUnder is Start with redis-server run by launcher, a program and
// its arguments before redis-server's own (["valgrind",
// "--tool=callgrind", ...]); it waits up to a minute for PING, as a
// launcher such as valgrind starts the server slowly. Pid is the
// launcher's process.
func StartUnder(tb testing.TB, launcher ...string) *Server {
	tb.Helper()
	if len(launcher) == 0 {
		tb.Fatalf("redisserver: StartUnder without a launcher")
	}
	return startLaunched(tb, launcher, nil, nil)
}

// startWith is start with arguments before the common ones too, made by
// pre for the server's directory and the port chosen (a Sentinel's config
// file).
func startWith(tb testing.TB, pre func(dir string, port int) ([]string, error), extra []string) *Server {
	tb.Helper()
	return startLaunched(tb, nil, pre, extra)
}

// startLaunched is startWith with redis-server run by launcher (none:
// directly).
func startLaunched(tb testing.TB, launcher []string, pre func(dir string, port int) ([]string, error), extra []string) *Server {
	tb.Helper()
	bin := Binary
	if env := os.Getenv("REDIS_SERVER"); env != "" {
		bin = env
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		tb.Fatalf("redisserver: %s not found (%v): install redis-server >= 7 (e.g. apt-get install redis-server) or set REDIS_SERVER", bin, err)
	}
	s := &Server{tb: tb, bin: path, dir: tb.TempDir(), extra: extra, launcher: launcher}
	tb.Cleanup(s.stop)
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freeport.Port() // never 6379
		if err != nil {
			tb.Fatalf("redisserver: find a free port: %v", err)
		}
		s.port = port
		if pre != nil {
			if s.pre, err = pre(s.dir, port); err != nil {
				tb.Fatalf("redisserver: %v", err)
			}
		}
		if lastErr = s.start(); lastErr == nil {
			return s
		}
	}
	tb.Fatalf("redisserver: start: %v", lastErr)
	return nil
}

// start runs redis-server on s.port and waits for PING.
func (s *Server) start() error {
	logPath := filepath.Join(s.dir, "redis-"+strconv.Itoa(s.port)+".log")
	argv := append([]string{s.bin}, s.pre...)
	timeout := startTimeout
	if len(s.launcher) > 0 {
		argv = append(append([]string(nil), s.launcher...), argv...)
		timeout = time.Minute
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Args = append(cmd.Args,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--logfile", logPath,
	)
	cmd.Args = append(cmd.Args, s.extra...)
	cmd.Dir = s.dir
	// Its own process group, so a Ctrl-C to go test reaches us, not it, and
	// cleanup decides when it dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", s.bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			s.mu.Lock()
			s.cmd, s.waitC = cmd, exited
			s.mu.Unlock()
			return nil
		}
		select {
		case werr := <-exited:
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("redis-server on port %d exited (%v): %s", s.port, werr, log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server on port %d did not answer PING within %s: %v", s.port, timeout, err)
		}
	}
}

// kill stops the running server and waits for it to exit.
func (s *Server) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.waitC
	s.cmd, s.waitC = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// stop is the cleanup: close clients, kill the server.
func (s *Server) stop() {
	s.mu.Lock()
	clients := s.clients
	s.clients = nil
	s.mu.Unlock()
	for _, c := range clients {
		_ = c.Close()
	}
	s.kill()
}

// Addr returns host:port of the server.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL returns redis://host:port/0 for the server.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Client returns a new client of the server, closed at cleanup.
func (s *Server) Client() *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	s.mu.Lock()
	s.clients = append(s.clients, c)
	s.mu.Unlock()
	return c
}

// Restart kills the server and starts it again on the same port with empty
// state (no persistence), as a crashed Redis without AOF/RDB comes back.
// Clients reconnect on their next command.
func (s *Server) Restart() {
	s.tb.Helper()
	s.kill()
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.tb.Fatalf("redisserver: restart on port %d: %v", s.port, err)
}

// FlushAll empties every database of the server (and its script cache is
// kept, as FLUSHALL does).
func (s *Server) FlushAll() {
	s.tb.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.FlushAll(ctx).Err(); err != nil {
		s.tb.Fatalf("redisserver: FLUSHALL: %v", err)
	}
}

// Pid returns the running server's process id (its launcher's, under
// StartUnder); 0 when it is not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Kill stops the server without restarting it, to test an unreachable
// ledger; Restart brings it back, empty.
func (s *Server) Kill() { s.kill() }
