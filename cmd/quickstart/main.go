// Command quickstart shows the over-admission gap Leasehold closes, in one
// process with nothing to install: N simulated routers send the same load to
// four simulated engines, first admitting like today's routers (each from its
// own periodically refreshed snapshot of engine load), then reserving every
// request on the embedded ledger before dispatch. It prints each engine
// fleet's peak KV and slot usage against capacity, as the engines counted it.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/memory"
)

// Config is the quickstart's settings.
type Config struct {
	Routers  []int         // router counts to compare
	Clients  int           // concurrent clients per router
	Duration time.Duration // per run
	Scrape   time.Duration // how often a local-admission router refreshes its snapshot
	Engines  int
	KVTokens int64 // per engine
	Slots    int64 // per engine
	Seed     uint64
}

func (c *Config) register(fs *flag.FlagSet) {
	routers := "1,2,4,8"
	fs.Func("routers", "comma-separated router counts to compare (default "+routers+")", func(s string) error {
		c.Routers = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > 64 {
				return fmt.Errorf("router count %q: want 1..64", f)
			}
			c.Routers = append(c.Routers, n)
		}
		return nil
	})
	c.Routers = []int{1, 2, 4, 8}
	fs.IntVar(&c.Clients, "clients", 24, "concurrent clients per router")
	fs.DurationVar(&c.Duration, "duration", 1500*time.Millisecond, "load duration of each run")
	fs.DurationVar(&c.Scrape, "scrape", 250*time.Millisecond, "snapshot refresh interval of local admission")
	fs.IntVar(&c.Engines, "engines", 4, "simulated engines")
	fs.Int64Var(&c.KVTokens, "kv-tokens", 60000, "KV-cache tokens per engine")
	fs.Int64Var(&c.Slots, "slots", 32, "concurrent sequences per engine")
	fs.Uint64Var(&c.Seed, "seed", 1, "workload seed")
}

// Validate rejects settings that cannot run.
func (c *Config) Validate() error {
	switch {
	case c.Clients < 1 || c.Clients > 1024:
		return fmt.Errorf("-clients = %d, want 1..1024", c.Clients)
	case c.Duration <= 0:
		return fmt.Errorf("-duration = %s, want > 0", c.Duration)
	case c.Scrape <= 0:
		return fmt.Errorf("-scrape = %s, want > 0", c.Scrape)
	case c.Engines < 1 || c.Engines > 64:
		return fmt.Errorf("-engines = %d, want 1..64", c.Engines)
	case c.KVTokens < 4000:
		return fmt.Errorf("-kv-tokens = %d, want >= 4000 (one request is up to 4000)", c.KVTokens)
	case c.Slots < 1:
		return fmt.Errorf("-slots = %d, want >= 1", c.Slots)
	}
	return nil
}

func main() {
	var cfg Config
	fs := flag.NewFlagSet("quickstart", flag.ExitOnError)
	cfg.register(fs)
	_ = fs.Parse(os.Args[1:])
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	fmt.Printf("%d engines × %d KV tokens, %d slots; each router runs %d clients for %s; local admission refreshes every %s\n\n",
		cfg.Engines, cfg.KVTokens, cfg.Slots, cfg.Clients, cfg.Duration, cfg.Scrape)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "routers\tadmission\tcompleted\trejected\tpeak KV / capacity\tpeak slots / capacity\t")
	over := false
	for _, n := range cfg.Routers {
		for _, mode := range []string{"local", "ledger"} {
			r, err := run(ctx, cfg, n, mode)
			if err != nil {
				fmt.Fprintln(os.Stderr, "quickstart:", err)
				os.Exit(1)
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%.2f\t%.2f\t\n", n, mode, r.completed, r.rejected, r.peakKV, r.peakSlots)
			if mode == "ledger" && (r.peakKV > 1 || r.peakSlots > 1) {
				over = true
			}
		}
	}
	tw.Flush()
	fmt.Println("\npeak = the highest fill any engine reached, by the engine's own count; above 1.00 the engine is over capacity.")
	if over {
		fmt.Fprintln(os.Stderr, "quickstart: the ledger let an engine exceed capacity: this is a bug")
		os.Exit(1)
	}
}

// engine is a simulated GPU engine: it counts what it holds and its peak.
type engine struct {
	id               ledger.EngineID
	capKV, capSlots  int64
	kv, slots        atomic.Int64
	peakKV, peakSlot atomic.Int64
}

func raise(peak *atomic.Int64, v int64) {
	for {
		p := peak.Load()
		if v <= p || peak.CompareAndSwap(p, v) {
			return
		}
	}
}

func (e *engine) start(kv int64) {
	raise(&e.peakKV, e.kv.Add(kv))
	raise(&e.peakSlot, e.slots.Add(1))
}

func (e *engine) finish(kv int64) {
	e.kv.Add(-kv)
	e.slots.Add(-1)
}

type result struct {
	completed, rejected int64
	peakKV, peakSlots   float64
}

const pool = ledger.PoolID("llama-3.1-8b")

// run drives n routers in one admission mode and reports the engines' peaks.
func run(ctx context.Context, cfg Config, n int, mode string) (result, error) {
	engines := make([]*engine, cfg.Engines)
	spec := ledger.PoolSpec{
		Name:       pool,
		Tenants:    []ledger.TenantSpec{{Name: "demo", KVShare: 1}},
		Priorities: []ledger.PrioritySpec{{Name: "standard", MaxFill: 1}},
	}
	for i := range engines {
		engines[i] = &engine{id: ledger.EngineID(fmt.Sprintf("gpu-%d", i)), capKV: cfg.KVTokens, capSlots: cfg.Slots}
		spec.Engines = append(spec.Engines, ledger.EngineSpec{ID: engines[i].id, KVTokens: cfg.KVTokens, Slots: cfg.Slots})
	}
	// A fresh in-process ledger has no earlier holders whose leases it could
	// have lost, so it needs no recovery window.
	led := memory.New(ledger.Options{RecoveryWindow: -1}, nil)
	defer led.Close()
	if _, err := led.Configure(ctx, spec); err != nil {
		return result{}, err
	}

	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var completed, rejected atomic.Int64
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		rt := &router{id: ledger.HolderID(fmt.Sprintf("router-%d", r)), engines: engines, led: led, mode: mode, scrape: cfg.Scrape}
		if mode == "ledger" {
			if _, err := led.KeepAlive(ctx, pool, rt.id, time.Minute); err != nil {
				return result{}, err
			}
		}
		rt.refresh()
		wg.Add(1)
		go func() { defer wg.Done(); rt.scrapeLoop(runCtx) }()
		for c := 0; c < cfg.Clients; c++ {
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(r*1000+c)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for seq := 0; runCtx.Err() == nil; seq++ {
					kv := 500 + rng.Int64N(2500) + 200 + rng.Int64N(800) // prompt + max_tokens
					hold := time.Duration(30+rng.IntN(90)) * time.Millisecond
					ok, err := rt.serve(runCtx, fmt.Sprintf("c%d-%d", c, seq), kv, hold)
					switch {
					case err != nil:
						return
					case ok:
						completed.Add(1)
					default:
						rejected.Add(1)
						sleep(runCtx, 20*time.Millisecond) // a client backs off
					}
				}
			}()
		}
	}
	wg.Wait()
	res := result{completed: completed.Load(), rejected: rejected.Load()}
	for _, e := range engines {
		res.peakKV = max(res.peakKV, float64(e.peakKV.Load())/float64(e.capKV))
		res.peakSlots = max(res.peakSlots, float64(e.peakSlot.Load())/float64(e.capSlots))
	}
	if st, err := led.Stats(ctx, pool); err == nil && mode == "ledger" {
		for _, e := range st.Engines {
			if e.ReservedKV != 0 || e.Leases != 0 {
				return res, fmt.Errorf("ledger run ended with %d leases (%d KV tokens) still on %s", e.Leases, e.ReservedKV, e.Spec.ID)
			}
		}
	}
	return res, nil
}

// router is one simulated router replica.
type router struct {
	id      ledger.HolderID
	engines []*engine
	led     ledger.Ledger
	mode    string
	scrape  time.Duration

	// mu guards view: the router's snapshot of each engine's KV and slot
	// usage, refreshed every scrape and bumped by its own admissions.
	mu   sync.Mutex
	view [][2]int64
}

func (rt *router) refresh() {
	v := make([][2]int64, len(rt.engines))
	for i, e := range rt.engines {
		v[i] = [2]int64{e.kv.Load(), e.slots.Load()}
	}
	rt.mu.Lock()
	rt.view = v
	rt.mu.Unlock()
}

func (rt *router) scrapeLoop(ctx context.Context) {
	t := time.NewTicker(rt.scrape)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rt.refresh()
		}
	}
}

// ranked returns engine indexes by free KV in the router's view, most first.
func (rt *router) ranked() []int {
	idx := make([]int, len(rt.engines))
	free := make([]int64, len(rt.engines))
	for i, e := range rt.engines {
		idx[i] = i
		free[i] = e.capKV - rt.view[i][0]
	}
	for i := 1; i < len(idx); i++ { // insertion sort: a handful of engines
		for j := i; j > 0 && free[idx[j]] > free[idx[j-1]]; j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
	return idx
}

// serve admits one request, holds it on an engine for hold, and ends it.
// It reports false when the request was rejected.
func (rt *router) serve(ctx context.Context, reqID string, kv int64, hold time.Duration) (bool, error) {
	rt.mu.Lock()
	order := rt.ranked()
	rt.mu.Unlock()
	var e *engine
	var lease ledger.Lease
	switch rt.mode {
	case "local":
		// Today's routers: admit if the snapshot (plus what this router
		// itself added since) says the engine has room.
		rt.mu.Lock()
		for _, i := range order {
			c := rt.engines[i]
			if rt.view[i][0]+kv <= c.capKV && rt.view[i][1]+1 <= c.capSlots {
				rt.view[i][0] += kv
				rt.view[i][1]++
				e = c
				break
			}
		}
		rt.mu.Unlock()
		if e == nil {
			return false, nil
		}
	case "ledger":
		cands := make([]ledger.EngineID, len(order))
		for k, i := range order {
			cands[k] = rt.engines[i].id
		}
		g, err := rt.led.Acquire(ctx, ledger.AcquireRequest{
			Pool: pool, Candidates: cands, Tenant: "demo", Priority: "standard",
			KVTokens: kv, Slots: 1, Holder: rt.id, RequestID: ledger.RequestID(reqID), TTL: time.Minute,
		})
		if ledger.AsRejection(err) != nil {
			return false, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			return false, fmt.Errorf("acquire: %w", err)
		}
		lease = g.Lease
		rt.mu.Lock()
		for i, c := range rt.engines {
			if c.id == lease.Engine {
				e = c
				rt.view[i][0] += kv // rank the next request as local admission does
				rt.view[i][1]++
			}
		}
		rt.mu.Unlock()
	}
	e.start(kv)
	sleep(ctx, hold)
	e.finish(kv)
	if rt.mode == "ledger" {
		// Release under its own bounded context: the run's may be over.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := rt.led.Release(rctx, lease.Ref(), ledger.Usage{}); err != nil {
			return true, fmt.Errorf("release %s: %w", lease.ID, err)
		}
	}
	return true, nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
