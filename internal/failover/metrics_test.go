package failover

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/internal/ledger"
)

// gathered returns every sample in reg as "name{label=value,...}" -> value.
func gathered(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetCounter().GetValue()
		}
	}
	return out
}

func TestMetricsLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.Dispatched("p", "e0", ledger.OutcomeNone)
	m.Dispatched("p", "e0", ledger.OutcomeConnect)
	m.Dispatched("p", "e0", ledger.OutcomeConnect)
	m.FailedOver("p", ledger.OutcomeConnect)
	got := gathered(t, reg)
	want := map[string]float64{
		"leasehold_router_dispatch_outcomes_total{engine=e0,outcome=none,pool=p}":          1,
		"leasehold_router_dispatch_outcomes_total{engine=e0,outcome=connect_error,pool=p}": 2,
		"leasehold_router_failovers_total{pool=p,reason=connect_error}":                    1,
	}
	if len(got) != len(want) {
		t.Errorf("gathered %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}
