package fleet

// Marshal is Parse's inverse: the file is written from the same YAML types
// Parse decodes, so there is one schema.

import (
	"go.yaml.in/yaml/v3"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Marshal renders f as a fleet file that Parse reads back to f. Every field
// Parse would default is written explicitly, except those whose zero value
// the file cannot hold (session_ttl, lease_ttl, renew_interval, retry_after,
// format, stale_policy, priorities, default_priority, reserve with its
// growth_headroom, the breaker's fields): a zero there is left
// out and takes Parse's default. API keys are written as their hashes.
// Marshal does not validate; Parse does.
func Marshal(f *Fleet) ([]byte, error) {
	raw := fileYAML{DefaultPriority: string(f.DefaultPriority)}
	for _, p := range f.Pools {
		m := p.MediaTokens
		py := poolYAML{
			Name:        string(p.Name),
			RetryAfter:  nonZero(p.RetryAfter),
			MaxModelLen: nonZero(p.MaxModelLen),
			MediaTokens: &mediaYAML{Image: &m.Image, Audio: &m.Audio, Video: &m.Video},
			Reserve:     string(p.Reserve),
			// 0 is the default: omitted.
			FirstByteTimeout: p.FirstByteTimeout,
		}
		if p.Reserve == ledger.ReserveElastic {
			// A zero headroom is a setting here; with no reserve at
			// all, both take Parse's defaults.
			py.GrowthHeadroom = &p.GrowthHeadroom
		}
		if b := p.Breaker; b != (ledger.BreakerSpec{}) {
			py.Breaker = &breakerYAML{Failures: nonZero(b.Failures), Cooldown: nonZero(b.Cooldown),
				Probes: nonZero(b.Probes), Successes: nonZero(b.Successes)}
		}
		for _, e := range p.Engines {
			ey := engineYAML{
				ID: string(e.ID), URL: e.URL, Slots: e.Slots, Format: string(e.Format),
				MetricsURL: e.MetricsURL, StaleAfter: &e.StaleAfter, StalePolicy: string(e.StalePolicy),
				Headroom: nonZero(e.Headroom),
			}
			if !e.KVFromMetrics {
				ey.KVTokens = &e.KVTokens
			}
			py.Engines = append(py.Engines, ey)
		}
		raw.Pools = append(raw.Pools, py)
	}
	for _, t := range f.Tenants {
		ty := tenantYAML{Name: string(t.Name), KVShare: t.KVShare, SlotShare: t.SlotShare}
		ty.TokensPerMinute, ty.RequestsPerMinute = t.TokensPerMinute, t.RequestsPerMinute
		for _, k := range t.APIKeys {
			ty.APIKeys = append(ty.APIKeys, k.String())
		}
		for _, p := range t.Pools {
			ty.Pools = append(ty.Pools, string(p))
		}
		raw.Tenants = append(raw.Tenants, ty)
	}
	for _, p := range f.Priorities {
		py := priorityYAML{Name: string(p.Name), MaxFill: p.MaxFill}
		if slo, ok := f.TTFTSLOs[p.Name]; ok {
			py.TTFTSLO = &slo
		}
		raw.Priorities = append(raw.Priorities, py)
	}
	l := f.Lease
	raw.Lease = leaseYAML{
		SessionTTL:     nonZero(l.SessionTTL),
		LeaseTTL:       nonZero(l.LeaseTTL),
		RenewInterval:  nonZero(l.RenewInterval),
		RecoveryWindow: &l.RecoveryWindow,
		OrphanHold:     l.OrphanHold,
	}
	marshalTenancy(f, &raw)
	return yaml.Marshal(&raw)
}

// nonZero returns a pointer to v, or nil (omitted) when v is zero.
func nonZero[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}
