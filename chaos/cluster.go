package chaos

// The topology as real processes: engines, then the ledger (Redis or the
// caller's etcd), the fleet file, reservers and routers, each on free
// loopback ports and waited on until ready, and stopped in the reverse
// order. Supervising one process is proc.go; Redis is redis.go; the fleet
// file is fleetfile.go.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"
)

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

// node is a process of the topology with the URL that answers 200 once it
// is ready.
type node interface {
	process() *proc
	readyURL() string
}

func (p *proc) process() *proc { return p }

func (e *engineNode) readyURL() string   { return "http://" + e.addr + "/health" }
func (r *reserverNode) readyURL() string { return "http://" + r.httpAddr + "/readyz" }
func (r *routerNode) readyURL() string   { return "http://" + r.addr + "/readyz" }

// waitReady waits for each of nodes in turn (see waitHTTP).
func waitReady[N node](ctx context.Context, nodes []N) error {
	for _, n := range nodes {
		if err := waitHTTP(ctx, n.process(), n.readyURL(), ""); err != nil {
			return err
		}
	}
	return nil
}

// cluster is one running topology.
type cluster struct {
	sc    *Scenario
	dir   string
	bins  Binaries
	token string

	redis     *proc
	redisAddr string
	// sentinel is the redis-sentinel deployment (sentinel.go).
	sentinel *sentinelSet
	// etcdAddr is the caller's etcd (LedgerEtcd); the run's keys are under
	// etcdPrefix.
	etcdAddr, etcdPrefix string
	reservers            []*reserverNode
	engines              []*engineNode
	routers              []*routerNode
	// fleetPath is the fleet file with the engines' own URLs.
	fleetPath string
	// routersUp is when every router first answered ready (with
	// topology.cold_start: first served /healthz).
	routersUp time.Time
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
	if sc.Topology.Admission == AdmissionDirect {
		return c, nil // the clients talk to the engines
	}
	switch sc.Topology.Ledger {
	case LedgerRedis:
		if err := c.startRedis(ctx); err != nil {
			return nil, err
		}
	case LedgerSentinel:
		if err := c.startSentinel(ctx); err != nil {
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
			if g.OutputTokens > 0 {
				args = append(args, "--output-tokens", strconv.Itoa(g.OutputTokens))
			}
			if g.OutputDist != "" {
				args = append(args, "--output-dist", g.OutputDist)
			}
			if g.OutputSigma > 0 {
				args = append(args, "--output-sigma", strconv.FormatFloat(g.OutputSigma, 'g', -1, 64))
			}
			if g.MaxModelLen > 0 {
				args = append(args, "--max-model-len", strconv.Itoa(g.MaxModelLen))
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
	return waitReady(ctx, c.engines)
}

func (c *cluster) reserverLedgerURL() string {
	switch c.sc.Topology.Ledger {
	case LedgerRedis:
		return "redis://" + c.redisAddr + "/0"
	case LedgerEtcd:
		return "etcd://" + c.etcdAddr + "/" + c.etcdPrefix
	case LedgerSentinel:
		return c.sentinel.url(c.sc.Topology.WaitReplicas)
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
	return waitReady(ctx, c.reservers)
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
		case LedgerSentinel:
			ledgerURL = c.sentinel.url(t.WaitReplicas)
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
	if c.sc.Topology.ColdStart {
		// Up means serving (/healthz), not admitting: /readyz waits for
		// the ledger to grant, which is what cold_start measures.
		for _, r := range c.routers {
			if err := waitHTTP(ctx, &r.proc, "http://"+r.addr+"/healthz", ""); err != nil {
				return err
			}
		}
		c.routersUp = time.Now()
		return nil
	}
	err := waitReady(ctx, c.routers)
	c.routersUp = time.Now()
	return err
}

// restartRouter starts a router again with extra env (clock_offset).
func (c *cluster) restartRouter(ctx context.Context, r *routerNode, env ...string) error {
	r.env = append(r.env, env...)
	if err := r.start(); err != nil {
		return err
	}
	return waitReady(ctx, []*routerNode{r})
}

func (c *cluster) restartReserver(ctx context.Context, r *reserverNode) error {
	if err := r.start(); err != nil {
		return err
	}
	return waitReady(ctx, []*reserverNode{r})
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
	if c.sentinel != nil {
		for _, n := range c.sentinel.nodes() {
			wg.Add(1)
			go func() { defer wg.Done(); n.terminate(3 * time.Second) }()
		}
	}
	wg.Wait()
	if c.sentinel != nil {
		for _, l := range c.sentinel.links {
			_ = l.Close()
		}
	}
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
