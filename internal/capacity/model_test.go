package capacity

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestRenewsPerRequest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		d, ttl time.Duration
		want   float64
	}{
		{"shorter than half the TTL", 10 * time.Second, 30 * time.Second, 0},
		{"exactly half", 15 * time.Second, 30 * time.Second, 1},
		{"two-minute stream", 2 * time.Minute, 30 * time.Second, 8},
		{"no TTL", time.Minute, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RenewsPerRequest(tc.d, tc.ttl); got != tc.want {
				t.Errorf("RenewsPerRequest(%s, %s) = %g, want %g", tc.d, tc.ttl, got, tc.want)
			}
		})
	}
}

// big is the deployment: 10,000 engines in 1,000 pools behind 100
// routers, 2 reservers, 64,000 requests/s of 10 s.
func big() Deployment {
	return Deployment{
		Pools: 1000, EnginesPerPool: 10, Routers: 100, Reservers: 2,
		Rate: 64000, MeanDuration: 10 * time.Second, GrowsPerRequest: 1.4, LeaseTTL: 30 * time.Second,
		KeepAliveInterval: 10 * time.Second / 3, ViewInterval: 250 * time.Millisecond,
		ReconcileInterval: 2 * time.Second, SweepInterval: time.Second, ReapplyInterval: 15 * time.Second,
	}
}

func TestRates(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Deployment)
		want Rates
	}{
		{"defaults", func(*Deployment) {}, Rates{
			OpKeepAlive: 30000, OpAcquire: 64000, OpRelease: 64000, OpGrow: 89600, OpRenew: 0,
			OpStats: 400000, OpObserve: 10000, OpSweep: 2000, OpConfigure: 2000.0 / 15,
		}},
		{"block leases, view every 5 s, 2-minute streams", func(d *Deployment) {
			d.BlockLocal, d.ViewInterval, d.MeanDuration = 0.99, 5*time.Second, 2*time.Minute
		}, Rates{
			OpKeepAlive: 30000, OpAcquire: 640, OpRelease: 640, OpGrow: 896, OpRenew: 640 * 8,
			OpStats: 20000, OpObserve: 10000, OpSweep: 2000, OpConfigure: 2000.0 / 15,
		}},
		{"no fleet view, no reservers", func(d *Deployment) { d.ViewInterval, d.Reservers = 0, 0 }, Rates{
			OpKeepAlive: 30000, OpAcquire: 64000, OpRelease: 64000, OpGrow: 89600,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := big()
			tc.edit(&d)
			got := d.Rates()
			for _, op := range Ops() {
				if math.Abs(got[op]-tc.want[op]) > 1e-6*max(1, tc.want[op]) {
					t.Errorf("%s: %g calls/s, want %g", op, got[op], tc.want[op])
				}
			}
		})
	}
}

func TestSize(t *testing.T) {
	var c Costs
	c[OpKeepAlive], c[OpAcquire], c[OpRelease], c[OpGrow] = 20*time.Microsecond, 40*time.Microsecond, 40*time.Microsecond, 30*time.Microsecond
	c[OpStats], c[OpObserve], c[OpSweep], c[OpConfigure] = 50*time.Microsecond, 30*time.Microsecond, 20*time.Microsecond, 100*time.Microsecond
	d := big()
	s, err := d.Size(c, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	// 30000×20 + 64000×80 + 89600×30 + 400000×50 + 10000×30 + 2000×20 + 133.3×100 µs
	want := (600000 + 5120000 + 2688000 + 20000000 + 300000 + 40000 + 2000.0/15*100) / 1e6
	if math.Abs(s.CPU-want) > 1e-9 {
		t.Errorf("CPU = %g, want %g", s.CPU, want)
	}
	if s.Shards != int(math.Ceil(want/0.5)) {
		t.Errorf("Shards = %d, want %d", s.Shards, int(math.Ceil(want/0.5)))
	}
	if math.Abs(s.PoolCPU-want/1000) > 1e-12 {
		t.Errorf("PoolCPU = %g, want %g", s.PoolCPU, want/1000)
	}
	if wantMax := 1 / (122e-6); math.Abs(s.PoolGrantsMax-wantMax) > 1e-6 {
		t.Errorf("PoolGrantsMax = %g, want %g (one grant: acquire, release, 1.4 grows)", s.PoolGrantsMax, wantMax)
	}
}

func TestDeploymentValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Deployment)
		want string
	}{
		{"no pools", func(d *Deployment) { d.Pools = 0 }, "0 pools"},
		{"negative rate", func(d *Deployment) { d.Rate = -1 }, "rate"},
		{"block share over 1", func(d *Deployment) { d.BlockLocal = 1.5 }, "BlockLocal"},
		{"no lease TTL", func(d *Deployment) { d.LeaseTTL = 0 }, "LeaseTTL"},
		{"negative interval", func(d *Deployment) { d.ViewInterval = -time.Second }, "intervals"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := big()
			tc.edit(&d)
			if err := d.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error naming %s", err, tc.want)
			}
			if _, err := d.Size(Costs{}, 0.5); err == nil {
				t.Error("Size accepted it")
			}
		})
	}
	if _, err := big().Size(Costs{}, 0); err == nil {
		t.Error("Size accepted a target utilization of 0")
	}
}
