package fleetapply

import (
	"context"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// ScrapeEngines is the discovery source of an applier that asks engines
// itself (the router): each round it scrapes the pool's engines that must
// report their KV capacity and have not yet. A failed scrape or one
// without a positive KV total is tried again next round.
func ScrapeEngines(s telemetry.Scraper) DiscoverFunc {
	return func(ctx context.Context, fl *fleet.Fleet, pool ledger.PoolID, known map[telemetry.EngineKey]int64) map[telemetry.EngineKey]int64 {
		p, _ := fl.Pool(pool)
		found := map[telemetry.EngineKey]int64{}
		for _, e := range p.Engines {
			key := telemetry.EngineKey{Pool: pool, Engine: e.ID}
			if _, ok := known[key]; !e.KVFromMetrics || ok {
				continue
			}
			sm, _, err := s.Scrape(ctx, e.MetricsURL, e.Format)
			if err != nil || !sm.Known.Has(telemetry.KnownKVTotal) || sm.KVTokensTotal <= 0 {
				continue
			}
			found[key] = sm.KVTokensTotal
		}
		return found
	}
}
