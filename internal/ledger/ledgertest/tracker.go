package ledgertest

// The concurrency checker's tracker: what it counts as granted, and the
// window of each call it judges (see concurrency.go, "Safety under
// concurrency").

import (
	"fmt"
	"maps"
	"sync"

	"github.com/leasehold/leasehold/internal/ledger"
)

// tracker is the checker's view of granted capacity.
type tracker struct {
	mu       sync.Mutex // guards everything below
	engines  map[ledger.EngineID]amounts
	tenants  map[ledger.TenantID]amounts
	capKV    map[ledger.EngineID]int64
	capSl    map[ledger.EngineID]int64
	quota    map[ledger.TenantID]amounts // kv, slots (0 = none)
	fill     map[ledger.PriorityName]float64
	headroom float64
	// elastic: Grow may take engines past capacity, so only windows judge.
	elastic bool
	// grownKV and grownTenantKV bound from above what Grow has added to
	// each engine and tenant: a growth is counted before its call.
	grownKV       map[ledger.EngineID]int64
	grownTenantKV map[ledger.TenantID]int64
	// windows are the open calls' windows, lowered by every change.
	windows map[*window]struct{}
	first   string // the first violation
}

// window is the tracked totals' low-water mark over one call; an engine or
// tenant absent from it held nothing tracked at some point.
type window struct {
	engines map[ledger.EngineID]amounts
	tenants map[ledger.TenantID]amounts
}

func newTracker(spec ledger.PoolSpec) *tracker {
	tr := &tracker{
		engines: map[ledger.EngineID]amounts{}, tenants: map[ledger.TenantID]amounts{},
		capKV: map[ledger.EngineID]int64{}, capSl: map[ledger.EngineID]int64{}, quota: map[ledger.TenantID]amounts{},
		fill: map[ledger.PriorityName]float64{}, headroom: spec.GrowthHeadroom, elastic: spec.Mode() == ledger.ReserveElastic,
		grownKV: map[ledger.EngineID]int64{}, grownTenantKV: map[ledger.TenantID]int64{}, windows: map[*window]struct{}{},
	}
	var kv, sl int64
	for _, e := range spec.Engines {
		tr.capKV[e.ID], tr.capSl[e.ID] = e.KVTokens, e.Slots
		kv, sl = kv+e.KVTokens, sl+e.Slots
	}
	for _, t := range spec.Tenants {
		qk, qs := ledger.TenantQuota(t, kv, sl)
		tr.quota[t.Name] = amounts{kv: qk, slots: qs}
	}
	for _, p := range spec.Priorities {
		tr.fill[p.Name] = p.MaxFill
	}
	return tr
}

// add records kv tokens and slots of a lease (negative to remove), lowers
// the open windows and, in a worst_case pool, checks the limits.
func (tr *tracker) add(l ledger.Lease, kv, slots int64, op string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	e := tr.engines[l.Engine]
	e.kv, e.slots = e.kv+kv, e.slots+slots
	tr.engines[l.Engine] = e
	x := tr.tenants[l.Tenant]
	x.kv, x.slots = x.kv+kv, x.slots+slots
	tr.tenants[l.Tenant] = x
	for w := range tr.windows {
		if m, ok := w.engines[l.Engine]; ok {
			w.engines[l.Engine] = amounts{kv: min(m.kv, e.kv), slots: min(m.slots, e.slots)}
		}
		if m, ok := w.tenants[l.Tenant]; ok {
			w.tenants[l.Tenant] = amounts{kv: min(m.kv, x.kv), slots: min(m.slots, x.slots)}
		}
	}
	if tr.elastic || tr.first != "" || (kv <= 0 && slots <= 0) {
		return
	}
	switch q := tr.quota[l.Tenant]; {
	case e.kv > tr.capKV[l.Engine]:
		tr.first = fmt.Sprintf("after %s of %s: engine %s granted kv=%d, capacity %d", op, l.ID, l.Engine, e.kv, tr.capKV[l.Engine])
	case e.slots > tr.capSl[l.Engine]:
		tr.first = fmt.Sprintf("after %s of %s: engine %s granted slots=%d, capacity %d", op, l.ID, l.Engine, e.slots, tr.capSl[l.Engine])
	case x.kv > q.kv:
		tr.first = fmt.Sprintf("after %s of %s: tenant %s granted kv=%d, quota %d", op, l.ID, l.Tenant, x.kv, q.kv)
	case q.slots > 0 && x.slots > q.slots:
		tr.first = fmt.Sprintf("after %s of %s: tenant %s granted slots=%d, quota %d", op, l.ID, l.Tenant, x.slots, q.slots)
	}
}

// open starts a call's window; close it once the call has returned.
func (tr *tracker) open() *window {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	w := &window{engines: maps.Clone(tr.engines), tenants: maps.Clone(tr.tenants)}
	tr.windows[w] = struct{}{}
	return w
}

func (tr *tracker) close(w *window) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	delete(tr.windows, w)
}

// violate records the first violation.
func (tr *tracker) violate(format string, args ...any) {
	if tr.first == "" {
		tr.first = fmt.Sprintf(format, args...)
	}
}

// admitted checks a grant (or a Resize growth, slots 0) of kv tokens and
// slots on lease l's engine, for its tenant and priority, made in window w:
// what the ledger held then plus the grant fits the admissible fill.
func (tr *tracker) admitted(w *window, l ledger.Lease, kv, slots int64, op string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	e, x, q := w.engines[l.Engine], w.tenants[l.Tenant], tr.quota[l.Tenant]
	f := tr.fill[l.Priority]
	capKV := tr.capKV[l.Engine]
	admKV := ledger.Fill(capKV, f) - ledger.Fill(capKV, tr.headroom)
	switch {
	case e.kv+kv > admKV:
		tr.violate("%s of %s: engine %s held at least kv=%d throughout the call and took %d more, past its admissible %d (capacity %d, max_fill %v, headroom %v)",
			op, l.ID, l.Engine, e.kv, kv, admKV, capKV, f, tr.headroom)
	case e.slots+slots > ledger.Fill(tr.capSl[l.Engine], f):
		tr.violate("%s of %s: engine %s held at least slots=%d throughout the call and took %d more, past its fill %d",
			op, l.ID, l.Engine, e.slots, slots, ledger.Fill(tr.capSl[l.Engine], f))
	case x.kv+kv > q.kv:
		tr.violate("%s of %s: tenant %s held at least kv=%d throughout the call and took %d more, past its quota %d", op, l.ID, l.Tenant, x.kv, kv, q.kv)
	case q.slots > 0 && x.slots+slots > q.slots:
		tr.violate("%s of %s: tenant %s held at least slots=%d throughout the call and took %d more, past its quota %d", op, l.ID, l.Tenant, x.slots, slots, q.slots)
	}
}

// intend counts a growth of l by delta before its Grow is called.
func (tr *tracker) intend(l ledger.Lease, delta int64) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.grownKV[l.Engine] += delta
	tr.grownTenantKV[l.Tenant] += delta
}

// grownBy returns the bounds of what Grow has added to an engine and to a
// tenant so far.
func (tr *tracker) grownBy(e ledger.EngineID, t ledger.TenantID) (engineKV, tenantKV int64) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.grownKV[e], tr.grownTenantKV[t]
}

// grew checks a Grow of l by delta made in window w that returned the
// lease flagged overgrown or not: past capacity or quota it must be.
func (tr *tracker) grew(w *window, l ledger.Lease, delta int64, overgrown bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	e, x, q := w.engines[l.Engine], w.tenants[l.Tenant], tr.quota[l.Tenant]
	switch capKV := tr.capKV[l.Engine]; {
	case overgrown:
	case e.kv+delta > capKV:
		tr.violate("grow of %s by %d: engine %s held at least kv=%d throughout the call, past its capacity %d after the growth, and the lease is not flagged Overgrown",
			l.ID, delta, l.Engine, e.kv, capKV)
	case x.kv+delta > q.kv:
		tr.violate("grow of %s by %d: tenant %s held at least kv=%d throughout the call, past its quota %d after the growth, and the lease is not flagged Overgrown",
			l.ID, delta, l.Tenant, x.kv, q.kv)
	}
}

func (tr *tracker) violation() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.first
}
