package capacity

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Deployment is what the model sizes: the fleet, its traffic and the
// intervals of the calls that do not follow traffic. Zero intervals turn
// their calls off (ViewInterval 0 is --view-interval 0).
type Deployment struct {
	Pools          int
	EnginesPerPool int
	Routers        int
	// Reservers each observe every engine, sweep and re-apply every pool.
	Reservers int
	// Rate is requests per second, fleet-wide, spread evenly over pools.
	Rate float64
	// MeanDuration is a request's mean time holding its lease.
	MeanDuration time.Duration
	// GrowsPerRequest is the elastic Grow calls per request (about 1.4 in
	// the goodput benchmark; 0 in worst_case pools).
	GrowsPerRequest float64
	// LeaseTTL is lease.lease_ttl: a lease is renewed once half of it
	// has passed.
	LeaseTTL time.Duration
	// BlockLocal is the share of requests admitted against block leases
	// without a ledger call (0 without block leases; 0.999 in the router
	// benchmark with them).
	BlockLocal float64
	// KeepAliveInterval is lease.renew_interval (session_ttl/3).
	KeepAliveInterval time.Duration
	// ViewInterval is the routers' --view-interval: one Stats per router
	// per pool per interval.
	ViewInterval time.Duration
	// ReconcileInterval, SweepInterval and ReapplyInterval are the
	// reservers' --reconcile-interval, --sweep-interval and
	// --reapply-interval.
	ReconcileInterval, SweepInterval, ReapplyInterval time.Duration
}

// Validate reports the first impossible field.
func (d Deployment) Validate() error {
	switch {
	case d.Pools < 1 || d.EnginesPerPool < 1 || d.Routers < 1 || d.Reservers < 0:
		return fmt.Errorf("capacity: deployment: %d pools, %d engines per pool, %d routers, %d reservers: want >= 1 of each (reservers >= 0)",
			d.Pools, d.EnginesPerPool, d.Routers, d.Reservers)
	case d.Rate < 0 || math.IsNaN(d.Rate) || d.MeanDuration < 0 || d.GrowsPerRequest < 0:
		return errors.New("capacity: deployment: rate, mean duration and grows per request must be >= 0")
	case d.BlockLocal < 0 || d.BlockLocal > 1:
		return fmt.Errorf("capacity: deployment: BlockLocal %g: want [0, 1]", d.BlockLocal)
	case d.LeaseTTL <= 0 || d.KeepAliveInterval <= 0:
		return errors.New("capacity: deployment: LeaseTTL and KeepAliveInterval must be > 0")
	case d.ViewInterval < 0 || d.ReconcileInterval < 0 || d.SweepInterval < 0 || d.ReapplyInterval < 0:
		return errors.New("capacity: deployment: intervals must be >= 0 (0: off)")
	}
	return nil
}

// Rates are ledger calls per second by Op.
type Rates [numOps]float64

// Total is the calls per second of every Op.
func (r Rates) Total() float64 {
	var t float64
	for _, v := range r {
		t += v
	}
	return t
}

// per is n calls every interval, per second; 0 when interval is 0.
func per(n float64, interval time.Duration) float64 {
	if interval <= 0 {
		return 0
	}
	return n / interval.Seconds()
}

// RenewsPerRequest is how many times a lease of duration d is renewed:
// once each time half of leaseTTL has passed since its deadline was set.
func RenewsPerRequest(d, leaseTTL time.Duration) float64 {
	if leaseTTL <= 0 {
		return 0
	}
	return math.Floor(d.Seconds() / (leaseTTL.Seconds() / 2))
}

// Rates returns the ledger calls per second the deployment makes. Per
// request: an Acquire, a Release, the Grows and the Renews, unless a block
// admitted it locally; per router and pool a KeepAlive per keepalive
// interval and a Stats per view interval; per reserver an Observe per
// engine per reconcile interval, a Sweep and a Configure per pool per
// their intervals.
func (d Deployment) Rates() Rates {
	var r Rates
	req := d.Rate * (1 - d.BlockLocal)
	r[OpAcquire] = req
	r[OpRelease] = req
	r[OpGrow] = req * d.GrowsPerRequest
	r[OpRenew] = req * RenewsPerRequest(d.MeanDuration, d.LeaseTTL)
	sessions := float64(d.Routers * d.Pools)
	r[OpKeepAlive] = per(sessions, d.KeepAliveInterval)
	r[OpStats] = per(sessions, d.ViewInterval)
	res := float64(d.Reservers)
	r[OpObserve] = per(res*float64(d.Pools*d.EnginesPerPool), d.ReconcileInterval)
	r[OpSweep] = per(res*float64(d.Pools), d.SweepInterval)
	r[OpConfigure] = per(res*float64(d.Pools), d.ReapplyInterval)
	return r
}

// Costs is the store CPU one call of each Op costs (for Redis: the
// server's user+system CPU per call under load, networking included).
type Costs [numOps]time.Duration

// CPU is the store CPU the rates need: CPU-seconds per second.
func (c Costs) CPU(r Rates) float64 {
	var s float64
	for i, v := range r {
		s += v * c[i].Seconds()
	}
	return s
}

// Sizing is the model's answer for a deployment on a store whose calls
// cost Costs.
type Sizing struct {
	Rates Rates
	// CPU is the store CPU-seconds per second the deployment needs.
	CPU float64
	// Shards is how many Redis shards (one CPU each, single-threaded) hold
	// that CPU at utilization Target.
	Shards int
	Target float64
	// PoolCPU is one pool's share of CPU: all of it lands on the one shard
	// that serves the pool's slot, so it must stay below one CPU.
	PoolCPU float64
	// PoolGrantsMax is the grants per second one pool could take on a
	// shard of its own (its Acquire, Release and Grows, nothing else), the
	// per-pool serialization bound.
	PoolGrantsMax float64
}

// Size applies the model: target is the utilization a shard may run at
// (0.5 leaves headroom for bursts and failover).
func (d Deployment) Size(c Costs, target float64) (Sizing, error) {
	if err := d.Validate(); err != nil {
		return Sizing{}, err
	}
	if !(target > 0 && target <= 1) {
		return Sizing{}, fmt.Errorf("capacity: target utilization %g: want (0, 1]", target)
	}
	s := Sizing{Rates: d.Rates(), Target: target}
	s.CPU = c.CPU(s.Rates)
	s.Shards = max(1, int(math.Ceil(s.CPU/target)))
	s.PoolCPU = s.CPU / float64(d.Pools)
	perGrant := c[OpAcquire] + c[OpRelease] + time.Duration(d.GrowsPerRequest*float64(c[OpGrow]))
	if perGrant > 0 {
		s.PoolGrantsMax = 1 / perGrant.Seconds()
	}
	return s, nil
}
