package capacity

// BenchmarkReport checks the capacity model against a simulated run at the
// largest scale this machine holds, on one redis-server, and applies it to
// the deployment docs/operations.md sizes ("Capacity model"). Run it
// through `make bench`; it ignores b.N. LEASEHOLD_CAPACITY_SCALE=small
// runs a quick, smaller simulation.

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	lhredis "github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// largest is the simulated run's deployment: what two cores hold with the
// routers, engines and reserver in this process beside Redis.
func largest() Config {
	return Config{
		Pools: 500, EnginesPerPool: 10, Routers: 8, EngineSlots: 16,
		Rate: 1500, Hold: 2 * time.Second, PromptKV: 500, OutputKV: 500,
		Warmup: 10 * time.Second, Window: 20 * time.Second,
		ViewInterval: 5 * time.Second, Seed: 1,
	}
}

// redisCPU is the server's user+system CPU (INFO cpu).
func redisCPU(srv *redisserver.Server) Probe {
	c := srv.Client()
	return func(ctx context.Context) (time.Duration, error) {
		info, err := c.Info(ctx, "cpu").Result()
		if err != nil {
			return 0, err
		}
		var d time.Duration
		for _, line := range strings.Split(info, "\n") {
			name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
				f, _ := strconv.ParseFloat(v, 64)
				d += time.Duration(f * float64(time.Second))
			}
		}
		return d, nil
	}
}

func BenchmarkReport(b *testing.B) {
	if testing.Short() {
		b.Skip("report benchmark: skipped in -short")
	}
	ctx := context.Background()
	cfg := largest()
	switch os.Getenv("LEASEHOLD_CAPACITY_SCALE") {
	case "small":
		cfg.Pools, cfg.Routers, cfg.Rate, cfg.Warmup, cfg.Window = 50, 4, 300, 3*time.Second, 5*time.Second
	case "medium":
		cfg.Pools, cfg.Routers, cfg.Rate = 200, 4, 600
	}
	srv := redisserver.Start(b)
	probe := redisCPU(srv)
	open := func(prefix string) Opener {
		return func() (ledger.Ledger, error) {
			return lhredis.Open(srv.URL(), lhredis.Options{Options: ledger.Options{RecoveryWindow: -1}, Prefix: prefix})
		}
	}
	cal, err := open("cal")()
	if err != nil {
		b.Fatal(err)
	}
	defer cal.Close()
	costs, err := Calibrate(ctx, cal, probe, cfg, 4000)
	if err != nil {
		b.Fatal(err)
	}
	res, err := Run(ctx, cfg, open("sim"), probe)
	if err != nil {
		b.Fatal(err)
	}
	out := &strings.Builder{}
	fmt.Fprintf(out, "\n### Capacity model: simulated run (redis-server, one shard)\n\n")
	fmt.Fprintf(out, "%d pools × %d engines of %d slots (%d engines), %d routers (lease.Managers: %d holder sessions), one reserver; %.0f requests/s of %s (one Grow each), fleet view every %s; %s measured after %s.\n\n",
		cfg.Pools, cfg.EnginesPerPool, cfg.EngineSlots, cfg.Pools*cfg.EnginesPerPool, cfg.Routers, cfg.Routers*cfg.Pools,
		cfg.Rate, cfg.Hold, cfg.ViewInterval, res.Window.Round(time.Millisecond), cfg.Warmup)
	model := cfg.Deployment(res.BlockLocal).Rates()
	got := res.Rates()
	fmt.Fprintln(out, "| call | Redis CPU µs per call (calibrated) | calls/s measured | calls/s model | measured / model |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|")
	for _, op := range Ops() {
		if got[op] == 0 && model[op] == 0 {
			continue
		}
		ratio := "n/a"
		if model[op] > 0 {
			ratio = fmt.Sprintf("%.2f", got[op]/model[op])
		}
		fmt.Fprintf(out, "| %s | %.1f | %.0f | %.0f | %s |\n", op, float64(costs[op])/float64(time.Microsecond), got[op], model[op], ratio)
	}
	fmt.Fprintf(out, "| all | | %.0f | %.0f | %.2f |\n", got.Total(), model.Total(), got.Total()/model.Total())
	measured := res.StoreCPU.Seconds() / res.Window.Seconds()
	fromCalls, fromModel := costs.CPU(got), costs.CPU(model)
	fmt.Fprintf(out, "\nRedis CPU: %.2f cores measured; %.2f predicted from the measured calls × calibrated costs (%.2f×), %.2f from the model's calls (%.2f×).\n",
		measured, fromCalls, measured/fromCalls, fromModel, measured/fromModel)
	fmt.Fprintf(out, "Requests in the window: %d, %d granted, %d refused, %d failed, %d shed; engines' peak fill %.2f; grants that took an engine over capacity (its own count): %d. This process (routers, engines, reserver, load): %.2f cores.\n",
		res.Requests, res.Granted, res.Refused, res.Failed, res.Shed, res.PeakFill, res.OverAdmitted, res.SelfCPU.Seconds()/res.Window.Seconds())
	if res.Failed > 0 {
		fmt.Fprintf(out, "The first failed request: %s\n", res.FirstFailure)
	}
	if res.OverAdmitted != 0 {
		b.Errorf("%d grants took an engine over capacity", res.OverAdmitted)
	}

	fmt.Fprintf(out, "\n### Capacity model: 10,000 engines in 1,000 pools behind 100 routers\n\n")
	fmt.Fprintln(out, "Two reservers, 64,000 requests/s of 10 s (6.4 per engine per second: 64 running sequences each), 1.4 Grows per request, lease_ttl 30 s, session_ttl 10 s; the calibrated costs above; shards at 50% CPU.")
	fmt.Fprintln(out, "\n| variant | keepalive | acquire+release+grow | stats (fleet view) | observe | sweep+configure | Redis CPU cores | shards at 50% | one pool's CPU | one pool's grants/s on a shard of its own |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	d := Deployment{
		Pools: 1000, EnginesPerPool: 10, Routers: 100, Reservers: 2,
		Rate: 64000, MeanDuration: 10 * time.Second, GrowsPerRequest: 1.4, LeaseTTL: 30 * time.Second,
		KeepAliveInterval: 10 * time.Second / 3, ViewInterval: 250 * time.Millisecond,
		ReconcileInterval: 2 * time.Second, SweepInterval: time.Second, ReapplyInterval: 15 * time.Second,
	}
	for _, v := range []struct {
		name string
		edit func(*Deployment)
	}{
		{"defaults (--view-interval 250ms)", func(*Deployment) {}},
		{"--view-interval 5s", func(d *Deployment) { d.ViewInterval = 5 * time.Second }},
		{"--view-interval 5s, block leases (99.9% local)", func(d *Deployment) { d.ViewInterval, d.BlockLocal = 5*time.Second, 0.999 }},
	} {
		dv := d
		v.edit(&dv)
		s, err := dv.Size(costs, 0.5)
		if err != nil {
			b.Fatal(err)
		}
		r := s.Rates
		fmt.Fprintf(out, "| %s | %.0f/s | %.0f/s | %.0f/s | %.0f/s | %.0f/s | %.1f | %d | %.3f | %.0f |\n", v.name,
			r[OpKeepAlive], r[OpAcquire]+r[OpRelease]+r[OpGrow], r[OpStats], r[OpObserve], r[OpSweep]+r[OpConfigure],
			s.CPU, s.Shards, s.PoolCPU, s.PoolGrantsMax)
		if math.IsNaN(s.CPU) {
			b.Fatalf("%s: no CPU figure", v.name)
		}
	}
	fmt.Print(out.String())
}
