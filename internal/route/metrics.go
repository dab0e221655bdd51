package route

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/leasehold/leasehold/internal/estimate"
	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/metricinit"
)

// metrics are the router's, all leasehold_router_*, in one registry per
// Router. Labels are bounded: pools and engines come from the fleet file
// ("" for a request naming no known pool), codes and reasons from fixed
// sets.
type metrics struct {
	reg        *prometheus.Registry
	requests   *prometheus.CounterVec   // pool, status, code
	grants     *prometheus.CounterVec   // pool
	rejections *prometheus.CounterVec   // pool, reason
	admissions *prometheus.CounterVec   // pool, priority
	refused    *prometheus.CounterVec   // pool, priority, reason
	queueDepth *prometheus.GaugeVec     // pool
	queueWait  *prometheus.HistogramVec // pool, outcome
	holdSecs   *prometheus.HistogramVec // pool
	upstream   *prometheus.HistogramVec // pool, engine, stream
	firstByte  *prometheus.HistogramVec // pool, engine
	estRatio   *prometheus.GaugeVec     // pool
	tokenize   *prometheus.CounterVec   // pool, reason
	viewPolls  *prometheus.CounterVec   // pool, result
	admit      *prometheus.HistogramVec // pool, result
	grows      *prometheus.CounterVec   // pool, result
	outErr     *prometheus.HistogramVec // pool
}

func newMetrics() *metrics {
	const ns, sub = "leasehold", "router"
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "requests_total",
			Help: "Inference requests answered, by pool, HTTP status and error code (\"\" on success)."}, []string{"pool", "status", "code"}),
		grants: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "grants_total",
			Help: "Capacity grants (leases, or local admissions in the baseline mode)."}, []string{"pool"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "rejections_total",
			Help: "Requests finally refused capacity (after any wait), by ledger reason, ledger_unavailable, client_gone, upstream_error (failing over, no other candidate) or upstream_timeout (failing over, the request's deadline passed)."}, []string{"pool", "reason"}),
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "admission_requests_total",
			Help: "Requests that asked for capacity (validated, before any lease), once each, by priority class: the denominator of the refusal ratio."}, []string{"pool", "priority"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "refused_requests_total",
			Help: "Requests that asked for capacity and were refused it, once each (after any queue wait, whatever its retries), by priority class and reason: a ledger reason, ttft_slo, or ledger_unavailable; the autoscaling signal (deploy/prometheus/rules.yml)."},
			[]string{"pool", "priority", "reason"}),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "queue_depth",
			Help: "Requests waiting for capacity."}, []string{"pool"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "queue_wait_seconds",
			Help:    "Time requests waited for capacity, by outcome (granted, rejected, cancelled).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"pool", "outcome"}),
		holdSecs: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "lease_hold_seconds",
			Help: "Time from grant to release.", Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 12)}, []string{"pool"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "upstream_seconds",
			Help: "Whole upstream exchange, streaming included.", Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 12)}, []string{"pool", "engine", "stream"}),
		firstByte: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "upstream_first_byte_seconds",
			Help: "Time until the engine's response headers.", Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12)}, []string{"pool", "engine"}),
		estRatio: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "prompt_estimate_ratio",
			Help: "Calibrated prompt tokens per raw (bytes/4) estimate, margin included."}, []string{"pool"}),
		tokenize: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "tokenize_errors_total",
			Help: "Prompts (--prompt-tokens=tokenize) whose exact count was not had from an engine, so the estimate was leased, by reason: timeout, unreachable, http_error, bad_response, unsupported (no engine of the pool can count the request: TGI, or chat on SGLang)."},
			[]string{"pool", "reason"}),
		admit: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "admit_seconds",
			Help:    "One admission attempt: the ledger Acquire (retries of an unknown outcome included), or a local admission against a block lease; by result: granted, rejected (capacity or quota), error. Queue waits are queue_wait_seconds.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}}, []string{"pool", "result"}),
		viewPolls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "fleet_view_polls_total",
			Help: "Fleet view reads of the ledger's per-engine totals (--view-interval), by result: ok, freed (totals went down: a queued request was woken), error."},
			[]string{"pool", "result"}),
		grows: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "lease_grows_total",
			Help: "Ledger Grow calls of elastic leases as their streamed output passed the reservation, by result: ok, overgrown (the growth took its engine above capacity or its tenant above quota), error (ledger unreachable or lease gone), invalid (refused as malformed, e.g. the pool turned worst_case); after error or invalid the lease grows no more and reconciliation charges the rest."},
			[]string{"pool", "result"}),
		outErr: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "completion_estimate_error_ratio",
			Help:    "Elastic pools: actual completion tokens over the output a lease first reserved, per released request whose engine reported usage (above 1: the lease grew or was unseen until reconciled).",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 4, 8, 16}}, []string{"pool"}),
	}
	m.reg.MustRegister(m.grows, m.outErr, m.admissions, m.refused)
	m.reg.MustRegister(m.requests, m.grants, m.rejections, m.queueDepth, m.queueWait, m.holdSecs, m.upstream, m.firstByte, m.estRatio, m.tokenize, m.viewPolls, m.admit,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// zero creates pool's series whose labels are known at start at zero
// (internal/metricinit): panels and alerts read 0, not "No data".
func (m *metrics) zero(p fleet.Pool, prios []ledger.PrioritySpec, ratio float64) {
	l := metricinit.ForPool(p, prios)
	_ = metricinit.ZeroAll(map[*prometheus.MetricVec][][]string{ // the lists match each family's labels: tested
		m.requests.MetricVec: {l.Pool, {"200"}, {""}}, m.rejections.MetricVec: {l.Pool, l.Refusals},
		m.admissions.MetricVec: {l.Pool, l.Classes}, m.refused.MetricVec: {l.Pool, l.Classes, l.Refusals},
		m.queueWait.MetricVec: {l.Pool, {"granted", "rejected", "cancelled"}}, m.holdSecs.MetricVec: {l.Pool},
		m.firstByte.MetricVec: {l.Pool, l.Engines}, m.admit.MetricVec: {l.Pool, {"granted", "rejected", "error"}},
	})
	m.estRatio.WithLabelValues(string(p.Name)).Set(ratio)
}

// registerLearned adds a pool's learned completion length and the releases
// it is drawn from, read at scrape time.
func (m *metrics) registerLearned(pool ledger.PoolID, l *estimate.Learned) {
	labels := prometheus.Labels{"pool": string(pool)}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "leasehold", Subsystem: "router", Name: "completion_estimate_tokens",
		Help:        "Elastic pools: the learned completion length a new lease reserves per sequence (the --reserve-quantile of the fleet-wide lengths); 0 while the pool is cold and leases reserve their worst case.",
		ConstLabels: labels}, func() float64 { t, _ := l.Pool(); return float64(t) }))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "leasehold", Subsystem: "router", Name: "completion_estimate_samples",
		Help:        "Elastic pools: the released leases the learned completion length is drawn from.",
		ConstLabels: labels}, func() float64 { _, n := l.Pool(); return float64(n) }))
}

// registerMedia adds each pool's reservation per media item, read at
// scrape time: the fleet's media_tokens, or more once engines reported
// more (internal/estimate).
func (m *metrics) registerMedia(pool ledger.PoolID, md *estimate.Media) {
	for k := range estimate.Kinds {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "leasehold", Subsystem: "router", Name: "media_tokens_per_item",
			Help:        "KV tokens reserved per image, audio clip or video of a chat request: the pool's media_tokens, raised to the most an engine reported per item (0: refused).",
			ConstLabels: prometheus.Labels{"pool": string(pool), "kind": estimate.KindNames[k]}},
			func() float64 { return float64(md.PerItem(k)) }))
	}
}

// registerAdmitter adds the fenced gauge and, in ledger admission, the
// lease manager's counters, read at scrape time.
func (m *metrics) registerAdmitter(a admitter, pools []ledger.PoolID) {
	for _, p := range pools {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "leasehold", Subsystem: "router", Name: "fenced",
			Help: "1 while the pool's holder session is unconfirmed (no new grants; held leases cancelled).", ConstLabels: prometheus.Labels{"pool": string(p)}},
			func() float64 {
				if a.fenced(p) {
					return 1
				}
				return 0
			}))
	}
	if la, ok := a.(*ledgerAdmitter); ok {
		m.reg.MustRegister(&leaseCollector{m: la.m})
	}
}

// leaseCollector exports lease.Manager's counters.
type leaseCollector struct{ m *lease.Manager }

var (
	leaseDescs = map[string]*prometheus.Desc{}
	leaseNames = []struct{ name, help string }{
		{"lease_renewals_total", "Lease renewals."},
		{"lease_renew_failures_total", "Failed lease renewals."},
		{"lease_reasserts_total", "Leases re-asserted after ledger loss."},
		{"lease_lost_total", "Leases lost (Done closed with ErrLeaseLost)."},
		{"lease_fences_total", "Times a pool's session fenced itself."},
		{"lease_fenced_leases_total", "Leases cancelled by fencing."},
		{"lease_release_failures_total", "Releases left to retry in the background."},
		{"lease_acquire_retries_total", "Acquire re-sends after a lost reply."},
		{"keepalive_failures_total", "Failed holder-session keepalives."},
		{"block_local_admits_total", "Requests admitted against a block lease without a ledger call."},
		{"block_ledger_calls_saved_total", "Ledger Acquire and Release calls avoided by local admissions (before the blocks' own calls)."},
		{"block_acquires_total", "Block leases acquired."},
		{"block_releases_total", "Block leases released."},
		{"block_refusals_total", "Block lease acquisitions that failed."},
	}
	leaseHeld = prometheus.NewDesc("leasehold_router_leases_held", "Leases this router holds.", nil, nil)
)

func init() {
	for _, n := range leaseNames {
		leaseDescs[n.name] = prometheus.NewDesc("leasehold_router_"+n.name, n.help, nil, nil)
	}
}

func (c *leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range leaseDescs {
		ch <- d
	}
	ch <- leaseHeld
}

func (c *leaseCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.m.Stats()
	k := s.Counters
	for name, v := range map[string]uint64{
		"lease_renewals_total": k.Renewals, "lease_renew_failures_total": k.RenewFailures,
		"lease_reasserts_total": k.Reasserts, "lease_lost_total": k.Lost, "lease_fences_total": k.Fences,
		"lease_fenced_leases_total": k.FencedLeases, "lease_release_failures_total": k.ReleaseFailures,
		"lease_acquire_retries_total": k.AcquireRetries, "keepalive_failures_total": k.KeepAliveFails,
		"block_local_admits_total": k.LocalAdmits, "block_ledger_calls_saved_total": k.LedgerCallsSaved,
		"block_acquires_total": k.BlockAcquires, "block_releases_total": k.BlockReleases,
		"block_refusals_total": k.BlockRefusals,
	} {
		ch <- prometheus.MustNewConstMetric(leaseDescs[name], prometheus.CounterValue, float64(v))
	}
	ch <- prometheus.MustNewConstMetric(leaseHeld, prometheus.GaugeValue, float64(s.Held))
}
