package metricinit

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// gathered returns each series of reg's family name by its label values
// (in label-name order) joined with ",", with its counter value or histogram count.
func gathered(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var lvs []string
			for _, l := range m.GetLabel() {
				lvs = append(lvs, l.GetValue())
			}
			out[strings.Join(lvs, ",")] = m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return out
}

func TestZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "scrape_errors_total", Help: "h"}, []string{"pool", "engine"})
	wait := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "wait_seconds", Help: "h"}, []string{"pool", "outcome"})
	reg.MustRegister(errs, wait)
	if got := gathered(t, reg, "scrape_errors_total"); len(got) != 0 {
		t.Fatalf("before Zero: %v, want no series", got)
	}
	errs.WithLabelValues("p", "gpu-0").Add(3) // an event before Zero keeps its count
	for _, tc := range []struct {
		name   string
		vec    *prometheus.MetricVec
		values [][]string
		err    string
	}{
		{"pool and its engines", errs.MetricVec, [][]string{{"p"}, {"gpu-0", "gpu-1"}}, ""},
		{"another pool", errs.MetricVec, [][]string{{"q"}, {"gpu-9"}}, ""},
		{"histogram outcomes", wait.MetricVec, [][]string{{"p", "q"}, {"granted", "rejected", "cancelled"}}, ""},
		{"too few labels", errs.MetricVec, [][]string{{"p"}}, "metricinit: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Zero(tc.vec, tc.values...)
			if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("Zero = %v, want error containing %q", err, tc.err)
			}
		})
	}
	got := gathered(t, reg, "scrape_errors_total")
	want := map[string]float64{"gpu-0,p": 3, "gpu-1,p": 0, "gpu-9,q": 0} // engine,pool: labels sort by name
	if len(got) != len(want) {
		t.Errorf("scrape_errors_total = %v, want %v", got, want)
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("scrape_errors_total{%s} = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if got := gathered(t, reg, "wait_seconds"); len(got) != 6 {
		t.Errorf("wait_seconds = %v, want 2 pools × 3 outcomes at 0", got)
	}
}
