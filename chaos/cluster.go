package chaos

// The topology as real processes: the project's binaries built once into a
// directory, each process on free loopback ports with its output in
// logs/NAME.log under the run directory, restartable on the same ports.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/freeport"
)

// ErrNoRouter: the router binary is not available (cmd/router has not
// landed and no stand-in was given).
var ErrNoRouter = errors.New("chaos: no router binary (cmd/router is not in this checkout)")

// Binaries are the executables a run starts.
type Binaries struct {
	Reserver  string
	Enginesim string
	// Router is the router executable; RouterEnv is added to its
	// environment (tests use it to run a stand-in).
	Router    string
	RouterEnv []string
	// RedisServer is redis-server (default: REDIS_SERVER or PATH).
	RedisServer string
}

// Build compiles cmd/reserver, cmd/enginesim and, if present, cmd/router of
// the module containing the working directory into dir. Router is empty
// when cmd/router does not exist yet.
func Build(ctx context.Context, dir string) (Binaries, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return Binaries{}, fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	if root == "." || root == "" || strings.TrimSpace(string(out)) == os.DevNull {
		return Binaries{}, errors.New("chaos: run inside the leasehold module (go env GOMOD is empty)")
	}
	pkgs := []string{"./cmd/reserver", "./cmd/enginesim"}
	hasRouter := false
	if _, err := os.Stat(filepath.Join(root, "cmd", "router", "main.go")); err == nil {
		pkgs, hasRouter = append(pkgs, "./cmd/router"), true
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, err
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", dir + string(os.PathSeparator)}, pkgs...)...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("go build %s: %w\n%s", strings.Join(pkgs, " "), err, b)
	}
	b := Binaries{Reserver: filepath.Join(dir, "reserver"), Enginesim: filepath.Join(dir, "enginesim")}
	if hasRouter {
		b.Router = filepath.Join(dir, "router")
	}
	return b, nil
}

// proc is one child process, restartable with the same arguments.
type proc struct {
	name    string
	bin     string
	args    []string
	env     []string
	logPath string

	mu      sync.Mutex // guards cmd, waitC, stopped
	cmd     *exec.Cmd
	waitC   chan struct{} // closed when cmd exits
	stopped bool          // SIGSTOPped
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s: already running", p.name)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== %s start %s %s\n", time.Now().Format(time.RFC3339Nano), p.bin, strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a Ctrl-C reaches the runner, which decides.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	waitC := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(waitC)
	}()
	p.cmd, p.waitC, p.stopped = cmd, waitC, false
	return nil
}

// running reports whether the process is alive (stopped counts).
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.waitC:
		return false
	default:
		return true
	}
}

func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s: not running", p.name)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.stopped = true
	case syscall.SIGCONT:
		p.stopped = false
	}
	return p.cmd.Process.Signal(sig)
}

// kill SIGKILLs the process and waits for it.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, waitC := p.cmd, p.waitC
	p.cmd, p.waitC, p.stopped = nil, nil, false
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-waitC
}

// terminate sends SIGTERM (SIGCONT first if stopped) and SIGKILLs after
// grace.
func (p *proc) terminate(grace time.Duration) {
	p.mu.Lock()
	cmd, waitC, stopped := p.cmd, p.waitC, p.stopped
	p.cmd, p.waitC, p.stopped = nil, nil, false
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	if stopped {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-waitC:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-waitC
	}
}

// servingLine returns the "router serving" line of the process's latest
// start in its log, or "".
func (p *proc) servingLine() string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	line := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		switch t := sc.Text(); {
		case strings.HasPrefix(t, "=== "):
			line = ""
		case strings.Contains(t, `msg="router serving"`):
			line = t
		}
	}
	return line
}

// logTail returns the last lines of the process's log, for errors.
func (p *proc) logTail() string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 15 {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

type engineNode struct {
	proc
	id       string
	addr     string
	kvTokens int64
	slots    int64
}

type reserverNode struct {
	proc
	grpcAddr, httpAddr string
}

type routerNode struct {
	proc
	id   string
	addr string
	// ledgerProxy and engineProxies are set when the scenario partitions
	// routers (nil otherwise); engineProxies is indexed like cluster.engines.
	ledgerProxy   *Proxy
	engineProxies []*Proxy
	// down: the runner took the router out of the client pool's rotation
	// (killed or stopped), as a load balancer's health check would.
	down atomic.Bool
}

// cluster is one running topology.
type cluster struct {
	sc    *Scenario
	dir   string
	bins  Binaries
	token string

	redis     *proc
	redisAddr string
	// etcdAddr is the caller's etcd (LedgerEtcd); the run's keys are under
	// etcdPrefix.
	etcdAddr, etcdPrefix string
	reservers            []*reserverNode
	engines              []*engineNode
	routers              []*routerNode
	// fleetPath is the fleet file with the engines' own URLs.
	fleetPath string
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// startCluster starts every process of sc's topology and waits until each
// is ready. On error, what was started is stopped.
func startCluster(ctx context.Context, sc *Scenario, dir string, bins Binaries, etcd string) (_ *cluster, err error) {
	if bins.Router == "" {
		return nil, ErrNoRouter
	}
	c := &cluster{sc: sc, dir: dir, bins: bins, token: randomToken(), etcdAddr: etcd, etcdPrefix: "chaos-" + randomToken()[:12]}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	if err := c.startEngines(ctx); err != nil {
		return nil, err
	}
	if sc.Topology.Ledger == LedgerRedis {
		if err := c.startRedis(ctx); err != nil {
			return nil, err
		}
	}
	if err := c.writeFleet(); err != nil {
		return nil, err
	}
	if err := c.startReservers(ctx); err != nil {
		return nil, err
	}
	if err := c.startRouters(ctx); err != nil {
		return nil, err
	}
	// A process that could not bind its port exits at once, but another
	// process on that port may have answered its readiness check: by now
	// every such exit has happened.
	procs := make([]*proc, 0, len(c.engines)+len(c.reservers)+len(c.routers))
	for _, e := range c.engines {
		procs = append(procs, &e.proc)
	}
	for _, r := range c.reservers {
		procs = append(procs, &r.proc)
	}
	for _, r := range c.routers {
		procs = append(procs, &r.proc)
	}
	for _, p := range procs {
		if !p.running() {
			return nil, fmt.Errorf("%s exited after it looked ready (its port taken by another process?): %s", p.name, p.logTail())
		}
	}
	return c, nil
}

func (c *cluster) logPath(name string) string { return filepath.Join(c.dir, "logs", name+".log") }

func (c *cluster) startEngines(ctx context.Context) error {
	i := 0
	for _, g := range c.sc.Topology.Engines {
		for range g.Count {
			addr, err := freeport.Addr()
			if err != nil {
				return err
			}
			id := fmt.Sprintf("engine-%d", i)
			args := []string{
				"--listen", addr, "--model", c.sc.Topology.Model,
				"--kv-tokens", strconv.FormatInt(g.KVTokens, 10), "--slots", strconv.FormatInt(g.Slots, 10),
				"--format", g.Format, "--speed", strconv.FormatFloat(g.Speed, 'g', -1, 64),
				"--seed", strconv.Itoa(i + 1),
			}
			if g.DecodeTokensPerSec > 0 {
				args = append(args, "--decode-tokens-per-sec", strconv.FormatFloat(g.DecodeTokensPerSec, 'g', -1, 64))
			}
			e := &engineNode{
				proc: proc{name: id, bin: c.bins.Enginesim, args: args, logPath: c.logPath(id)},
				id:   id, addr: addr, kvTokens: g.KVTokens, slots: g.Slots,
			}
			c.engines = append(c.engines, e)
			if err := e.start(); err != nil {
				return err
			}
			i++
		}
	}
	for _, e := range c.engines {
		if err := waitHTTP(ctx, &e.proc, "http://"+e.addr+"/health", ""); err != nil {
			return err
		}
	}
	return nil
}

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

// fleetFile is the fleet YAML's shape as the runner writes it.
type fleetFile struct {
	Pools []struct {
		Name    string        `yaml:"name"`
		Engines []fleetEngine `yaml:"engines"`
	} `yaml:"pools"`
	Tenants []struct {
		Name      string   `yaml:"name"`
		APIKeys   []string `yaml:"api_keys"`
		KVShare   float64  `yaml:"kv_share"`
		SlotShare float64  `yaml:"slot_share,omitempty"`
	} `yaml:"tenants"`
	Priorities []PrioritySpec `yaml:"priorities,omitempty"`
	Lease      struct {
		SessionTTL     string `yaml:"session_ttl"`
		RecoveryWindow string `yaml:"recovery_window,omitempty"`
		OrphanHold     string `yaml:"orphan_hold,omitempty"`
	} `yaml:"lease"`
}

type fleetEngine struct {
	ID          string `yaml:"id"`
	URL         string `yaml:"url"`
	MetricsURL  string `yaml:"metrics_url,omitempty"`
	KVTokens    int64  `yaml:"kv_tokens"`
	Slots       int64  `yaml:"slots"`
	Format      string `yaml:"format"`
	StaleAfter  string `yaml:"stale_after"`
	StalePolicy string `yaml:"stale_policy,omitempty"`
}

// fleetYAML renders the fleet file; urls maps engine index to the URL the
// reader should use (the engine's own, or a router's proxy).
func (c *cluster) fleetYAML(urls func(i int) string) ([]byte, error) {
	t := c.sc.Topology
	var f fleetFile
	f.Pools = make([]struct {
		Name    string        `yaml:"name"`
		Engines []fleetEngine `yaml:"engines"`
	}, 1)
	f.Pools[0].Name = t.Model
	groupOf := func(i int) EngineGroup {
		for _, g := range t.Engines {
			if i < g.Count {
				return g
			}
			i -= g.Count
		}
		return EngineGroup{}
	}
	for i, e := range c.engines {
		f.Pools[0].Engines = append(f.Pools[0].Engines, fleetEngine{
			ID: e.id, URL: urls(i), MetricsURL: "http://" + e.addr + "/metrics",
			KVTokens: e.kvTokens, Slots: e.slots, Format: groupOf(i).Format,
			StaleAfter: t.StaleAfter.String(), StalePolicy: t.StalePolicy,
		})
	}
	for _, tn := range t.Tenants {
		f.Tenants = append(f.Tenants, struct {
			Name      string   `yaml:"name"`
			APIKeys   []string `yaml:"api_keys"`
			KVShare   float64  `yaml:"kv_share"`
			SlotShare float64  `yaml:"slot_share,omitempty"`
		}{tn.Name, []string{tn.APIKey()}, tn.KVShare, tn.SlotShare})
	}
	f.Priorities = t.Priorities
	f.Lease.SessionTTL = t.SessionTTL.String()
	if t.OrphanHold > 0 {
		f.Lease.OrphanHold = t.OrphanHold.String()
	}
	if t.RecoveryWindow != nil {
		f.Lease.RecoveryWindow = t.RecoveryWindow.String()
		if t.RecoveryWindow.D() == 0 {
			f.Lease.RecoveryWindow = "0s"
		}
	}
	b, err := yaml.Marshal(&f)
	if err != nil {
		return nil, err
	}
	if _, err := fleet.Parse(b); err != nil {
		return nil, fmt.Errorf("chaos: the generated fleet file is invalid: %w", err)
	}
	return b, nil
}

func (c *cluster) writeFleet() error {
	b, err := c.fleetYAML(func(i int) string { return "http://" + c.engines[i].addr })
	if err != nil {
		return err
	}
	c.fleetPath = filepath.Join(c.dir, "fleet.yaml")
	return os.WriteFile(c.fleetPath, b, 0o644)
}

func (c *cluster) reserverLedgerURL() string {
	switch c.sc.Topology.Ledger {
	case LedgerRedis:
		return "redis://" + c.redisAddr + "/0"
	case LedgerEtcd:
		return "etcd://" + c.etcdAddr + "/" + c.etcdPrefix
	}
	return "memory://"
}

func (c *cluster) startReservers(ctx context.Context) error {
	for i := range c.sc.Topology.Reservers {
		g, err := freeport.Addr()
		if err != nil {
			return err
		}
		h, err := freeport.Addr()
		if err != nil {
			return err
		}
		name := fmt.Sprintf("reserver-%d", i)
		r := &reserverNode{grpcAddr: g, httpAddr: h}
		r.proc = proc{
			name: name, bin: c.bins.Reserver, logPath: c.logPath(name),
			args: []string{"--ledger", c.reserverLedgerURL(), "--config", c.fleetPath,
				"--grpc-listen", g, "--http-listen", h,
				"--reconcile-interval", "250ms", "--sweep-interval", "200ms", "--reapply-interval", "500ms"},
			env: []string{"LEASEHOLD_TOKEN=" + c.token},
		}
		c.reservers = append(c.reservers, r)
		if err := r.start(); err != nil {
			return err
		}
	}
	for _, r := range c.reservers {
		if err := waitHTTP(ctx, &r.proc, "http://"+r.httpAddr+"/readyz", ""); err != nil {
			return err
		}
	}
	return nil
}

// needProxies reports whether sc partitions routers from link.
func (sc *Scenario) needProxies(link string) bool {
	for _, f := range sc.Faults {
		if f.Kind == FaultPartition && f.Link == link {
			return true
		}
	}
	return false
}

func (c *cluster) startRouters(ctx context.Context) error {
	t := c.sc.Topology
	ledgerAddr := c.redisAddr
	switch t.Ledger {
	case LedgerMemory:
		ledgerAddr = c.reservers[0].grpcAddr
	case LedgerEtcd:
		ledgerAddr = c.etcdAddr
	}
	for i := range t.Routers {
		id := fmt.Sprintf("router-%d", i)
		addr, err := freeport.Addr()
		if err != nil {
			return err
		}
		r := &routerNode{id: id, addr: addr}
		c.routers = append(c.routers, r)
		target := ledgerAddr
		if c.sc.needProxies(LinkLedger) {
			if r.ledgerProxy, err = NewProxy(ledgerAddr); err != nil {
				return err
			}
			target = r.ledgerProxy.Addr()
		}
		ledgerURL := "grpc://" + target
		switch t.Ledger {
		case LedgerRedis:
			ledgerURL = "redis://" + target + "/0"
		case LedgerEtcd:
			ledgerURL = "etcd://" + target + "/" + c.etcdPrefix
		}
		fleetPath := c.fleetPath
		if c.sc.needProxies(LinkEngine) {
			for _, e := range c.engines {
				p, err := NewProxy(e.addr)
				if err != nil {
					return err
				}
				r.engineProxies = append(r.engineProxies, p)
			}
			b, err := c.fleetYAML(func(i int) string { return "http://" + r.engineProxies[i].Addr() })
			if err != nil {
				return err
			}
			fleetPath = filepath.Join(c.dir, "fleet-"+id+".yaml")
			if err := os.WriteFile(fleetPath, b, 0o644); err != nil {
				return err
			}
		}
		args := []string{"--ledger", ledgerURL, "--config", fleetPath, "--listen", addr, "--id", id,
			"--admission=" + t.Admission}
		args = append(args, t.RouterFlags...)
		r.proc = proc{
			name: id, bin: c.bins.Router, args: args, logPath: c.logPath(id),
			env: append([]string{"LEASEHOLD_TOKEN=" + c.token}, c.bins.RouterEnv...),
		}
		if err := r.start(); err != nil {
			return err
		}
	}
	for _, r := range c.routers {
		if err := waitHTTP(ctx, &r.proc, "http://"+r.addr+"/readyz", ""); err != nil {
			return err
		}
	}
	return nil
}

// restartRouter starts a router again with extra env (clock_offset).
func (c *cluster) restartRouter(ctx context.Context, r *routerNode, env ...string) error {
	r.env = append(r.env, env...)
	if err := r.start(); err != nil {
		return err
	}
	return waitHTTP(ctx, &r.proc, "http://"+r.addr+"/readyz", "")
}

func (c *cluster) restartReserver(ctx context.Context, r *reserverNode) error {
	if err := r.start(); err != nil {
		return err
	}
	return waitHTTP(ctx, &r.proc, "http://"+r.httpAddr+"/readyz", "")
}

// stop ends every process and proxy: routers first (they release), then
// reservers, engines and Redis.
func (c *cluster) stop() {
	var wg sync.WaitGroup
	for _, r := range c.routers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.terminate(5 * time.Second)
			if r.ledgerProxy != nil {
				_ = r.ledgerProxy.Close()
			}
			for _, p := range r.engineProxies {
				_ = p.Close()
			}
		}()
	}
	wg.Wait()
	for _, r := range c.reservers {
		wg.Add(1)
		go func() { defer wg.Done(); r.terminate(5 * time.Second) }()
	}
	wg.Wait()
	for _, e := range c.engines {
		wg.Add(1)
		go func() { defer wg.Done(); e.terminate(3 * time.Second) }()
	}
	if c.redis != nil {
		wg.Add(1)
		go func() { defer wg.Done(); c.redis.terminate(3 * time.Second) }()
	}
	wg.Wait()
}

var httpClient = &http.Client{
	Timeout:   2 * time.Second,
	Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16},
}

// waitHTTP polls url until it answers 200, the process exits or 30 s pass.
func waitHTTP(ctx context.Context, p *proc, url, token string) error {
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := httpClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
		} else {
			last = err.Error()
		}
		if !p.running() {
			return fmt.Errorf("%s exited before %s answered: %s", p.name, url, p.logTail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not ready within 30s (last: %s)\n%s", p.name, url, last, p.logTail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// getJSON GETs url into v.
func getJSON(ctx context.Context, url, token string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// postJSON POSTs body to url.
func postJSON(ctx context.Context, url string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(b)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %d", url, resp.StatusCode)
	}
	return nil
}

// waitRecovered waits until the audit lists the pool and no pool is in its
// recovery window (a fresh ledger starts in one), so load meets a ledger
// that grants.
func (c *cluster) waitRecovered(ctx context.Context) error {
	limit := time.Now().Add(c.sc.Topology.SessionTTL.D() + 30*time.Second)
	last := "no audit yet"
	for {
		a, err := c.fetchAudit(ctx)
		if err == nil {
			ready := len(a.Pools) > 0
			for _, p := range a.Pools {
				if p.RecoveringUntil != nil && time.Until(*p.RecoveringUntil) > 0 {
					ready = false
					last = "pool " + p.Pool + " recovering until " + p.RecoveringUntil.Format(time.RFC3339Nano)
				}
			}
			if ready {
				return nil
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(limit) {
			return fmt.Errorf("ledger not granting within %s: %s", time.Until(limit), last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
