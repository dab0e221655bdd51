package route

import (
	"testing"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
)

// TestMetricsZeroAtStart: before any request, the families the dashboard,
// the alerts and the recording rules read have their known series at 0
// (one per pool, engine, class, reason and outcome), and the estimate
// ratio its starting value; a family zero leaves out (or a label list
// that does not match its labels) shows here.
func TestMetricsZeroAtStart(t *testing.T) {
	m := newMetrics()
	pool := fleet.Pool{Name: "p", Engines: []fleet.Engine{{ID: "gpu-0"}, {ID: "gpu-1"}}}
	prios := []ledger.PrioritySpec{{Name: "interactive"}, {Name: "batch"}}
	m.zero(pool, prios, 1.25)
	refusals := len(ledger.Reasons) + 3 // ttft_slo, queue_full, ledger_unavailable
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, mf := range mfs {
		got[mf.GetName()] = len(mf.GetMetric())
		if mf.GetName() == "leasehold_router_prompt_estimate_ratio" && mf.GetMetric()[0].GetGauge().GetValue() != 1.25 {
			t.Errorf("prompt_estimate_ratio = %v, want the estimator's 1.25", mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	for _, tc := range []struct {
		name string
		want int
	}{
		{"leasehold_router_requests_total", 1},
		{"leasehold_router_rejections_total", refusals},
		{"leasehold_router_admission_requests_total", 2},
		{"leasehold_router_refused_requests_total", 2 * refusals},
		{"leasehold_router_queue_wait_seconds", 3},
		{"leasehold_router_lease_hold_seconds", 1},
		{"leasehold_router_upstream_first_byte_seconds", 2},
		{"leasehold_router_admit_seconds", 3},
		{"leasehold_router_prompt_estimate_ratio", 1},
	} {
		if got[tc.name] != tc.want {
			t.Errorf("%s: %d series at start, want %d", tc.name, got[tc.name], tc.want)
		}
	}
}
