package fleet

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/ledger"
)

// tenancyBase has two classes and two tenants the cases edit.
const tenancyBase = `pools:
  - name: p
    engines:
      - {id: e0, url: http://127.0.0.1:9001, kv_tokens: 1000, slots: 8}
tenants:
  - {name: a, api_keys: ["ka"], kv_share: 1}
  - {name: b, api_keys: ["kb"], kv_share: 1}
priorities:
  - {name: interactive, max_fill: 0.95}
  - {name: batch, max_fill: 0.70}
`

func TestParseTenancy(t *testing.T) {
	in := strings.Replace(tenancyBase, `{name: b, api_keys: ["kb"], kv_share: 1}`,
		`{name: b, api_keys: ["kb"], kv_share: 1, priorities: [batch], default_priority: batch, weight: 2.5, max_queued: 7}`, 1)
	in = strings.Replace(in, "slots: 8}", "slots: 8}\n    engine_priority: true", 1) + "priority_policy: clamp\n"
	f, err := Parse([]byte(in))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got := f.Tenants[0].TenantClasses; !reflect.DeepEqual(got, TenantClasses{}) {
		t.Errorf("tenant a's tenancy = %+v, want the zero value (every class, weight 1, no bound)", got)
	}
	want := TenantClasses{Priorities: []ledger.PriorityName{"batch"}, DefaultPriority: "batch", Weight: 2.5, MaxQueued: 7}
	if got := f.Tenants[1].TenantClasses; !reflect.DeepEqual(got, want) {
		t.Errorf("tenant b's tenancy = %+v, want %+v", got, want)
	}
	if f.Policy() != PolicyClamp || !f.Pools[0].EnginePriority {
		t.Errorf("policy %q engine_priority %v, want clamp and true", f.Policy(), f.Pools[0].EnginePriority)
	}
	if !f.Tenants[0].Allows("interactive") || f.Tenants[1].Allows("interactive") || !f.Tenants[1].Allows("batch") {
		t.Errorf("Allows: a may use every class, b only batch")
	}
	for _, c := range []struct {
		class ledger.PriorityName
		rank  int
		ok    bool
	}{{"interactive", 0, true}, {"batch", 1, true}, {"bulk", 0, false}} {
		if r, ok := f.ClassRank(c.class); r != c.rank || ok != c.ok {
			t.Errorf("ClassRank(%q) = %d, %v; want %d, %v", c.class, r, ok, c.rank, c.ok)
		}
	}
	got, b := marshalParse(t, f)
	if !reflect.DeepEqual(got, f) {
		t.Errorf("Parse(Marshal(f)) =\n%+v\nwant\n%+v\nfile:\n%s", got, f, b)
	}
	plain, err := Parse([]byte(tenancyBase))
	if err != nil {
		t.Fatal(err)
	}
	if plain.Policy() != PolicyRefuse || plain.PriorityPolicy != "" {
		t.Errorf("default policy %q (field %q), want refuse (field empty)", plain.Policy(), plain.PriorityPolicy)
	}
}

func TestParseTenancyErrors(t *testing.T) {
	b := `{name: b, api_keys: ["kb"], kv_share: 1}`
	tests := []struct {
		name string
		edit func(string) string
		want string
	}{
		{"policy unknown", appendLine("priority_policy: escalate"), `priority_policy: must be refuse or clamp, got "escalate"`},
		{"priority unknown", repl(b, `{name: b, api_keys: ["kb"], kv_share: 1, priorities: [bulk]}`),
			`tenants[1].priorities[0]: "bulk" is not a listed priority (want one of ["interactive" "batch"])`},
		{"priority twice", repl(b, `{name: b, api_keys: ["kb"], kv_share: 1, priorities: [batch, batch]}`), `tenants[1].priorities[1]: "batch" is listed twice`},
		{"default not listed", repl(b, `{name: b, api_keys: ["kb"], kv_share: 1, default_priority: bulk}`),
			`tenants[1].default_priority: "bulk" is not a listed priority`},
		{"default not allowed", repl(b, `{name: b, api_keys: ["kb"], kv_share: 1, priorities: [batch], default_priority: interactive}`),
			`tenants[1].default_priority: "interactive" is not one of the tenant's priorities ["batch"]`},
		{"weight negative", repl(b, `{name: b, api_keys: ["kb"], kv_share: 1, weight: -1}`), "tenants[1].weight: must be in (0, 1000], got -1"},
		{"weight too large", repl(b, `{name: b, api_keys: ["kb"], kv_share: 1, weight: 1001}`), "tenants[1].weight: must be in (0, 1000], got 1001"},
		{"weight NaN", repl(b, `{name: b, api_keys: ["kb"], kv_share: 1, weight: .nan}`), "tenants[1].weight: must be in (0, 1000], got NaN"},
		{"max_queued negative", repl(b, `{name: b, api_keys: ["kb"], kv_share: 1, max_queued: -3}`), "tenants[1].max_queued: must be in 0..1048576, got -3"},
		{"unknown tenant field", repl(b, `{name: b, api_keys: ["kb"], kv_share: 1, class: batch}`),
			`unknown field "class" in a tenant (allowed: name, api_keys, kv_share, slot_share, pools, priorities, default_priority, weight, max_queued, tokens_per_minute, requests_per_minute)`},
		{"engine_priority not a bool", repl("slots: 8}", "slots: 8}\n    engine_priority: maybe"), "cannot unmarshal !!str `maybe` into bool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.edit(tenancyBase)
			if in == tenancyBase {
				t.Fatal("the edit did not change the file")
			}
			_, err := Parse([]byte(in))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse error\n  %v\nwant one containing\n  %s", err, tt.want)
			}
		})
	}
}

// WithTenancy takes the tenants and priority_policy of the reloaded file,
// names the other sections it changed and keeps them, and refuses a result
// that does not validate.
func TestWithTenancy(t *testing.T) {
	base, err := Parse([]byte(tenancyBase))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		edit     func(string) string
		wantKept []string
		wantErr  string
	}{
		{"tenants only", repl(`api_keys: ["kb"]`, `api_keys: ["kb2"], priorities: [batch]`), nil, ""},
		{"policy", appendLine("priority_policy: clamp"), nil, ""},
		{"pools and lease kept", func(s string) string {
			return repl("kv_tokens: 1000", "kv_tokens: 2000")(s) + "lease:\n  lease_ttl: 45s\n"
		}, []string{"pools", "lease"}, ""},
		{"priorities kept", repl("max_fill: 0.70", "max_fill: 0.60"), []string{"priorities"}, ""},
		{"tenant names a class only the new file has", func(s string) string {
			s = repl("  - {name: batch, max_fill: 0.70}", "  - {name: batch, max_fill: 0.70}\n  - {name: bulk, max_fill: 0.5}")(s)
			return repl(`api_keys: ["kb"]`, `api_keys: ["kb"], priorities: [bulk]`)(s)
		}, []string{"priorities"}, `tenants[1].priorities[0]: "bulk" is not a listed priority`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, err := Parse([]byte(tt.edit(tenancyBase)))
			if err != nil {
				t.Fatalf("Parse of the edited file: %v", err)
			}
			m, kept, err := base.WithTenancy(next)
			if !reflect.DeepEqual(kept, tt.wantKept) {
				t.Errorf("kept = %q, want %q", kept, tt.wantKept)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("WithTenancy: %v", err)
			}
			if !reflect.DeepEqual(m.Tenants, next.Tenants) || m.PriorityPolicy != next.PriorityPolicy {
				t.Errorf("merged tenants/policy = %+v %q, want the new file's", m.Tenants, m.PriorityPolicy)
			}
			if !reflect.DeepEqual(m.Pools, base.Pools) || !reflect.DeepEqual(m.Lease, base.Lease) || !reflect.DeepEqual(m.Priorities, base.Priorities) {
				t.Error("merged pools, lease or priorities are not the old file's")
			}
		})
	}
	if _, ok := base.TenantForKey("kb"); !ok {
		t.Error("WithTenancy changed the fleet it was called on")
	}
}
