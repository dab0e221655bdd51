package ledgertest

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Safety under concurrency: many goroutines acquire, renew, resize and
// release while a tracker checks "granted <= capacity" at every step.
//
// The tracker is sound: a grant (or growth) is recorded only after the call
// returns and removed (or shrunk) before the call is made, so what it tracks
// is a subset of what the ledger truly has outstanding at every instant. If
// the tracked total on an engine exceeds its capacity, or a tenant's exceeds
// its quota, the ledger over-granted.

const (
	concWorkers = 64
	concOps     = 40
	concHolders = 8
)

// tracker is the checker's view of granted capacity.
type tracker struct {
	mu      sync.Mutex // guards everything below
	engines map[ledger.EngineID]amounts
	tenants map[ledger.TenantID]amounts
	capKV   map[ledger.EngineID]int64
	capSl   map[ledger.EngineID]int64
	quota   map[ledger.TenantID]amounts // kv, slots (0 = none)
	first   string                      // the first violation
}

func newTracker(spec ledger.PoolSpec) *tracker {
	tr := &tracker{
		engines: map[ledger.EngineID]amounts{}, tenants: map[ledger.TenantID]amounts{},
		capKV: map[ledger.EngineID]int64{}, capSl: map[ledger.EngineID]int64{}, quota: map[ledger.TenantID]amounts{},
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
	return tr
}

// add records kv tokens and slots of a lease (negative to remove) and checks
// the limits.
func (tr *tracker) add(l ledger.Lease, kv, slots int64, op string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	e := tr.engines[l.Engine]
	e.kv, e.slots = e.kv+kv, e.slots+slots
	tr.engines[l.Engine] = e
	x := tr.tenants[l.Tenant]
	x.kv, x.slots = x.kv+kv, x.slots+slots
	tr.tenants[l.Tenant] = x
	if tr.first != "" || (kv <= 0 && slots <= 0) {
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

func (tr *tracker) violation() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.first
}

func concSpec() ledger.PoolSpec {
	s := poolSpec(pool, engine(e1, 8000, 6), engine(e2, 6000, 5), engine(e3, 4000, 4))
	s.Tenants = []ledger.TenantSpec{
		{Name: "ta", KVShare: 0.5},
		{Name: "tb", KVShare: 0.3, SlotShare: 0.4},
		{Name: "tc", KVShare: 1},
	}
	s.Priorities = []ledger.PrioritySpec{{Name: prioStd, MaxFill: 1}, {Name: prioBatch, MaxFill: 0.7}}
	return s
}

func (s *suite) testConcurrency(t *testing.T) {
	spec := concSpec()
	f := s.setup(t, spec, noWindow)
	for i := range concHolders {
		f.keepAlive(ledger.HolderID(fmt.Sprintf("ch%d", i)), longTTL)
	}
	tr := newTracker(spec)
	engines := []ledger.EngineID{e1, e2, e3}
	tenants := []ledger.TenantID{"ta", "tb", "tc"}
	prios := []ledger.PriorityName{prioStd, prioBatch}

	var (
		stop     atomic.Bool
		grants   atomic.Int64
		rejected atomic.Int64
		polls    atomic.Int64
		errMu    sync.Mutex // guards errs
		errs     []string
	)
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		errMu.Lock()
		defer errMu.Unlock()
		if len(errs) < 10 && !contains(errs, msg) {
			errs = append(errs, msg)
		}
		stop.Store(true)
	}

	// The Stats poller: the ledger's own totals never exceed capacity.
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		for !stop.Load() {
			st, err := f.l.Stats(f.ctx, pool)
			if err != nil {
				fail("Stats error = %v", err)
				return
			}
			polls.Add(1)
			for _, e := range st.Engines {
				if e.ReservedKV > e.Spec.KVTokens || e.ReservedSlots > e.Spec.Slots {
					fail("Stats engine %s reserved kv=%d slots=%d, capacity kv=%d slots=%d", e.Spec.ID, e.ReservedKV, e.ReservedSlots, e.Spec.KVTokens, e.Spec.Slots)
				}
			}
			for _, x := range st.Tenants {
				if x.ReservedKV > x.QuotaKV || (x.QuotaSlots > 0 && x.ReservedSlots > x.QuotaSlots) {
					fail("Stats tenant %s reserved kv=%d slots=%d, quota kv=%d slots=%d", x.Spec.Name, x.ReservedKV, x.ReservedSlots, x.QuotaKV, x.QuotaSlots)
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()

	held := make([][]ledger.Lease, concWorkers) // each worker's own leases
	var wg sync.WaitGroup
	for w := range concWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			holder := ledger.HolderID(fmt.Sprintf("ch%d", w%concHolders))
			mine := &held[w]
			for op := 0; op < concOps && !stop.Load(); op++ {
				p := rng.IntN(100)
				switch {
				case len(*mine) == 0 || p < 45:
					cands := append([]ledger.EngineID(nil), engines...)
					rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
					r := ledger.AcquireRequest{
						Pool: pool, Candidates: cands[:1+rng.IntN(len(cands))],
						Tenant: tenants[rng.IntN(len(tenants))], Priority: prios[rng.IntN(len(prios))],
						KVTokens: 200 + rng.Int64N(1800), Slots: 1 + rng.Int64N(2), Holder: holder,
						RequestID: ledger.RequestID(fmt.Sprintf("w%d-%d", w, op)), TTL: longTTL,
					}
					g, err := f.l.Acquire(f.ctx, r)
					if err != nil {
						if rej := ledger.AsRejection(err); rej != nil && rej.Reason.Valid() && rej.Reason != ledger.ReasonRecovering {
							rejected.Add(1)
							continue
						}
						fail("Acquire(%s) error = %v, want a grant or a capacity rejection", describe(r), err)
						return
					}
					if g.Replayed || g.Lease.KVTokens != r.KVTokens || g.Lease.Slots != r.Slots || !contains(r.Candidates, g.Lease.Engine) {
						fail("Acquire(%s) = %+v, want a fresh lease of the request's size on a candidate", describe(r), g)
						return
					}
					grants.Add(1)
					tr.add(g.Lease, g.Lease.KVTokens, g.Lease.Slots, "acquire")
					*mine = append(*mine, g.Lease)
				case p < 60:
					l := (*mine)[rng.IntN(len(*mine))]
					if _, err := f.l.Renew(f.ctx, l.Ref(), longTTL); err != nil {
						fail("Renew(%s) error = %v, want nil", l.ID, err)
						return
					}
				case p < 80:
					i := rng.IntN(len(*mine))
					l := (*mine)[i]
					kv := 100 + rng.Int64N(2000)
					if kv < l.KVTokens {
						tr.add(l, kv-l.KVTokens, 0, "shrink") // before: tracked stays a subset
					}
					rn, err := f.l.Resize(f.ctx, l.Ref(), kv)
					switch {
					case err == nil:
						if rn.Lease.KVTokens != kv {
							fail("Resize(%s, %d) lease kv = %d, want %d", l.ID, kv, rn.Lease.KVTokens, kv)
							return
						}
						if kv > l.KVTokens {
							tr.add(l, kv-l.KVTokens, 0, "grow")
						}
						(*mine)[i].KVTokens = kv
					case kv > l.KVTokens && ledger.AsRejection(err) != nil:
						rejected.Add(1)
					default:
						fail("Resize(%s, %d -> %d) error = %v", l.ID, l.KVTokens, kv, err)
						return
					}
				default:
					i := rng.IntN(len(*mine))
					l := (*mine)[i]
					*mine = append((*mine)[:i], (*mine)[i+1:]...)
					tr.add(l, -l.KVTokens, -l.Slots, "release") // before the call
					rel, err := f.l.Release(f.ctx, l.Ref(), ledger.Usage{PromptTokens: 1})
					if err != nil || !rel.Released {
						fail("Release(%s) = Released %v, error %v; want true, nil", l.ID, rel.Released, err)
						return
					}
				}
				if v := tr.violation(); v != "" {
					fail("over-admission: %s", v)
					return
				}
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	<-pollDone
	for _, e := range errs {
		t.Error(e)
	}
	if v := tr.violation(); v != "" {
		t.Errorf("over-admission: %s", v)
	}
	if t.Failed() {
		return
	}
	t.Logf("%d grants, %d rejections, %d Stats polls", grants.Load(), rejected.Load(), polls.Load())
	if grants.Load() == 0 || rejected.Load() == 0 {
		t.Errorf("grants = %d, rejections = %d: want both, the workload must contend", grants.Load(), rejected.Load())
	}
	// Audit before cleanup: Stats agrees with List.
	checkStatsMatchList(t, f.stats(), f.list(ledger.Filter{Pool: pool}))
	for _, mine := range held {
		for _, l := range mine {
			f.release(l)
		}
	}
	st := f.stats()
	for _, e := range st.Engines {
		if e.ReservedKV != 0 || e.ReservedSlots != 0 || e.Leases != 0 {
			t.Errorf("after releasing everything engine %s reserved kv=%d slots=%d leases=%d, want 0", e.Spec.ID, e.ReservedKV, e.ReservedSlots, e.Leases)
		}
	}
	for _, x := range st.Tenants {
		if x.ReservedKV != 0 || x.ReservedSlots != 0 || x.Leases != 0 {
			t.Errorf("after releasing everything tenant %s reserved kv=%d slots=%d leases=%d, want 0", x.Spec.Name, x.ReservedKV, x.ReservedSlots, x.Leases)
		}
	}
	if st.Leases != 0 || len(f.list(ledger.Filter{Pool: pool})) != 0 {
		t.Errorf("after releasing everything Stats Leases = %d, want 0 and an empty List", st.Leases)
	}
	if g, r := st.Counters[ledger.CounterGrants], st.Counters[ledger.CounterReleases]; g != r || g != grants.Load() {
		t.Errorf("Counters grants = %d, releases = %d, want both %d", g, r, grants.Load())
	}
}
