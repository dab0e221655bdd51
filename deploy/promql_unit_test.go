package deploy

import (
	"reflect"
	"sort"
	"testing"
)

func TestPromqlRefs(t *testing.T) {
	for _, tc := range []struct {
		name, expr string
		want       []string // name:label,label
		grouping   []string
	}{
		{"selector with grafana vars", `max by (pool, engine) (leasehold_ledger_reserved_kv_tokens{pool=~"$pool"} + leasehold_reconcile_drift_kv_tokens{pool=~"$pool"})`,
			[]string{"leasehold_ledger_reserved_kv_tokens:pool", "leasehold_reconcile_drift_kv_tokens:pool"}, []string{"pool", "engine"}},
		{"histogram quantile", `histogram_quantile(0.99, sum by (le, method) (rate(leasehold_reserver_grpc_request_duration_seconds_bucket[$__rate_interval])))`,
			[]string{"leasehold_reserver_grpc_request_duration_seconds_bucket:"}, []string{"le", "method"}},
		{"bare names and on()", `max by (pool) (leasehold_ledger_live_holders) == 0 and on () (sum(up{job="leasehold-router"}) > 0)`,
			[]string{"leasehold_ledger_live_holders:", "up:job"}, []string{"pool"}},
		{"numbers and durations", `max by (pool) (increase(leasehold_ledger_expired_total[10m])) > 0.5e3`,
			[]string{"leasehold_ledger_expired_total:"}, []string{"pool"}},
		{"regex with braces in a string", `rate(x_total{code=~"Unavailable|Internal"}[5m]) > 0.05 * y`,
			[]string{"x_total:code", "y:"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refs, grouping := promqlRefs(tc.expr)
			var got []string
			for _, r := range refs {
				s := r.name + ":"
				for i, l := range r.labels {
					if i > 0 {
						s += ","
					}
					s += l
				}
				got = append(got, s)
			}
			want := append([]string(nil), tc.want...)
			sort.Strings(want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("refs = %q, want %q", got, want)
			}
			if !reflect.DeepEqual(grouping, tc.grouping) {
				t.Errorf("grouping = %q, want %q", grouping, tc.grouping)
			}
		})
	}
}
