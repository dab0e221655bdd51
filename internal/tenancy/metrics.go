package tenancy

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/waitq"
)

// Metrics are a router's per-tenant series, leasehold_router_tenant_*,
// labelled by pool, tenant and priority class. Every label value comes from
// the fleet file (an authenticated tenant, a pool it may use, a listed
// class) or a fixed set (reasons, token kinds), so the series are bounded
// by its pools × tenants × classes. Safe for concurrent use.
type Metrics struct {
	requests      *prometheus.CounterVec // pool, tenant, priority
	grants        *prometheus.CounterVec // pool, tenant, priority
	refusals      *prometheus.CounterVec // pool, tenant, priority, reason
	tokens        *prometheus.CounterVec // pool, tenant, priority, kind
	reservedKV    *prometheus.GaugeVec   // pool, tenant, priority
	reservedSlots *prometheus.GaugeVec   // pool, tenant, priority
	reloads       *prometheus.CounterVec // result

	queuedDesc *prometheus.Desc
	// series caches each (pool, tenant, class)'s series: the label lookups
	// were six per request (seriesKey -> *series).
	series sync.Map
	// mu guards queues.
	mu     sync.Mutex
	queues []watched
}

type watched struct {
	pool    ledger.PoolID
	q       *waitq.Queue
	classes []ledger.PriorityName // by rank
}

// NewMetrics registers the per-tenant series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns, sub = "leasehold", "router"
	labels := []string{"pool", "tenant", "priority"}
	counter := func(name, help string, extra ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help}, append(labels, extra...))
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help}, labels)
	}
	m := &Metrics{
		requests: counter("tenant_requests_total", "Requests that asked for capacity (validated, authenticated, before any lease), once each, by tenant and the class they asked for or were given."),
		grants:   counter("tenant_grants_total", "Capacity grants, by tenant and class (a request that fails over is granted once per engine tried)."),
		refusals: counter("tenant_refusals_total", "Requests refused capacity, once each, by tenant, class and reason: priority_not_allowed, queue_full, a ledger reason, ttft_slo or ledger_unavailable.", "reason"),
		tokens:   counter("tenant_tokens_total", "Tokens of released requests, by tenant, class and kind (prompt, completion), as the engine reported them (completion: the streamed chunks when it did not).", "kind"),
		reservedKV: gauge("tenant_reserved_kv_tokens",
			"KV tokens this router's granted requests reserve, by tenant and class, as granted (an elastic lease's growth is not followed); the sum over routers is the fleet's."),
		reservedSlots: gauge("tenant_reserved_slots", "Slots this router's granted requests reserve, by tenant and class."),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "fleet_reloads_total",
			Help: "Fleet file reloads (SIGHUP), by result: ok (the tenants, keys and priority_policy applied), error (the previous fleet kept)."}, []string{"result"}),
		queuedDesc: prometheus.NewDesc(ns+"_"+sub+"_tenant_queued", "Requests waiting in the pool's wait queue, by tenant and class.", labels, nil),
	}
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("error")
	reg.MustRegister(m.requests, m.grants, m.refusals, m.tokens, m.reservedKV, m.reservedSlots, m.reloads, (*queueCollector)(m))
	return m
}

// Reloaded counts a fleet file reload.
func (m *Metrics) Reloaded(err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.reloads.WithLabelValues(result).Inc()
}

// WatchQueue exports the waiters of pool's queue q per tenant and class
// (f's priorities, whose ranks the queue's keys hold).
func (m *Metrics) WatchQueue(pool ledger.PoolID, q *waitq.Queue, f *fleet.Fleet) {
	classes := make([]ledger.PriorityName, len(f.Priorities))
	for i, c := range f.Priorities {
		classes[i] = c.Name
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.queues = append(m.queues, watched{pool: pool, q: q, classes: classes})
}

// Request is one request's series: its pool, tenant and class, and what it
// reserves when granted.
type Request struct {
	m         *Metrics
	s         *series
	kv, slots int64
}

// seriesKey names one (pool, tenant, class)'s series.
type seriesKey struct {
	pool   ledger.PoolID
	tenant ledger.TenantID
	class  ledger.PriorityName
}

// series are one (pool, tenant, class)'s metrics, looked up once each;
// grants and tokens only once there is one (a series appears with its
// first sample, as before the cache).
type series struct {
	labels                   []string // pool, tenant, priority; never changed
	requests                 prometheus.Counter
	kvGauge, slotGauge       prometheus.Gauge
	grants                   lazyCounter
	promptTokens, compTokens lazyCounter
}

// lazyCounter is a counter of a vector looked up on first use.
type lazyCounter struct {
	c atomic.Pointer[prometheus.Counter]
}

func (l *lazyCounter) get(vec *prometheus.CounterVec, labels ...string) prometheus.Counter {
	if c := l.c.Load(); c != nil {
		return *c
	}
	c := vec.WithLabelValues(labels...)
	l.c.Store(&c)
	return c
}

// seriesOf returns the series of (pool, tenant, class), made on first use.
func (m *Metrics) seriesOf(k seriesKey) *series {
	if s, ok := m.series.Load(k); ok {
		return s.(*series)
	}
	l := []string{string(k.pool), string(k.tenant), string(k.class)}
	s := &series{labels: l, requests: m.requests.WithLabelValues(l...),
		kvGauge: m.reservedKV.WithLabelValues(l...), slotGauge: m.reservedSlots.WithLabelValues(l...)}
	got, _ := m.series.LoadOrStore(k, s)
	return got.(*series)
}

// Request counts a request of tenant in class asking pool for kv tokens and
// slots, and returns its series.
func (m *Metrics) Request(pool ledger.PoolID, tenant ledger.TenantID, class ledger.PriorityName, kv, slots int64) *Request {
	s := m.seriesOf(seriesKey{pool, tenant, class})
	s.requests.Inc()
	return &Request{m: m, s: s, kv: kv, slots: slots}
}

// Refused counts the request's refusal for reason.
func (r *Request) Refused(reason string) {
	r.m.refusals.WithLabelValues(append(slices.Clip(r.s.labels), reason)...).Inc()
}

// Granted counts a grant; each is followed by one Released.
func (r *Request) Granted() {
	r.s.grants.get(r.m.grants, r.s.labels...).Inc()
	r.s.kvGauge.Add(float64(r.kv))
	r.s.slotGauge.Add(float64(r.slots))
}

// Released counts a grant's release with the usage it reported.
func (r *Request) Released(u ledger.Usage) {
	r.s.kvGauge.Sub(float64(r.kv))
	r.s.slotGauge.Sub(float64(r.slots))
	l := r.s.labels
	r.s.promptTokens.get(r.m.tokens, l[0], l[1], l[2], "prompt").Add(float64(max(u.PromptTokens, 0)))
	r.s.compTokens.get(r.m.tokens, l[0], l[1], l[2], "completion").Add(float64(max(u.CompletionTokens, 0)))
}

// queueCollector reads the watched queues at scrape time.
type queueCollector Metrics

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.queuedDesc }

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	qs := append([]watched(nil), c.queues...)
	c.mu.Unlock()
	var out []prometheus.Metric
	for _, w := range qs {
		w.q.Queued(func(t ledger.TenantID, rank, n int) { // under the queue's lock: no send here
			if rank < len(w.classes) {
				out = append(out, prometheus.MustNewConstMetric(c.queuedDesc, prometheus.GaugeValue, float64(n), string(w.pool), string(t), string(w.classes[rank])))
			}
		})
	}
	for _, m := range out {
		ch <- m
	}
}
