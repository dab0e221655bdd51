package chaos

// The fleet file the processes read, written with internal/fleet's own
// types (fleet.Marshal), so the runner and the binaries share one schema.

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// fleetOf is the topology's fleet: one pool named for the model holding
// every engine, the tenants with their runner-given keys, and the lease
// timings. urls maps engine index to the URL the reader should use (the
// engine's own, or a router's proxy). Fields the topology does not set
// keep fleet's defaults (lease_ttl and renew_interval are derived from
// session_ttl by Parse).
func (c *cluster) fleetOf(urls func(i int) string) *fleet.Fleet {
	t := c.sc.Topology
	pool := fleet.Pool{Name: ledger.PoolID(t.Model), MediaTokens: fleet.DefaultMediaTokens, Reserve: ledger.ReserveMode(t.Reserve)}
	pool.FirstByteTimeout = t.FirstByteTimeout.D()
	if b := t.Breaker; b != nil {
		// Zero fields are left out of the file and take the fleet's defaults.
		pool.Breaker = ledger.BreakerSpec{Failures: b.Failures, Cooldown: b.Cooldown.D(), Probes: b.Probes, Successes: b.Successes}
	}
	if pool.Reserve == ledger.ReserveElastic {
		pool.GrowthHeadroom = fleet.DefaultGrowthHeadroom
		if t.GrowthHeadroom != nil {
			pool.GrowthHeadroom = *t.GrowthHeadroom
		}
	}
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
		pool.Engines = append(pool.Engines, fleet.Engine{
			ID: ledger.EngineID(e.id), URL: urls(i), MetricsURL: "http://" + e.addr + "/metrics",
			KVTokens: e.kvTokens, Slots: e.slots, Format: telemetry.Format(groupOf(i).Format),
			StaleAfter: t.StaleAfter.D(), StalePolicy: ledger.StalePolicy(t.StalePolicy),
		})
	}
	f := &fleet.Fleet{Pools: []fleet.Pool{pool}}
	for _, tn := range t.Tenants {
		f.Tenants = append(f.Tenants, fleet.Tenant{
			Name: ledger.TenantID(tn.Name), APIKeys: []fleet.KeyHash{fleet.HashAPIKey(tn.APIKey())},
			KVShare: tn.KVShare, SlotShare: tn.SlotShare, TokensPerMinute: tn.TokensPerMinute, RequestsPerMinute: tn.RequestsPerMinute,
		})
	}
	for _, p := range t.Priorities {
		f.Priorities = append(f.Priorities, ledger.PrioritySpec{Name: ledger.PriorityName(p.Name), MaxFill: p.MaxFill})
		if p.TTFTSLO > 0 {
			if f.TTFTSLOs == nil {
				f.TTFTSLOs = map[ledger.PriorityName]time.Duration{}
			}
			f.TTFTSLOs[ledger.PriorityName(p.Name)] = p.TTFTSLO.D()
		}
	}
	f.Lease = fleet.Lease{SessionTTL: t.SessionTTL.D(), OrphanHold: t.OrphanHold.D()}
	if t.RecoveryWindow != nil {
		f.Lease.RecoveryWindow = t.RecoveryWindow.D()
	} else {
		// The file's default: session_ttl.
		f.Lease.RecoveryWindow = f.Lease.SessionTTL
	}
	return f
}

// fleetYAML renders the fleet file (see fleetOf) and checks that the
// binaries will accept it.
func (c *cluster) fleetYAML(urls func(i int) string) ([]byte, error) {
	b, err := fleet.Marshal(c.fleetOf(urls))
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
