package tenancy

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/waitq"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fleetYAML has three classes; "batch-only" may use batch only, "bulk" bulk
// and batch with no default of its own, "any" every class; pool p passes
// the class to its engines, pool q does not.
const fleetYAML = `pools:
  - name: p
    engine_priority: true
    engines:
      - {id: e0, url: http://127.0.0.1:9001, kv_tokens: 1000, slots: 8}
  - name: q
    engines:
      - {id: e1, url: http://127.0.0.1:9002, kv_tokens: 1000, slots: 8}
tenants:
  - {name: any, api_keys: ["k-any"], kv_share: 1, weight: 3, max_queued: 5}
  - {name: batch-only, api_keys: ["k-batch"], kv_share: 1, priorities: [batch]}
  - {name: bulk, api_keys: ["k-bulk"], kv_share: 1, priorities: [bulk, batch]}
priorities:
  - {name: interactive, max_fill: 0.95}
  - {name: batch, max_fill: 0.80}
  - {name: bulk, max_fill: 0.60}
default_priority: interactive
`

func table(t *testing.T, policy string) *Table {
	t.Helper()
	f, err := fleet.Parse([]byte(fleetYAML + policy))
	if err != nil {
		t.Fatal(err)
	}
	return New(f)
}

func TestClass(t *testing.T) {
	tests := []struct {
		name    string
		policy  string
		tenant  ledger.TenantID
		asked   ledger.PriorityName
		want    Class
		wantErr error
	}{
		{"any asks interactive", "", "any", "interactive", Class{Name: "interactive", Rank: 0, Asked: "interactive"}, nil},
		{"any asks nothing: the fleet's default", "", "any", "", Class{Name: "interactive", Rank: 0}, nil},
		{"batch-only asks nothing: its only class", "", "batch-only", "", Class{Name: "batch", Rank: 1}, nil},
		{"bulk asks nothing: its first listed class", "", "bulk", "", Class{Name: "bulk", Rank: 2}, nil},
		{"batch-only asks batch", "", "batch-only", "batch", Class{Name: "batch", Rank: 1, Asked: "batch"}, nil},
		{"batch-only asks interactive: refused", "", "batch-only", "interactive", Class{}, ErrNotAllowed},
		{"refuse is the default, named too", "priority_policy: refuse\n", "batch-only", "interactive", Class{}, ErrNotAllowed},
		{"unknown class", "", "any", "urgent", Class{}, ErrUnknownPriority},
		{"unknown class under clamp", "priority_policy: clamp\n", "batch-only", "urgent", Class{}, ErrUnknownPriority},
		{"clamp: interactive to batch", "priority_policy: clamp\n", "batch-only", "interactive",
			Class{Name: "batch", Rank: 1, Asked: "interactive", Clamped: true}, nil},
		{"clamp: the best class not above the one asked", "priority_policy: clamp\n", "bulk", "interactive",
			Class{Name: "batch", Rank: 1, Asked: "interactive", Clamped: true}, nil},
		{"clamp: none below, so the lowest allowed", "priority_policy: clamp\n", "batch-only", "bulk",
			Class{Name: "batch", Rank: 1, Asked: "bulk", Clamped: true}, nil},
		{"removed tenant may use only the default", "", "gone", "", Class{Name: "interactive", Rank: 0}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := table(t, tt.policy).Class(tt.tenant, tt.asked)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Class(%q, %q) error = %v, want %v", tt.tenant, tt.asked, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("Class(%q, %q) = %+v, want %+v", tt.tenant, tt.asked, got, tt.want)
			}
		})
	}
	var na *NotAllowedError
	_, err := table(t, "").Class("bulk", "interactive")
	if !errors.As(err, &na) || na.Asked != "interactive" || !reflect.DeepEqual(na.Allowed, []ledger.PriorityName{"bulk", "batch"}) {
		t.Errorf("refusal %#v, want one naming the class asked and the tenant's classes", err)
	}
	if want := `tenant "bulk" may not use priority "interactive"; its priorities: ["bulk" "batch"]`; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	if _, err := table(t, "").Class("any", "urgent"); !strings.Contains(err.Error(), `"urgent"; want one of ["interactive" "batch" "bulk"]`) {
		t.Errorf("unknown class message %q does not list the classes", err)
	}
}

func TestTableLookups(t *testing.T) {
	tb := table(t, "")
	if got, ok := tb.Authenticate("k-batch"); !ok || got != "batch-only" {
		t.Errorf("Authenticate(k-batch) = %q, %v", got, ok)
	}
	if _, ok := tb.Authenticate("nope"); ok {
		t.Error("an unknown key authenticated")
	}
	if tb.Tenant("gone").InPool("p") || !tb.Tenant("any").InPool("q") {
		t.Error("InPool: a tenant not in the file may use no pool; any may use q")
	}
	c, _ := tb.Class("any", "batch")
	if got, want := tb.Key("any", c), (waitq.Key{Tenant: "any", Rank: 1, Weight: 3, MaxQueued: 5}); got != want {
		t.Errorf("Key = %+v, want %+v", got, want)
	}
	if got := string(tb.EnginePriority("p", c)); got != "1" {
		t.Errorf("EnginePriority(p, batch) = %q, want 1 (its rank)", got)
	}
	if got := tb.EnginePriority("q", c); got != nil {
		t.Errorf("pool q has no engine_priority, yet %q is sent", got)
	}
}

// value is the sample of family name whose labels are all of want (pairs), or -1.
func value(t *testing.T, reg *prometheus.Registry, name string, want ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i < len(want); i += 2 {
				if have[want[i]] != want[i+1] {
					continue metrics
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	a := m.Request("p", "any", "batch", 300, 2)
	a.Granted()
	b := m.Request("p", "batch-only", "interactive", 100, 1)
	b.Refused(ReasonNotAllowed)
	q := waitq.New(waitq.Config{Depth: 4, Timeout: time.Hour})
	w, err := q.Enter(waitq.Key{Tenant: "any", Rank: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.WatchQueue("p", q, table(t, "").Fleet())
	m.Reloaded(nil)
	anyBatch := []string{"pool", "p", "tenant", "any", "priority", "batch"}
	type sample struct {
		name   string
		labels []string
		want   float64
	}
	check := func(when string, samples []sample) {
		t.Helper()
		for _, s := range samples {
			if got := value(t, reg, s.name, s.labels...); got != s.want {
				t.Errorf("%s: %s%v = %v, want %v", when, s.name, s.labels, got, s.want)
			}
		}
	}
	check("granted", []sample{
		{"leasehold_router_tenant_requests_total", anyBatch, 1},
		{"leasehold_router_tenant_grants_total", anyBatch, 1},
		{"leasehold_router_tenant_reserved_kv_tokens", anyBatch, 300},
		{"leasehold_router_tenant_reserved_slots", anyBatch, 2},
		{"leasehold_router_tenant_requests_total", []string{"tenant", "batch-only", "priority", "interactive"}, 1},
		{"leasehold_router_tenant_refusals_total", []string{"tenant", "batch-only", "priority", "interactive", "reason", ReasonNotAllowed}, 1},
		{"leasehold_router_tenant_grants_total", []string{"tenant", "batch-only"}, -1},
		{"leasehold_router_tenant_queued", []string{"pool", "p", "tenant", "any", "priority", "bulk"}, 1},
		{"leasehold_router_fleet_reloads_total", []string{"result", "ok"}, 1},
		{"leasehold_router_fleet_reloads_total", []string{"result", "error"}, 0},
	})
	a.Released(ledger.Usage{PromptTokens: 40, CompletionTokens: 7})
	q.Leave(w, false)
	check("released", []sample{
		{"leasehold_router_tenant_reserved_kv_tokens", anyBatch, 0},
		{"leasehold_router_tenant_reserved_slots", anyBatch, 0},
		{"leasehold_router_tenant_tokens_total", append(anyBatch, "kind", "prompt"), 40},
		{"leasehold_router_tenant_tokens_total", append(anyBatch, "kind", "completion"), 7},
		{"leasehold_router_tenant_queued", []string{"tenant", "any"}, -1},
	})
}
