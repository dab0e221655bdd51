package tenancy

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/waitq"
)

// ReasonNotAllowed is the refusal reason (and 403 code) of a request for a
// class its tenant may not use, under priority_policy refuse.
const ReasonNotAllowed = "priority_not_allowed"

// ErrUnknownPriority: the request names a class the fleet does not list.
var ErrUnknownPriority = errors.New("tenancy: unknown priority")

// ErrNotAllowed: the tenant may not use the class it asked for.
var ErrNotAllowed = errors.New("tenancy: priority not allowed")

// NotAllowedError is ErrNotAllowed naming the tenant, the class asked and
// the classes it may use.
type NotAllowedError struct {
	Tenant  ledger.TenantID
	Asked   ledger.PriorityName
	Allowed []ledger.PriorityName
}

func (e *NotAllowedError) Error() string {
	return fmt.Sprintf("tenant %q may not use priority %q; its priorities: %q", e.Tenant, e.Asked, e.Allowed)
}

// Unwrap makes errors.Is see ErrNotAllowed.
func (e *NotAllowedError) Unwrap() error { return ErrNotAllowed }

// Class is the priority class a request runs in.
type Class struct {
	Name ledger.PriorityName
	// Rank is Name's position in the fleet's priorities, 0 the highest
	// (fleet.ClassRank).
	Rank int
	// Asked is the class the request named, "" when none.
	Asked ledger.PriorityName
	// Clamped: Asked was not allowed and priority_policy clamp chose Name.
	Clamped bool
}

// Table is one fleet file's tenancy. Immutable: safe for concurrent use.
type Table struct {
	f       *fleet.Fleet
	tenants map[ledger.TenantID]fleet.Tenant
}

// New builds f's Table; f must be validated and is not changed after.
func New(f *fleet.Fleet) *Table {
	t := &Table{f: f, tenants: make(map[ledger.TenantID]fleet.Tenant, len(f.Tenants))}
	for _, tn := range f.Tenants {
		t.tenants[tn.Name] = tn
	}
	return t
}

// Fleet is the fleet the Table was built from.
func (t *Table) Fleet() *fleet.Fleet { return t.f }

// Authenticate returns the tenant a bearer key belongs to
// (fleet.TenantForKey: constant time over every key).
func (t *Table) Authenticate(key string) (ledger.TenantID, bool) { return t.f.TenantForKey(key) }

// Tenant returns the named tenant; one not configured (removed by a reload
// since it authenticated) may use no pool.
func (t *Table) Tenant(name ledger.TenantID) fleet.Tenant {
	if tn, ok := t.tenants[name]; ok {
		return tn
	}
	return fleet.Tenant{Name: name, Pools: []ledger.PoolID{""}}
}

// Class resolves the class of tenant's request that asked for asked ("":
// none); see the package documentation.
func (t *Table) Class(tenant ledger.TenantID, asked ledger.PriorityName) (Class, error) {
	tn := t.Tenant(tenant)
	name := asked
	if name == "" {
		name = tn.DefaultPriority
		if name == "" && tn.Allows(t.f.DefaultPriority) {
			name = t.f.DefaultPriority
		}
		if name == "" && len(tn.Priorities) > 0 {
			name = tn.Priorities[0]
		}
	}
	rank, ok := t.f.ClassRank(name)
	if !ok {
		names := make([]ledger.PriorityName, len(t.f.Priorities))
		for i, p := range t.f.Priorities {
			names[i] = p.Name
		}
		return Class{}, fmt.Errorf("%w: %q; want one of %q", ErrUnknownPriority, name, names)
	}
	c := Class{Name: name, Rank: rank, Asked: asked}
	if tn.Allows(name) {
		return c, nil
	}
	if t.f.Policy() != fleet.PolicyClamp || len(tn.Priorities) == 0 {
		return Class{}, &NotAllowedError{Tenant: tenant, Asked: name, Allowed: slices.Clone(tn.Priorities)}
	}
	// The best allowed class not above the one asked: the lowest rank >=
	// rank; else the lowest allowed class (the highest rank).
	best, lowest := -1, -1
	for _, p := range tn.Priorities {
		r, _ := t.f.ClassRank(p)
		if r >= rank && (best < 0 || r < best) {
			best = r
		}
		lowest = max(lowest, r)
	}
	if best < 0 {
		best = lowest
	}
	c.Name, c.Rank, c.Clamped = t.f.Priorities[best].Name, best, true
	return c, nil
}

// Key is the request's place in its pool's wait queue: its tenant, its
// class's rank, the tenant's weight and bound.
func (t *Table) Key(tenant ledger.TenantID, c Class) waitq.Key {
	tn := t.Tenant(tenant)
	return waitq.Key{Tenant: tenant, Rank: c.Rank, Weight: tn.Weight, MaxQueued: tn.MaxQueued}
}

// EnginePriority is the "priority" field to send the pool's engines for
// class c (vLLM's, where lower runs earlier): c's rank as JSON, when the
// pool has engine_priority; nil when it has not (send none).
func (t *Table) EnginePriority(pool ledger.PoolID, c Class) json.RawMessage {
	if p, ok := t.f.Pool(pool); !ok || !p.EnginePriority {
		return nil
	}
	return json.RawMessage(strconv.Itoa(c.Rank))
}
