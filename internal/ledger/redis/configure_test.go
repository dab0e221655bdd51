package redis_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// TestConfigureMatchesGo holds configure.lua (and release.lua's end of a
// removed row) to ledger.ConfigureRows: random pools with leases on random
// engines and tenants, reconfigured with random specs; the fate the Go rule
// gives each engine and tenant row, from a Stats snapshot before the call,
// is compared with the rows Stats shows after it.
// LEASEHOLD_TEST_SEED=<seed> reruns one round; a failing round logs its seed.
func TestConfigureMatchesGo(t *testing.T) {
	srv := redisserver.Start(t)
	seededRounds(t, 8, 11, func(t *testing.T, rng *rand.Rand) { configureRound(t, srv, rng) })
}

func configureRound(t *testing.T, srv *redisserver.Server, rng *rand.Rand) {
	l := newLedger(t, srv, noWindow)
	ctx := ctxT(t)
	randomSpec := func() ledger.PoolSpec {
		spec := ledger.PoolSpec{Name: "p", Priorities: []ledger.PrioritySpec{{Name: "q", MaxFill: 1}}}
		for _, i := range rng.Perm(6)[:1+rng.IntN(6)] {
			spec.Engines = append(spec.Engines, ledger.EngineSpec{ID: ledger.EngineID(fmt.Sprintf("e%d", i)), KVTokens: 1 << 20, Slots: 1 << 10})
		}
		for _, i := range rng.Perm(4)[:1+rng.IntN(4)] {
			spec.Tenants = append(spec.Tenants, ledger.TenantSpec{Name: ledger.TenantID(fmt.Sprintf("t%d", i)), KVShare: 1})
		}
		return spec
	}
	spec := randomSpec()
	mustConfigure(t, l, spec)
	mustKeepAlive(t, l, "p", "h", time.Hour)
	var held []ledger.Lease
	fates := map[ledger.RowFate]int{}
	defer func() { t.Logf("fates: %v", fates) }()
	for step := range 12 {
		for range rng.IntN(5) { // take leases on the current spec
			r := ledger.AcquireRequest{
				Pool: "p", Candidates: []ledger.EngineID{spec.Engines[rng.IntN(len(spec.Engines))].ID},
				Tenant: spec.Tenants[rng.IntN(len(spec.Tenants))].Name, Priority: "q", KVTokens: 1, Slots: 1,
				Holder: "h", RequestID: ledger.RequestID(fmt.Sprintf("r%d-%d", step, len(held))), TTL: time.Hour,
			}
			g, err := l.Acquire(ctx, r)
			if err != nil {
				t.Fatalf("step %d Acquire(%s, %s): %v", step, r.Candidates[0], r.Tenant, err)
			}
			held = append(held, g.Lease)
		}
		for len(held) > 0 && rng.IntN(3) == 0 { // end some, maybe a removed row's last
			i := rng.IntN(len(held))
			if _, err := l.Release(ctx, held[i].Ref(), ledger.Usage{}); err != nil {
				t.Fatalf("step %d Release: %v", step, err)
			}
			held = append(held[:i], held[i+1:]...)
		}
		before := poolRows(t, l)
		for id, r := range before {
			if r.removed && ledger.RowFateOf(false, r.leases) != ledger.RowRemoved {
				t.Errorf("step %d before Configure: %s is removed with %d leases, Go rule drops it", step, id, r.leases)
			}
		}

		spec = randomSpec()
		var specIDs []string
		for _, e := range spec.Engines {
			specIDs = append(specIDs, "engine "+string(e.ID))
		}
		for _, x := range spec.Tenants {
			specIDs = append(specIDs, "tenant "+string(x.Name))
		}
		leases := map[string]int64{}
		for id, r := range before {
			leases[id] = r.leases
		}
		want := ledger.ConfigureRows(specIDs, leases)
		mustConfigure(t, l, spec)
		after := poolRows(t, l)
		for id, fate := range want {
			fates[fate]++
			got, ok := after[id]
			switch {
			case fate == ledger.RowDropped && ok:
				t.Errorf("step %d Configure kept %s (removed %v, %d leases), Go rule drops it", step, id, got.removed, got.leases)
			case fate != ledger.RowDropped && !ok:
				t.Errorf("step %d Configure dropped %s, Go rule: %s", step, id, fate)
			case ok && got.removed != (fate == ledger.RowRemoved):
				t.Errorf("step %d Configure left %s removed = %v, Go rule: %s", step, id, got.removed, fate)
			}
		}
		for id := range after {
			if _, ok := want[id]; !ok {
				t.Errorf("step %d Configure shows %s, in neither the spec nor the pool before", step, id)
			}
		}
	}
}

// row is an engine or tenant row as Stats shows it.
type row struct {
	removed bool
	leases  int64
}

// poolRows returns pool p's engine and tenant rows, keyed "engine <id>" and
// "tenant <name>".
func poolRows(t *testing.T, l ledger.Ledger) map[string]row {
	t.Helper()
	st, err := l.Stats(ctxT(t), "p")
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	rows := map[string]row{}
	for _, e := range st.Engines {
		rows["engine "+string(e.Spec.ID)] = row{removed: e.Removed, leases: e.Leases}
	}
	for _, x := range st.Tenants {
		rows["tenant "+string(x.Spec.Name)] = row{removed: x.Removed, leases: x.Leases}
	}
	return rows
}
