package etcdserver

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/leasehold/leasehold/internal/freeport"
	"github.com/leasehold/leasehold/internal/testutil/gobuild"
)

// memberBin is the etcdmember binary, built once per test process.
var memberBin gobuild.Once

// RemoveBinaries deletes the etcdmember binary a StartCluster built; a
// TestMain of a package that starts clusters calls it after the tests.
func RemoveBinaries() { memberBin.Remove() }

// Cluster is a multi-member etcd, each member its own process (the
// etcdmember command: server/v3/embed) on free loopback ports, so that a
// test can SIGKILL one, as a crash does. Members keep their data
// directory across Kill and Restart. Every member is stopped when the test
// ends.
type Cluster struct {
	t       testing.TB
	bin     string
	members []*member
}

type member struct {
	name, dir, client, peer, cluster string
	log                              string

	mu   sync.Mutex // guards cmd, done
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exits
}

// StartCluster starts an n-member cluster and waits until every member
// answers a linearizable read.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	bin := filepath.Join(memberBin.Dir(t, func(dir string) error {
		return gobuild.Go(dir, nil, "github.com/leasehold/leasehold/internal/testutil/etcdserver/etcdmember")
	}), "etcdmember")
	c := &Cluster{t: t, bin: bin}
	dir := t.TempDir()
	var peers []string
	for i := range n {
		m := &member{
			name:   fmt.Sprintf("m%d", i),
			client: "http://" + freeport.AddrT(t),
			peer:   "http://" + freeport.AddrT(t),
		}
		m.dir = filepath.Join(dir, m.name)
		m.log = filepath.Join(dir, m.name+".log")
		peers = append(peers, m.name+"="+m.peer)
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.cluster = strings.Join(peers, ",")
	}
	t.Cleanup(c.stop)
	for i := range c.members {
		c.start(i, "new")
	}
	for i := range c.members {
		c.waitMember(i)
	}
	return c
}

func (c *Cluster) start(i int, state string) {
	c.t.Helper()
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return
	}
	logf, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatalf("etcdserver: %v", err)
	}
	cmd := exec.Command(c.bin, "--name", m.name, "--data-dir", m.dir, "--client", m.client, "--peer", m.peer,
		"--initial-cluster", m.cluster, "--initial-cluster-state", state)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		c.t.Fatalf("etcdserver: start member %s: %v", m.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	m.cmd, m.done = cmd, done
}

// waitMember waits until member i serves a linearizable read.
func (c *Cluster) waitMember(i int) {
	c.t.Helper()
	m := c.members[i]
	cli := c.clientOf(c.t, m.client)
	defer cli.Close()
	if err := waitRead(cli); err != nil {
		c.t.Fatalf("etcdserver: member %s not answering within %s: %v\n%s", m.name, startTimeout, err, tail(m.log))
	}
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.client
	}
	return out
}

// HostPorts is the members' client addresses joined by commas, for
// "etcd://host:port,host:port/prefix" ledger URLs.
func (c *Cluster) HostPorts() string {
	hs := make([]string, len(c.members))
	for i, m := range c.members {
		hs[i] = strings.TrimPrefix(m.client, "http://")
	}
	return strings.Join(hs, ",")
}

// Client returns a client of every member (it fails over between them),
// closed when the test ends.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli := c.clientOf(t, c.Endpoints()...)
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func (c *Cluster) clientOf(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 300 * time.Millisecond},
			MinConnectTimeout: time.Second,
		})},
	})
	if err != nil {
		t.Fatalf("etcdserver: client: %v", err)
	}
	return cli
}

// Leader returns the index of the member that is leader, as the running
// members report it.
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	var leader uint64
	ids := map[uint64]int{}
	var last error
	for i, m := range c.members {
		if !m.running() {
			continue
		}
		cli := c.clientOf(c.t, m.client)
		st, err := cli.Status(ctx, m.client)
		_ = cli.Close()
		if err != nil {
			last = err
			continue
		}
		ids[st.Header.MemberId] = i
		if st.Leader != 0 {
			leader = st.Leader
		}
	}
	if i, ok := ids[leader]; ok && leader != 0 {
		return i, nil
	}
	return -1, fmt.Errorf("etcdserver: no running member is leader (leader id %x): %v", leader, last)
}

// Kill SIGKILLs member i and waits for it to exit; its data stays.
func (c *Cluster) Kill(i int) {
	m := c.members[i]
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.cmd, m.done = nil, nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Restart starts a killed member i again on its data and ports (it
// rejoins the cluster) and waits until it serves.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.start(i, "existing")
	c.waitMember(i)
}

func (m *member) running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd != nil
}

// stop ends every member: SIGTERM, then SIGKILL after 5 s.
func (c *Cluster) stop() {
	var wg sync.WaitGroup
	for _, m := range c.members {
		m.mu.Lock()
		cmd, done := m.cmd, m.done
		m.cmd, m.done = nil, nil
		m.mu.Unlock()
		if cmd == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}()
	}
	wg.Wait()
}

// tail is the end of a member's log, for errors.
func tail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 10 {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
