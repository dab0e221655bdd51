package reserver

// Metrics: one registry per process. Ledger state (grants, rejections,
// sweeps, reservations, capacity, holders, drift, staleness) is read from
// Stats at scrape time by a collector, so every reserver in front of the
// same store reports the same figures and nothing is double-counted in the
// process. What only this process sees (gRPC handler latency, scrape
// errors, fleet applies and reloads, its own sweeps) is counted directly.
// Labels are pools, engines, methods, codes and reasons: bounded by the
// fleet file and the code, never lease or request ids.

import (
	"context"
	"log/slog"
	"path"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/audit"
	pb "github.com/leasehold/leasehold/internal/gen/leaseholdv1"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/remote/wire"
)

const namespace = "leasehold"

// metrics are the reserver's own instruments.
type metrics struct {
	reg          *prometheus.Registry
	rpcDuration  *prometheus.HistogramVec
	scrapeErrors *prometheus.CounterVec
	applies      *prometheus.CounterVec
	reloads      *prometheus.CounterVec
	swept        *prometheus.CounterVec
	capMismatch  *prometheus.GaugeVec
}

// counterVec is a reserver counter family named namespace_subsystem_name.
func counterVec(subsystem, name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: name, Help: help,
	}, labels)
}

func newMetrics(r ledger.Ledger, log *slog.Logger) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		rpcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "reserver", Name: "grpc_request_duration_seconds",
			Help:    "Latency of the gRPC ledger handlers, by method and status code.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"method", "code"}),
		scrapeErrors: counterVec("reconcile", "scrape_errors_total",
			"Failed engine scrapes or observations, by engine.",
			"pool", "engine"),
		applies: counterVec("reserver", "fleet_applies_total",
			"Configure calls applying the fleet file to a pool, by result (ok, error, pending: capacity not yet known).",
			"pool", "result"),
		capMismatch: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "reconcile", Name: "capacity_mismatch_kv_tokens",
			Help: "KV tokens the fleet file claims for an engine beyond the capacity the engine's own metrics report (0: none). The ledger admits against the smaller figure; the audit flags capacity_mismatch.",
		}, []string{"pool", "engine"}),
		reloads: counterVec("reserver", "fleet_reloads_total",
			"Fleet file reloads (SIGHUP), by result.",
			"result"),
		swept: counterVec("reserver", "swept_leases_total",
			"Leases removed by this reserver's periodic sweeps, by kind (expired, revoked).",
			"pool", "kind"),
	}
	m.reg.MustRegister(m.rpcDuration, m.scrapeErrors, m.applies, m.reloads, m.swept, m.capMismatch,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newLedgerCollector(r, log))
	for _, res := range []string{"ok", "error"} {
		m.reloads.WithLabelValues(res)
	}
	return m
}

// unary times every handler and records the sessions KeepAlive returns,
// for the audit's expired-holder check.
func (m *metrics) unary(sessions *audit.Sessions) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		m.rpcDuration.WithLabelValues(path.Base(info.FullMethod), status.Code(err).String()).Observe(time.Since(start).Seconds())
		if ka, ok := resp.(*pb.KeepAliveResponse); ok && err == nil {
			if s, err := wire.SessionFromPB(ka.GetSession()); err == nil {
				sessions.Record(s)
			}
		}
		return resp, err
	}
}

// ledgerCollector reads every pool's Stats at scrape time.
type ledgerCollector struct {
	l   ledger.Ledger
	log *slog.Logger

	up, statsSeconds                                   *prometheus.Desc
	grants, replays, releases, expired, revoked        *prometheus.Desc
	reasserts, failovers, rejections                   *prometheus.Desc
	epoch, liveHolders, poolLeases, recovering, stales *prometheus.Desc
	leases, reservedKV, reservedSlots                  *prometheus.Desc
	capacityKV, capacitySlots, draining                *prometheus.Desc
	correctionKV, driftKV, driftSlots, stale, obsAge   *prometheus.Desc
	orphanKV, orphanSlots                              *prometheus.Desc
	breakerState, breakerTransitions                   *prometheus.Desc
}

func newLedgerCollector(l ledger.Ledger, log *slog.Logger) *ledgerCollector {
	d := func(sub, name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, sub, name), help, labels, nil)
	}
	pe := []string{"pool", "engine"}
	return &ledgerCollector{
		l: l, log: log,
		up:            d("ledger", "up", "1 when the ledger answered the last metrics read, else 0."),
		statsSeconds:  d("ledger", "stats_read_seconds", "Time taken to read every pool's Stats for this scrape."),
		grants:        d("ledger", "grants_total", "Leases granted (not counting idempotent replays).", "pool"),
		replays:       d("ledger", "replays_total", "Acquire retries answered with the existing lease.", "pool"),
		releases:      d("ledger", "releases_total", "Leases released by their holder.", "pool"),
		expired:       d("ledger", "expired_total", "Leases swept after their deadline.", "pool"),
		revoked:       d("ledger", "revoked_total", "Leases swept because their holder session died.", "pool"),
		reasserts:     d("ledger", "reasserts_total", "Leases re-asserted by their holder after ledger loss.", "pool"),
		failovers:     d("ledger", "failovers_total", "Epochs a Redis store started itself on a promoted replica that may lack the last writes.", "pool"),
		rejections:    d("ledger", "rejections_total", "Acquisitions and growths refused, by reason.", "pool", "reason"),
		epoch:         d("ledger", "epoch", "The pool's ledger epoch (ledger-clock microseconds at creation).", "pool"),
		liveHolders:   d("ledger", "live_holders", "Live holder sessions (routers) in the pool.", "pool"),
		poolLeases:    d("ledger", "pool_leases", "Outstanding leases in the pool.", "pool"),
		recovering:    d("ledger", "recovering", "1 while the pool is in its recovery window after a new epoch.", "pool"),
		stales:        d("reconcile", "stale_engines", "Engines whose telemetry the ledger counts as stale.", "pool"),
		leases:        d("ledger", "active_leases", "Outstanding leases on the engine.", pe...),
		reservedKV:    d("ledger", "reserved_kv_tokens", "KV tokens reserved on the engine.", pe...),
		reservedSlots: d("ledger", "reserved_slots", "Slots reserved on the engine.", pe...),
		capacityKV:    d("ledger", "capacity_kv_tokens", "The engine's admissible KV tokens.", pe...),
		capacitySlots: d("ledger", "capacity_slots", "The engine's admissible slots.", pe...),
		draining:      d("ledger", "engine_draining", "1 while the engine is drained.", pe...),
		correctionKV:  d("reconcile", "correction_kv_tokens", "Unaccounted KV tokens the ledger charges from telemetry (orphan_kv_tokens included).", pe...),
		orphanKV:      d("reconcile", "orphan_kv_tokens", "KV tokens still charged for leases the ledger ended on the engine (a paused or dead router's; lease.orphan_hold), part of the correction.", pe...),
		orphanSlots:   d("reconcile", "orphan_slots", "Slots still charged for leases the ledger ended on the engine, part of the correction.", pe...),
		driftKV:       d("reconcile", "drift_kv_tokens", "Reported KV tokens in use minus KV tokens reserved.", pe...),
		driftSlots:    d("reconcile", "drift_slots", "Reported running sequences minus slots reserved.", pe...),
		stale:         d("reconcile", "engine_stale", "1 when the ledger counts the engine's telemetry as stale.", pe...),
		obsAge:        d("reconcile", "observation_age_seconds", "Ledger time since the engine's last applied observation.", pe...),
		breakerState: d("ledger", "breaker_state",
			"The engine's circuit breaker, as the ledger reads it: 0 closed, 1 half_open (probe grants only), 2 open (no grants).", pe...),
		breakerTransitions: d("ledger", "breaker_transitions_total",
			"Circuit-breaker transitions in the pool, by transition (opened, half_open, reopened, closed).", "pool", "transition"),
	}
}

// breakerValue is an engine's breaker state as leasehold_ledger_breaker_state
// reports it.
func breakerValue(s ledger.BreakerState) float64 {
	switch s {
	case ledger.BreakerHalfOpen:
		return 1
	case ledger.BreakerOpen:
		return 2
	}
	return 0
}

// Describe implements prometheus.Collector.
func (c *ledgerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.statsSeconds, c.grants, c.replays, c.releases, c.expired, c.revoked,
		c.reasserts, c.failovers, c.rejections, c.epoch, c.liveHolders, c.poolLeases, c.recovering, c.stales, c.leases,
		c.reservedKV, c.reservedSlots, c.capacityKV, c.capacitySlots, c.draining, c.correctionKV,
		c.driftKV, c.driftSlots, c.stale, c.obsAge, c.orphanKV, c.orphanSlots, c.breakerState, c.breakerTransitions} {
		ch <- d
	}
}

// statsTimeout bounds the Stats reads of one scrape.
const statsTimeout = 5 * time.Second

// Collect implements prometheus.Collector.
func (c *ledgerCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
	defer cancel()
	start := time.Now()
	up := 1.0
	pools, err := c.l.Pools(ctx)
	if err != nil {
		c.log.Warn("metrics: list pools", "err", err)
		up = 0
	}
	for _, p := range pools {
		st, err := c.l.Stats(ctx, p)
		if err != nil {
			c.log.Warn("metrics: stats", "pool", p, "err", err)
			up = 0
			continue
		}
		c.pool(ch, st)
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(c.statsSeconds, prometheus.GaugeValue, time.Since(start).Seconds())
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (c *ledgerCollector) pool(ch chan<- prometheus.Metric, st ledger.PoolStats) {
	pool := string(st.Pool)
	counter := func(d *prometheus.Desc, name string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(st.Counters[name]), pool)
	}
	counter(c.grants, ledger.CounterGrants)
	counter(c.replays, ledger.CounterReplays)
	counter(c.releases, ledger.CounterReleases)
	counter(c.expired, ledger.CounterExpired)
	counter(c.revoked, ledger.CounterRevoked)
	counter(c.reasserts, ledger.CounterReasserts)
	counter(c.failovers, ledger.CounterFailovers)
	for _, r := range ledger.Reasons {
		ch <- prometheus.MustNewConstMetric(c.rejections, prometheus.CounterValue,
			float64(st.Counters[ledger.CounterRejections+":"+string(r)]), pool, string(r))
	}
	for _, t := range ledger.BreakerTransitions {
		ch <- prometheus.MustNewConstMetric(c.breakerTransitions, prometheus.CounterValue,
			float64(st.Counters[ledger.BreakerCounter(t)]), pool, string(t))
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.epoch, float64(st.Epoch), pool)
	gauge(c.liveHolders, float64(st.LiveHolders), pool)
	gauge(c.poolLeases, float64(st.Leases), pool)
	gauge(c.recovering, b2f(st.RecoveringUntil.After(st.Now)), pool)
	stales := 0
	for _, e := range st.Engines {
		eng := string(e.Spec.ID)
		gauge(c.leases, float64(e.Leases), pool, eng)
		gauge(c.reservedKV, float64(e.ReservedKV), pool, eng)
		gauge(c.reservedSlots, float64(e.ReservedSlots), pool, eng)
		gauge(c.capacityKV, float64(e.Spec.KVTokens), pool, eng)
		gauge(c.capacitySlots, float64(e.Spec.Slots), pool, eng)
		gauge(c.draining, b2f(e.Draining), pool, eng)
		gauge(c.correctionKV, float64(e.CorrectionKV), pool, eng)
		gauge(c.orphanKV, float64(e.OrphanKV), pool, eng)
		gauge(c.orphanSlots, float64(e.OrphanSlots), pool, eng)
		gauge(c.stale, b2f(e.Stale), pool, eng)
		gauge(c.breakerState, breakerValue(e.Breaker.State), pool, eng)
		if e.Stale {
			stales++
		}
		if !e.ObservedAt.IsZero() {
			gauge(c.driftKV, float64(e.LastObservation.KVTokensUsed-e.ReservedKV), pool, eng)
			gauge(c.driftSlots, float64(e.LastObservation.Running-e.ReservedSlots), pool, eng)
			gauge(c.obsAge, max(0, st.Now.Sub(e.ObservedAt).Seconds()), pool, eng)
		}
	}
	gauge(c.stales, float64(stales), pool)
}
