package failover

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Metrics counts dispatches by outcome and failovers by reason, in the
// router's registry (leasehold_router_*). Labels are bounded: pools and
// engines from the fleet file, outcomes from ledger.Outcomes.
type Metrics struct {
	outcomes  *prometheus.CounterVec // pool, engine, outcome
	failovers *prometheus.CounterVec // pool, reason
}

// NewMetrics registers the counters on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "leasehold", Subsystem: "router", Name: "dispatch_outcomes_total",
			Help: "Dispatches to engines by what they came to, the outcome each lease's release reports to the engine's breaker: ok, connect_error, reset, status_5xx, first_byte_timeout, ttft_slo_breach, or none (no evidence: the client left, the lease ended, the router refused it)."},
			[]string{"pool", "engine", "outcome"}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "leasehold", Subsystem: "router", Name: "failovers_total",
			Help: "Requests sent on to another engine after a dispatch failed before any byte reached the client, by the failure: connect_error, reset, status_5xx, first_byte_timeout."},
			[]string{"pool", "reason"}),
	}
	reg.MustRegister(m.outcomes, m.failovers)
	return m
}

// Dispatched counts one dispatch to engine in pool that came to o.
func (m *Metrics) Dispatched(pool ledger.PoolID, engine ledger.EngineID, o ledger.Outcome) {
	m.outcomes.WithLabelValues(string(pool), string(engine), label(o)).Inc()
}

// FailedOver counts one request sent on after a dispatch came to o.
func (m *Metrics) FailedOver(pool ledger.PoolID, o ledger.Outcome) {
	m.failovers.WithLabelValues(string(pool), label(o)).Inc()
}

func label(o ledger.Outcome) string {
	if o == ledger.OutcomeNone {
		return "none"
	}
	return string(o)
}
