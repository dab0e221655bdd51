package ledgertest

import (
	"testing"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Tenants and priorities of the admission table's pool.
const (
	tenantSmall ledger.TenantID = "small" // kv_share 0.25 of 3001 = 750
	tenantSlots ledger.TenantID = "slots" // slot_share 0.25 of 18 = 4

	prioBatch ledger.PriorityName = "batch" // max_fill 0.7
	prioInter ledger.PriorityName = "inter" // max_fill 0.95
)

// limitsSpec is the admission table's pool: e1 and e2 hold 1000 KV tokens
// and 4 slots, e3 1001 and 10 (so floor(1001*0.7) = 700 tests the floor).
func limitsSpec() ledger.PoolSpec {
	s := poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4), engine(e3, 1001, 10))
	s.Tenants = append(s.Tenants,
		ledger.TenantSpec{Name: tenantSmall, KVShare: 0.25},
		ledger.TenantSpec{Name: tenantSlots, KVShare: 1, SlotShare: 0.25},
	)
	s.Priorities = append(s.Priorities,
		ledger.PrioritySpec{Name: prioBatch, MaxFill: 0.7},
		ledger.PrioritySpec{Name: prioInter, MaxFill: 0.95},
	)
	return s
}

// ask is one acquisition in the admission table; holder and request id are
// filled in when it runs.
type ask struct {
	kv, slots int64
	cands     []ledger.EngineID
	tenant    ledger.TenantID     // "" means t1
	prio      ledger.PriorityName // "" means std
}

func (a ask) on(f *fixture, h ledger.HolderID) ledger.AcquireRequest {
	r := f.req(h, a.kv, a.slots, a.cands...)
	if a.tenant != "" {
		r.Tenant = a.tenant
	}
	if a.prio != "" {
		r.Priority = a.prio
	}
	return r
}

func on(c ...ledger.EngineID) []ledger.EngineID { return c }

// Fills of limitsSpec, computed as every backend must compute them.
var (
	batchE1  = ledger.Fill(1000, 0.7)  // 700
	batchE3  = ledger.Fill(1001, 0.7)  // 700 (700.7 floored)
	batchSl  = ledger.Fill(4, 0.7)     // 2
	interSl  = ledger.Fill(4, 0.95)    // 3
	smallKV  = ledger.Fill(3001, 0.25) // 750
	slotsQ   = ledger.Fill(18, 0.25)   // 4
	smallRes = smallKV - 50            // what "small" holds before probing
)

func (s *suite) testLimits(t *testing.T) {
	t.Run("Admission", s.testAdmission)
	t.Run("RetryAfterDefault", s.testRetryAfterDefault)
	t.Run("DrainUndrain", s.testDrainUndrain)
}

// testAdmission is the admission rule as a table: each case holds some
// leases, drains some engines, then probes one request and wants either a
// grant on an engine or a rejection with a reason on an engine.
func (s *suite) testAdmission(t *testing.T) {
	cases := []struct {
		name       string
		held       []ask
		drain      []ledger.EngineID
		probe      ask
		wantEngine ledger.EngineID // the grant's engine, if a grant is wanted
		wantReason ledger.Reason   // the rejection, if one is wanted
		wantOn     ledger.EngineID // the rejection's engine
	}{
		{name: "engine kv fits at capacity", probe: ask{kv: 1000, slots: 1, cands: on(e1)}, wantEngine: e1},
		{name: "engine kv fits at capacity after others", held: []ask{{kv: 600, slots: 1, cands: on(e1)}},
			probe: ask{kv: 400, slots: 1, cands: on(e1)}, wantEngine: e1},
		{name: "engine kv fails at capacity plus one", held: []ask{{kv: 600, slots: 1, cands: on(e1)}},
			probe: ask{kv: 401, slots: 1, cands: on(e1)}, wantReason: ledger.ReasonEngineKV, wantOn: e1},
		{name: "engine slots fit at capacity", held: []ask{{kv: 1, slots: 3, cands: on(e1)}},
			probe: ask{kv: 1, slots: 1, cands: on(e1)}, wantEngine: e1},
		{name: "engine slots fail at capacity plus one", held: []ask{{kv: 1, slots: 3, cands: on(e1)}},
			probe: ask{kv: 1, slots: 2, cands: on(e1)}, wantReason: ledger.ReasonEngineSlots, wantOn: e1},
		{name: "kv checked before slots", held: []ask{{kv: 1000, slots: 4, cands: on(e1)}},
			probe: ask{kv: 1, slots: 1, cands: on(e1)}, wantReason: ledger.ReasonEngineKV, wantOn: e1},
		{name: "too large kv", probe: ask{kv: 1001, slots: 1, cands: on(e1, e2)}, wantReason: ledger.ReasonTooLarge},
		{name: "too large slots", probe: ask{kv: 1, slots: 5, cands: on(e1, e2)}, wantReason: ledger.ReasonTooLarge},
		{name: "too large even when full", held: []ask{{kv: 1000, slots: 1, cands: on(e1)}},
			probe: ask{kv: 1001, slots: 1, cands: on(e1)}, wantReason: ledger.ReasonTooLarge},
		{name: "too large for first candidate only", probe: ask{kv: 1001, slots: 1, cands: on(e1, e3)}, wantEngine: e3},
		{name: "too large for first candidate reports its reason", held: []ask{{kv: 1, slots: 10, cands: on(e3)}},
			probe: ask{kv: 1001, slots: 1, cands: on(e1, e3)}, wantReason: ledger.ReasonEngineKV, wantOn: e1},
		{name: "priority fill is floored", probe: ask{kv: batchE3, slots: 1, cands: on(e3), prio: prioBatch}, wantEngine: e3},
		{name: "priority too large above its fill", probe: ask{kv: batchE3 + 1, slots: 1, cands: on(e1, e3), prio: prioBatch},
			wantReason: ledger.ReasonTooLarge},
		{name: "priority headroom kv", held: []ask{{kv: batchE1, slots: 1, cands: on(e1), prio: prioBatch}},
			probe: ask{kv: 1, slots: 1, cands: on(e1), prio: prioBatch}, wantReason: ledger.ReasonPriorityHeadroom, wantOn: e1},
		{name: "priority headroom kv exact", held: []ask{{kv: batchE1 - 10, slots: 1, cands: on(e1), prio: prioBatch}},
			probe: ask{kv: 10, slots: 1, cands: on(e1), prio: prioBatch}, wantEngine: e1},
		{name: "priority headroom counts other classes", held: []ask{{kv: batchE1, slots: 1, cands: on(e1)}},
			probe: ask{kv: 1, slots: 1, cands: on(e1), prio: prioBatch}, wantReason: ledger.ReasonPriorityHeadroom, wantOn: e1},
		{name: "engine kv beats headroom above capacity", held: []ask{{kv: 1000, slots: 1, cands: on(e1)}},
			probe: ask{kv: 1, slots: 1, cands: on(e1), prio: prioBatch}, wantReason: ledger.ReasonEngineKV, wantOn: e1},
		{name: "higher class uses the headroom", held: []ask{{kv: batchE1, slots: 1, cands: on(e1), prio: prioBatch}},
			probe: ask{kv: 1000 - batchE1, slots: 1, cands: on(e1)}, wantEngine: e1},
		{name: "priority headroom slots", held: []ask{{kv: 1, slots: batchSl, cands: on(e1), prio: prioBatch}},
			probe: ask{kv: 1, slots: 1, cands: on(e1), prio: prioBatch}, wantReason: ledger.ReasonPriorityHeadroom, wantOn: e1},
		{name: "priority slots fill exact", held: []ask{{kv: 1, slots: interSl - 1, cands: on(e1), prio: prioInter}},
			probe: ask{kv: 1, slots: 1, cands: on(e1), prio: prioInter}, wantEngine: e1},
		{name: "engine slots beat headroom above capacity", held: []ask{{kv: 1, slots: 4, cands: on(e1)}},
			probe: ask{kv: 1, slots: 1, cands: on(e1), prio: prioInter}, wantReason: ledger.ReasonEngineSlots, wantOn: e1},
		{name: "tenant kv quota", held: []ask{{kv: smallRes, slots: 1, cands: on(e1), tenant: tenantSmall}},
			probe: ask{kv: 51, slots: 1, cands: on(e2), tenant: tenantSmall}, wantReason: ledger.ReasonTenantKV},
		{name: "tenant kv quota exact", held: []ask{{kv: smallRes, slots: 1, cands: on(e1), tenant: tenantSmall}},
			probe: ask{kv: 50, slots: 1, cands: on(e2), tenant: tenantSmall}, wantEngine: e2},
		{name: "tenant kv too large", probe: ask{kv: smallKV + 1, slots: 1, cands: on(e3), tenant: tenantSmall},
			wantReason: ledger.ReasonTooLarge},
		{name: "tenant quota counts only its own leases", held: []ask{{kv: 1000, slots: 1, cands: on(e1)}},
			probe: ask{kv: smallKV, slots: 1, cands: on(e2), tenant: tenantSmall}, wantEngine: e2},
		{name: "tenant quota before engines", held: []ask{{kv: smallRes, slots: 1, cands: on(e1), tenant: tenantSmall}},
			drain: on(e2), probe: ask{kv: 51, slots: 1, cands: on(e2), tenant: tenantSmall}, wantReason: ledger.ReasonTenantKV},
		{name: "tenant slot quota", held: []ask{
			{kv: 1, slots: 2, cands: on(e1), tenant: tenantSlots},
			{kv: 1, slots: slotsQ - 2, cands: on(e2), tenant: tenantSlots}},
			probe: ask{kv: 1, slots: 1, cands: on(e3), tenant: tenantSlots}, wantReason: ledger.ReasonTenantSlots},
		{name: "tenant slot quota exact", held: []ask{{kv: 1, slots: slotsQ - 1, cands: on(e1), tenant: tenantSlots}},
			probe: ask{kv: 1, slots: 1, cands: on(e3), tenant: tenantSlots}, wantEngine: e3},
		{name: "tenant slots too large", probe: ask{kv: 1, slots: slotsQ + 1, cands: on(e3), tenant: tenantSlots},
			wantReason: ledger.ReasonTooLarge},
		{name: "first fit wins", held: []ask{{kv: 1000, slots: 1, cands: on(e1)}},
			probe: ask{kv: 500, slots: 1, cands: on(e1, e2, e3)}, wantEngine: e2},
		{name: "caller order respected", probe: ask{kv: 10, slots: 1, cands: on(e3, e1, e2)}, wantEngine: e3},
		{name: "rejection names first candidate slots", held: []ask{
			{kv: 1, slots: 4, cands: on(e1)}, {kv: 1000, slots: 1, cands: on(e2)}},
			probe: ask{kv: 10, slots: 1, cands: on(e1, e2)}, wantReason: ledger.ReasonEngineSlots, wantOn: e1},
		{name: "rejection names first candidate kv", held: []ask{
			{kv: 1, slots: 4, cands: on(e1)}, {kv: 1000, slots: 1, cands: on(e2)}},
			probe: ask{kv: 10, slots: 1, cands: on(e2, e1)}, wantReason: ledger.ReasonEngineKV, wantOn: e2},
		{name: "draining", drain: on(e1), probe: ask{kv: 1, slots: 1, cands: on(e1)}, wantReason: ledger.ReasonDraining, wantOn: e1},
		{name: "draining skipped", drain: on(e1), probe: ask{kv: 1, slots: 1, cands: on(e1, e2)}, wantEngine: e2},
		{name: "draining named first", drain: on(e1), held: []ask{{kv: 1000, slots: 1, cands: on(e2)}},
			probe: ask{kv: 1, slots: 1, cands: on(e1, e2)}, wantReason: ledger.ReasonDraining, wantOn: e1},
		{name: "too large before draining", drain: on(e1), probe: ask{kv: 1001, slots: 1, cands: on(e1)},
			wantReason: ledger.ReasonTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := s.setup(t, limitsSpec(), noWindow)
			for _, a := range tc.held {
				f.acquire(a.on(f, h1), "")
			}
			for _, e := range tc.drain {
				if err := f.l.SetDraining(f.ctx, pool, e, true); err != nil {
					t.Fatalf("SetDraining(%s, true) error = %v, want nil", e, err)
				}
			}
			before := snapshot(f.stats())
			r := tc.probe.on(f, h2)
			if tc.wantReason == "" {
				l := f.acquire(r, tc.wantEngine)
				e, _ := engineStats(f.stats(), l.Engine)
				b := before.engines[l.Engine]
				if e.ReservedKV != b.kv+r.KVTokens || e.ReservedSlots != b.slots+r.Slots {
					t.Errorf("after grant engine %s reserved kv=%d slots=%d, want kv=%d slots=%d",
						l.Engine, e.ReservedKV, e.ReservedSlots, b.kv+r.KVTokens, b.slots+r.Slots)
				}
				return
			}
			f.reject(r, tc.wantReason, tc.wantOn)
			if got := snapshot(f.stats()); got.String() != before.String() {
				t.Errorf("rejection changed the pool:\n got %s\nwant %s", got, before)
			}
		})
	}
}

func (s *suite) testRetryAfterDefault(t *testing.T) {
	spec := poolSpec(pool, engine(e1, 100, 1), engine(e2, 100, 1)) // e2 keeps t1's quota above e1
	spec.RetryAfter = 0
	f := s.setup(t, spec, noWindow)
	f.acquire(f.req(h1, 100, 1, e1), e1)
	rej := f.reject(f.req(h1, 1, 1, e1), ledger.ReasonEngineKV, e1)
	if rej.RetryAfter != ledger.DefaultRetryAfter {
		t.Errorf("RetryAfter with no pool hint = %s, want ledger.DefaultRetryAfter %s", rej.RetryAfter, ledger.DefaultRetryAfter)
	}
}

func (s *suite) testDrainUndrain(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 100, 2), engine(e2, 100, 2)), noWindow)
	held := f.acquire(f.req(h1, 10, 1, e1), e1)
	drained := func(want bool) {
		t.Helper()
		e, _ := engineStats(f.stats(), e1)
		if e.Draining != want {
			t.Errorf("Stats engine e1 Draining = %v, want %v", e.Draining, want)
		}
	}
	if err := f.l.SetDraining(f.ctx, pool, e1, true); err != nil {
		t.Fatalf("SetDraining(e1, true) error = %v, want nil", err)
	}
	drained(true)
	f.reject(f.req(h1, 1, 1, e1), ledger.ReasonDraining, e1)
	f.acquire(f.req(h1, 1, 1, e1, e2), e2)
	// Draining refuses new grants only: the held lease still renews.
	if _, err := f.l.Renew(f.ctx, held.Ref(), longTTL); err != nil {
		t.Errorf("Renew on a draining engine error = %v, want nil", err)
	}
	// Draining again is idempotent.
	if err := f.l.SetDraining(f.ctx, pool, e1, true); err != nil {
		t.Fatalf("SetDraining(e1, true) twice error = %v, want nil", err)
	}
	if err := f.l.SetDraining(f.ctx, pool, e1, false); err != nil {
		t.Fatalf("SetDraining(e1, false) error = %v, want nil", err)
	}
	drained(false)
	f.acquire(f.req(h1, 1, 1, e1, e2), e1)
	wantErr(t, "SetDraining(unknown engine)", f.l.SetDraining(f.ctx, pool, "nope", true), ledger.ErrUnknownEngine)
	wantErr(t, "SetDraining(unknown pool)", f.l.SetDraining(f.ctx, "nope", e1, true), ledger.ErrUnknownPool)
}
