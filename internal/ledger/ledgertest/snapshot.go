package ledgertest

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/internal/ledger"
)

// amounts are reserved totals.
type amounts struct{ kv, slots, leases int64 }

// poolSnapshot is the part of PoolStats a call that fails must not change;
// its String is the comparison.
type poolSnapshot struct {
	epoch      ledger.Epoch
	capKV      int64
	capSlots   int64
	leases     int64
	holders    int
	engines    map[ledger.EngineID]amounts
	tenants    map[ledger.TenantID]amounts
	draining   []ledger.EngineID
	correction map[ledger.EngineID]amounts
	reserve    ledger.ReserveMode
	headroom   float64
	// growths, grownKV and overgrowths are the Grow counters: only a
	// growth changes them.
	growths, grownKV, overgrowths int64
}

func snapshot(st ledger.PoolStats) poolSnapshot {
	p := poolSnapshot{
		epoch: st.Epoch, capKV: st.CapacityKV, capSlots: st.CapacitySlots,
		leases: st.Leases, holders: st.LiveHolders,
		engines:    map[ledger.EngineID]amounts{},
		tenants:    map[ledger.TenantID]amounts{},
		correction: map[ledger.EngineID]amounts{},
		reserve:    st.Reserve, headroom: st.GrowthHeadroom,
		growths: st.Counters[ledger.CounterGrowths], grownKV: st.Counters[ledger.CounterGrownKV],
		overgrowths: st.Counters[ledger.CounterOvergrowths],
	}
	for _, e := range st.Engines {
		p.engines[e.Spec.ID] = amounts{e.ReservedKV, e.ReservedSlots, e.Leases}
		p.correction[e.Spec.ID] = amounts{kv: e.CorrectionKV, slots: e.CorrectionSlots}
		if e.Draining {
			p.draining = append(p.draining, e.Spec.ID)
		}
	}
	for _, x := range st.Tenants {
		p.tenants[x.Spec.Name] = amounts{x.ReservedKV, x.ReservedSlots, x.Leases}
	}
	return p
}

func (p poolSnapshot) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "epoch=%d cap=%d/%d leases=%d holders=%d draining=%v", p.epoch, p.capKV, p.capSlots, p.leases, p.holders, p.draining)
	fmt.Fprintf(&b, " reserve=%s headroom=%v growths=%d/%d/%d", p.reserve, p.headroom, p.growths, p.grownKV, p.overgrowths)
	for _, id := range slices.Sorted(maps.Keys(p.engines)) {
		a, c := p.engines[id], p.correction[id]
		fmt.Fprintf(&b, " engine %s=%d/%d/%d corr=%d/%d", id, a.kv, a.slots, a.leases, c.kv, c.slots)
	}
	for _, id := range slices.Sorted(maps.Keys(p.tenants)) {
		a := p.tenants[id]
		fmt.Fprintf(&b, " tenant %s=%d/%d/%d", id, a.kv, a.slots, a.leases)
	}
	return b.String()
}
