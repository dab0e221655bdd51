package fleet

// Tenancy: which priority classes a tenant may use, its weight in the
// routers' wait queues and its bound there, the fleet's priority_policy and
// each pool's engine_priority. Kept in one file so that the tenancy fields
// are read, checked and written in one place (internal/tenancy applies
// them). Every field's zero value is its default, so a file without them
// reads as before: every class allowed, weight 1, no bound of its own.

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/leasehold/leasehold/internal/ledger"
)

// PriorityPolicy is what a router does with a request for a priority class
// its tenant may not use.
type PriorityPolicy string

// Priority policies (priority_policy).
const (
	// PolicyRefuse (the default, also ""): 403 priority_not_allowed,
	// before any lease.
	PolicyRefuse PriorityPolicy = "refuse"
	// PolicyClamp: the request runs in the tenant's best allowed class not
	// above the one asked (else its lowest allowed class).
	PolicyClamp PriorityPolicy = "clamp"
)

// Limits on the tenancy fields.
const (
	// MaxWeight bounds tenants[].weight.
	MaxWeight = 1000
	// MaxQueuedBound bounds tenants[].max_queued.
	MaxQueuedBound = 1 << 20
)

// TenantClasses are a tenant's tenancy fields.
type TenantClasses struct {
	// Priorities are the classes the tenant may use (tenants[].priorities),
	// each a listed class; empty: every class.
	Priorities []ledger.PriorityName
	// DefaultPriority is the class of its requests that name none
	// (tenants[].default_priority); "" means the fleet's default_priority
	// when the tenant may use it, else its first listed priority.
	DefaultPriority ledger.PriorityName
	// Weight is its share of the turns in a router's wait queue against
	// the other tenants waiting in the same class (tenants[].weight, in
	// (0, MaxWeight]); 0 means 1.
	Weight float64
	// MaxQueued bounds its requests waiting in one pool's queue on one
	// router (tenants[].max_queued); 0: only the router's --queue-depth.
	MaxQueued int
}

// Allows reports whether the tenant may use class.
func (t Tenant) Allows(class ledger.PriorityName) bool {
	return len(t.Priorities) == 0 || slices.Contains(t.Priorities, class)
}

// Policy is f's priority_policy, the default filled in.
func (f *Fleet) Policy() PriorityPolicy {
	if f.PriorityPolicy == "" {
		return PolicyRefuse
	}
	return f.PriorityPolicy
}

// ClassRank is the position of class in priorities (0 is the first listed,
// the highest: routers' wait queues serve lower ranks first, and
// engine_priority sends the rank as vLLM's "priority", where lower runs
// earlier); false for a class not listed.
func (f *Fleet) ClassRank(class ledger.PriorityName) (int, bool) {
	for i, p := range f.Priorities {
		if p.Name == class {
			return i, true
		}
	}
	return 0, false
}

// buildTenancy copies the tenancy fields of raw into f, whose tenants and
// pools build made from raw in the same order.
func buildTenancy(raw fileYAML, f *Fleet) {
	f.PriorityPolicy = PriorityPolicy(raw.PriorityPolicy)
	for i, t := range raw.Tenants {
		tc := &f.Tenants[i].TenantClasses
		for _, p := range t.Priorities {
			tc.Priorities = append(tc.Priorities, ledger.PriorityName(p))
		}
		tc.DefaultPriority = ledger.PriorityName(t.DefaultPriority)
		tc.Weight, tc.MaxQueued = t.Weight, t.MaxQueued
	}
	for i, p := range raw.Pools {
		f.Pools[i].EnginePriority = p.EnginePriority
	}
}

// marshalTenancy writes f's tenancy fields into raw, whose tenants Marshal
// made from f in the same order.
func marshalTenancy(f *Fleet, raw *fileYAML) {
	raw.PriorityPolicy = string(f.PriorityPolicy)
	for i, t := range f.Tenants {
		ty := &raw.Tenants[i]
		for _, p := range t.Priorities {
			ty.Priorities = append(ty.Priorities, string(p))
		}
		ty.DefaultPriority = string(t.DefaultPriority)
		ty.Weight, ty.MaxQueued = t.Weight, t.MaxQueued
	}
	for i, p := range f.Pools {
		raw.Pools[i].EnginePriority = p.EnginePriority
	}
}

// checkTenancy checks the tenancy fields.
func (f *Fleet) checkTenancy(c *checker) {
	switch f.PriorityPolicy {
	case "", PolicyRefuse, PolicyClamp:
	default:
		c.add("priority_policy", "must be refuse or clamp, got %q", f.PriorityPolicy)
	}
	listed := func(path string, name ledger.PriorityName) bool {
		if _, ok := f.ClassRank(name); !ok {
			c.add(path, "%q is not a listed priority (want one of %q)", name, f.classNames())
			return false
		}
		return true
	}
	for i, t := range f.Tenants {
		tp := fmt.Sprintf("tenants[%d]", i)
		seen := map[ledger.PriorityName]bool{}
		for j, p := range t.Priorities {
			pp := fmt.Sprintf("%s.priorities[%d]", tp, j)
			if listed(pp, p) && seen[p] {
				c.add(pp, "%q is listed twice", p)
			}
			seen[p] = true
		}
		if d := t.DefaultPriority; d != "" && listed(tp+".default_priority", d) && !t.Allows(d) {
			c.add(tp+".default_priority", "%q is not one of the tenant's priorities %q", d, t.Priorities)
		}
		if !(t.Weight >= 0 && t.Weight <= MaxWeight) {
			c.add(tp+".weight", "must be in (0, %d], got %v (its share of a class's queue turns; omit it for 1)", MaxWeight, t.Weight)
		}
		if t.MaxQueued < 0 || t.MaxQueued > MaxQueuedBound {
			c.add(tp+".max_queued", "must be in 0..%d, got %d (its requests waiting in one pool's queue on one router; 0: only --queue-depth)", MaxQueuedBound, t.MaxQueued)
		}
	}
}

func (f *Fleet) classNames() []string {
	names := make([]string, len(f.Priorities))
	for i, p := range f.Priorities {
		names[i] = string(p.Name)
	}
	return names
}

// WithTenancy is f with next's tenants (names, API keys, quotas, pools and
// tenancy fields) and priority_policy: what a router applies when it
// reloads its fleet file. kept names the other sections next changes
// (pools, priorities, default_priority, lease), which stay f's: a router
// applies them only at start. The result is validated as a whole, so a
// tenant that names a pool or class only next has is an error, and f is
// never changed.
func (f *Fleet) WithTenancy(next *Fleet) (merged *Fleet, kept []string, err error) {
	for _, s := range []struct {
		name      string
		was, next any
	}{
		{"pools", f.Pools, next.Pools},
		{"priorities", []any{f.Priorities, f.TTFTSLOs}, []any{next.Priorities, next.TTFTSLOs}},
		{"default_priority", f.DefaultPriority, next.DefaultPriority},
		{"lease", f.Lease, next.Lease},
	} {
		if !reflect.DeepEqual(s.was, s.next) {
			kept = append(kept, s.name)
		}
	}
	m := *f
	m.Tenants, m.PriorityPolicy = slices.Clone(next.Tenants), next.PriorityPolicy
	if err := m.Validate(); err != nil {
		return nil, kept, err
	}
	return &m, kept, nil
}
