package chaos

// The fleet file the processes read, written with internal/fleet's own
// types (fleet.Marshal), so the runner and the binaries share one schema.

import (
	"fmt"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"

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
			KVShare: tn.KVShare, SlotShare: tn.SlotShare,
		})
	}
	for _, p := range t.Priorities {
		f.Priorities = append(f.Priorities, ledger.PrioritySpec{Name: ledger.PriorityName(p.Name), MaxFill: p.MaxFill})
	}
	f.Lease = fleet.Lease{SessionTTL: t.SessionTTL.D(), OrphanHold: t.OrphanHold.D()}
	if t.RecoveryWindow != nil {
		f.Lease.RecoveryWindow = t.RecoveryWindow.D()
	} else {
		// The file's default: the larger of 10s and session_ttl.
		f.Lease.RecoveryWindow = max(fleet.DefaultRecoveryWindow, f.Lease.SessionTTL)
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
	if b, err = withHealth(b, c.sc.Topology); err != nil {
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

// withHealth adds the topology's issue-16 settings to the fleet file b:
// pools[].breaker, pools[].first_byte_timeout and priorities[].ttft_slo,
// under the names the fleet file gives them. They are written into the
// YAML rather than through fleet's types so that the scenarios parse and
// run against any checkout: where the fleet schema lacks a field, Parse
// rejects the file and the run stops with that error, naming the field.
func withHealth(b []byte, t Topology) ([]byte, error) {
	var slo bool
	for _, p := range t.Priorities {
		slo = slo || p.TTFTSLO > 0
	}
	if t.Breaker == nil && t.FirstByteTimeout == 0 && !slo {
		return b, nil
	}
	var f map[string]any
	if err := yaml.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	pools, _ := f["pools"].([]any)
	for _, p := range pools {
		pool, ok := p.(map[string]any)
		if !ok {
			continue
		}
		if br := t.Breaker; br != nil {
			m := map[string]any{}
			if br.Failures != 0 {
				m["failures"] = br.Failures
			}
			if br.Cooldown != 0 {
				m["cooldown"] = br.Cooldown.String()
			}
			if br.Probes != 0 {
				m["probes"] = br.Probes
			}
			if br.Successes != 0 {
				m["successes"] = br.Successes
			}
			pool["breaker"] = m
		}
		if t.FirstByteTimeout > 0 {
			pool["first_byte_timeout"] = t.FirstByteTimeout.String()
		}
	}
	prios, _ := f["priorities"].([]any)
	for _, p := range prios {
		pr, ok := p.(map[string]any)
		if !ok {
			continue
		}
		for _, ps := range t.Priorities {
			if pr["name"] == ps.Name && ps.TTFTSLO > 0 {
				pr["ttft_slo"] = ps.TTFTSLO.String()
			}
		}
	}
	return yaml.Marshal(f)
}
