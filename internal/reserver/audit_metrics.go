package reserver

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/internal/audit"
	"github.com/leasehold/leasehold/internal/ledger"
)

// auditCollector exports the audit's anomalies as a gauge per pool and
// kind, built at scrape time exactly as GET /v1/audit builds them (the same
// leases, sessions, scrapes and options, bounded by audit.DefaultMaxLeases
// per pool), so an alert can fire on what the audit page shows. Every kind
// is exported for every pool, 0 when there is none, so a missing series
// means the audit could not be read (leasehold_audit_up says so). Its
// per-tenant section is exported too: the fleet-wide reservations of each
// configured tenant by priority class, and its quota (label values are the
// ledger's tenants and classes, configured from the fleet file).
type auditCollector struct {
	report func(ctx context.Context, f ledger.Filter) (audit.Report, error)
	log    *slog.Logger

	anomalies, up                      *prometheus.Desc
	tenantKV, tenantSlots, tenantQuota *prometheus.Desc
}

func newAuditCollector(report func(context.Context, ledger.Filter) (audit.Report, error), log *slog.Logger) *auditCollector {
	return &auditCollector{
		report: report, log: log,
		anomalies: prometheus.NewDesc(prometheus.BuildFQName(namespace, "audit", "anomalies"),
			"Anomalies the audit finds now, by pool and kind (see GET /v1/audit for each one).", []string{"pool", "kind"}, nil),
		up: prometheus.NewDesc(prometheus.BuildFQName(namespace, "audit", "up"),
			"1 when the audit could be built for this scrape, else 0.", nil, nil),
		tenantKV: prometheus.NewDesc(prometheus.BuildFQName(namespace, "audit", "tenant_reserved_kv_tokens"),
			"KV tokens a tenant's leases reserve fleet-wide, by pool, tenant and priority class.", []string{"pool", "tenant", "priority"}, nil),
		tenantSlots: prometheus.NewDesc(prometheus.BuildFQName(namespace, "audit", "tenant_reserved_slots"),
			"Slots a tenant's leases reserve fleet-wide, by pool, tenant and priority class.", []string{"pool", "tenant", "priority"}, nil),
		tenantQuota: prometheus.NewDesc(prometheus.BuildFQName(namespace, "audit", "tenant_quota_kv_tokens"),
			"A tenant's KV quota in the pool now (kv_share of the pool's capacity).", []string{"pool", "tenant"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *auditCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.anomalies
	ch <- c.up
	ch <- c.tenantKV
	ch <- c.tenantSlots
	ch <- c.tenantQuota
}

// Collect implements prometheus.Collector.
func (c *auditCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
	defer cancel()
	rep, err := c.report(ctx, ledger.Filter{})
	if err != nil {
		c.log.Debug("metrics: audit", "err", err)
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	counts := map[ledger.PoolID]map[audit.Kind]int{}
	for _, p := range rep.Pools {
		counts[p.Pool] = map[audit.Kind]int{}
	}
	for _, a := range rep.Anomalies {
		if counts[a.Pool] == nil {
			counts[a.Pool] = map[audit.Kind]int{}
		}
		counts[a.Pool][a.Kind]++
	}
	for pool, byKind := range counts {
		for _, k := range audit.Kinds {
			ch <- prometheus.MustNewConstMetric(c.anomalies, prometheus.GaugeValue, float64(byKind[k]), string(pool), string(k))
		}
	}
	for _, t := range rep.Tenants {
		ch <- prometheus.MustNewConstMetric(c.tenantQuota, prometheus.GaugeValue, float64(t.Quota.KVTokens), string(t.Pool), string(t.Tenant))
		for _, b := range t.ByPriority {
			ch <- prometheus.MustNewConstMetric(c.tenantKV, prometheus.GaugeValue, float64(b.Reserved.KVTokens), string(t.Pool), string(t.Tenant), string(b.Priority))
			ch <- prometheus.MustNewConstMetric(c.tenantSlots, prometheus.GaugeValue, float64(b.Reserved.Slots), string(t.Pool), string(t.Tenant), string(b.Priority))
		}
	}
}
