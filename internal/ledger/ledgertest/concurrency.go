package ledgertest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Safety under concurrency: many goroutines acquire, renew, resize, grow
// and release while a tracker checks every grant, Resize growth and Grow,
// and every worker checks after each of its operations that the ledger's
// totals equal its lease rows (totalsMatch).
//
// The tracker is sound: a grant (or growth) is recorded only after the call
// returns and removed (or shrunk) before the call is made, so what it tracks
// is a subset of what the ledger truly has outstanding at every instant.
// Without Grow (a worst_case pool), the tracked total on an engine above its
// capacity, or a tenant's above its quota, means the ledger over-granted.
//
// Growth takes engines past capacity, so in an elastic pool every call is
// judged on its window: the tracked totals' low-water mark from before the
// call is made until it returns, which the ledger held at least at the
// instant the call took effect. A grant or Resize growth of kv on an engine
// the window shows holding used must fit: used + kv <= AdmissibleKV(f, h)
// (slots and tenant quotas alike); a Grow of delta that takes the window's
// used past capacity, or the tenant's past its quota, must come back
// flagged Overgrown.

const (
	concWorkers = 64
	concOps     = 60
	concHolders = 8
	// concHeadroom is the elastic SafetyUnderLoad pool's growth headroom.
	concHeadroom = 0.1
	// loadTTL is the sessions' and leases' TTL under SafetyUnderLoad: far
	// longer than the load takes on a loaded machine, so that nothing ends
	// by time there (expiry under load is ExpiryUnderLoad's subject).
	loadTTL = 10 * time.Minute
)

func concSpec() ledger.PoolSpec {
	s := poolSpec(pool, engine(e1, 24000, 24), engine(e2, 16000, 16), engine(e3, 10000, 10))
	s.Tenants = []ledger.TenantSpec{
		{Name: "ta", KVShare: 0.5},
		{Name: "tb", KVShare: 0.3, SlotShare: 0.4},
		{Name: "tc", KVShare: 1},
	}
	s.Priorities = []ledger.PrioritySpec{{Name: prioStd, MaxFill: 1}, {Name: prioBatch, MaxFill: 0.7}}
	return s
}

// loadFailures gathers what the goroutines of a load test find: the first
// ten distinct failures, reported by the test at the end. The first failure
// sets stop, which ends the load; the test sets it too once the load is done.
type loadFailures struct {
	stop atomic.Bool
	mu   sync.Mutex // guards msgs
	msgs []string
}

func (lf *loadFailures) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	lf.mu.Lock()
	defer lf.mu.Unlock()
	if len(lf.msgs) < 10 && !contains(lf.msgs, msg) {
		lf.msgs = append(lf.msgs, msg)
	}
	lf.stop.Store(true)
}

// report fails t with each failure gathered; call it once the load's
// goroutines have returned.
func (lf *loadFailures) report(t *testing.T) {
	t.Helper()
	for _, m := range lf.msgs {
		t.Error(m)
	}
}

// pollStats is a load test's check of the ledger's own totals: it fetches
// the pool's stats and fails for every engine reserved beyond its capacity
// (in KV tokens, plus what Grow may have added where tr tracks growth) and,
// with tr, every tenant reserved beyond its quota (plus growth). It returns
// false (after failing) when Stats itself failed.
func (s *suite) pollStats(f *fixture, lf *loadFailures, tr *tracker) (ledger.PoolStats, bool) {
	st, _, err := retry(&s.backendFailures, func() (ledger.PoolStats, error) { return f.l.Stats(f.ctx, pool) })
	if err != nil {
		lf.fail("Stats error = %v", err)
		return st, false
	}
	for _, e := range st.Engines {
		var grown int64
		if tr != nil {
			grown, _ = tr.grownBy(e.Spec.ID, "")
		}
		if e.ReservedKV > e.Spec.KVTokens+grown || e.ReservedSlots > e.Spec.Slots {
			lf.fail("Stats engine %s reserved kv=%d slots=%d, capacity kv=%d (plus at most %d grown) slots=%d",
				e.Spec.ID, e.ReservedKV, e.ReservedSlots, e.Spec.KVTokens, grown, e.Spec.Slots)
		}
	}
	if tr == nil {
		return st, true
	}
	for _, x := range st.Tenants {
		_, grown := tr.grownBy("", x.Spec.Name)
		if x.ReservedKV > x.QuotaKV+grown || (x.QuotaSlots > 0 && x.ReservedSlots > x.QuotaSlots) {
			lf.fail("Stats tenant %s reserved kv=%d slots=%d, quota kv=%d (plus at most %d grown) slots=%d",
				x.Spec.Name, x.ReservedKV, x.ReservedSlots, x.QuotaKV, grown, x.QuotaSlots)
		}
	}
	return st, true
}

// totalsMatch is the load tests' check after every operation of every
// worker: the ledger's engine and tenant totals equal the sums of its
// lease rows (ledger.TotalsChecker, one atomic read, so it holds at every
// instant). It fails lf and returns false on any mismatch.
func (s *suite) totalsMatch(f *fixture, lf *loadFailures, after string) bool {
	ms, _, err := retry(&s.backendFailures, func() ([]ledger.TotalsMismatch, error) { return ledger.CheckTotals(f.ctx, f.l, pool) })
	if err != nil {
		lf.fail("CheckTotals after %s error = %v, want nil", after, err)
		return false
	}
	for _, m := range ms {
		lf.fail("CheckTotals after %s: %s, want equal", after, m)
	}
	return len(ms) == 0
}

func (s *suite) testConcurrency(t *testing.T) {
	t.Run("SafetyUnderLoad", func(t *testing.T) {
		t.Run("worst_case", func(t *testing.T) { s.testSafetyUnderLoad(t, ledger.ReserveWorstCase) })
		t.Run("elastic", func(t *testing.T) { s.testSafetyUnderLoad(t, ledger.ReserveElastic) })
	})
	t.Run("ExpiryUnderLoad", s.testExpiryUnderLoad)
	t.Run("ConcurrentReplay", s.testConcurrentReplay)
	t.Run("ConcurrentRelease", s.testConcurrentRelease)
}

// testSafetyUnderLoad runs the load in a pool of the given mode: elastic
// pools keep a growth headroom and their leases grow; in a worst_case pool
// Grow is refused and nothing may ever exceed capacity.
func (s *suite) testSafetyUnderLoad(t *testing.T, mode ledger.ReserveMode) {
	spec := concSpec()
	spec.Reserve = mode
	elastic := mode == ledger.ReserveElastic
	if elastic {
		spec.GrowthHeadroom = concHeadroom
	}
	f := s.setup(t, spec, noWindow)
	for i := range concHolders {
		f.keepAlive(ledger.HolderID(fmt.Sprintf("ch%d", i)), loadTTL)
	}
	tr := newTracker(spec)
	engines := []ledger.EngineID{e1, e2, e3}
	tenants := []ledger.TenantID{"ta", "tb", "tc"}
	prios := []ledger.PriorityName{prioStd, prioBatch}

	var grants, rejected, polls, growths, grownKV, overgrown atomic.Int64
	lf := &loadFailures{}
	fail, stop := lf.fail, &lf.stop

	// The Stats poller: the ledger's own totals never exceed capacity, but
	// for what Grow added.
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		for !stop.Load() {
			if _, ok := s.pollStats(f, lf, tr); !ok {
				return
			}
			polls.Add(1)
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
			defer s.totalsMatch(f, lf, fmt.Sprintf("worker %d's last operation", w))
			for op := 0; op < concOps && !stop.Load(); op++ {
				if op > 0 && !s.totalsMatch(f, lf, fmt.Sprintf("worker %d's operation %d", w, op-1)) {
					return
				}
				p := rng.IntN(100)
				switch {
				case len(*mine) == 0 || p < 45:
					cands := append([]ledger.EngineID(nil), engines...)
					rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
					r := ledger.AcquireRequest{
						Pool: pool, Candidates: cands[:1+rng.IntN(len(cands))],
						Tenant: tenants[rng.IntN(len(tenants))], Priority: prios[rng.IntN(len(prios))],
						KVTokens: 200 + rng.Int64N(1800), Slots: 1 + rng.Int64N(2), Holder: holder,
						RequestID: ledger.RequestID(fmt.Sprintf("w%d-%d", w, op)), TTL: loadTTL,
					}
					win := tr.open()
					g, unknown, err := retry(&s.backendFailures, func() (ledger.Grant, error) { return f.l.Acquire(f.ctx, r) })
					tr.close(win)
					if err != nil {
						if rej := ledger.AsRejection(err); rej != nil && rej.Reason.Valid() && rej.Reason != ledger.ReasonRecovering {
							rejected.Add(1)
							continue
						}
						fail("Acquire(%s) error = %v, want a grant or a capacity rejection", describe(r), err)
						return
					}
					if (g.Replayed && !unknown) || g.Lease.KVTokens != r.KVTokens || g.Lease.Slots != r.Slots || !contains(r.Candidates, g.Lease.Engine) {
						fail("Acquire(%s) = %+v, want a fresh lease of the request's size on a candidate", describe(r), g)
						return
					}
					grants.Add(1)
					tr.admitted(win, g.Lease, g.Lease.KVTokens, g.Lease.Slots, "acquire")
					tr.add(g.Lease, g.Lease.KVTokens, g.Lease.Slots, "acquire")
					*mine = append(*mine, g.Lease)
				case p < 55:
					l := (*mine)[rng.IntN(len(*mine))]
					if _, _, err := retry(&s.backendFailures, func() (ledger.Renewal, error) { return f.l.Renew(f.ctx, l.Ref(), loadTTL) }); err != nil {
						fail("Renew(%s) error = %v, want nil", l.ID, err)
						return
					}
				case p < 70:
					i := rng.IntN(len(*mine))
					l := (*mine)[i]
					kv := 100 + rng.Int64N(2000)
					if kv < l.KVTokens {
						tr.add(l, kv-l.KVTokens, 0, "shrink") // before: tracked stays a subset
					}
					win := tr.open()
					rn, _, err := retry(&s.backendFailures, func() (ledger.Renewal, error) { return f.l.Resize(f.ctx, l.Ref(), kv) })
					tr.close(win)
					switch {
					case err == nil:
						if rn.Lease.KVTokens != kv {
							fail("Resize(%s, %d) lease kv = %d, want %d", l.ID, kv, rn.Lease.KVTokens, kv)
							return
						}
						if kv > l.KVTokens {
							tr.admitted(win, l, kv-l.KVTokens, 0, "resize")
							tr.add(l, kv-l.KVTokens, 0, "resize")
						}
						(*mine)[i].KVTokens = kv
					case kv > l.KVTokens && ledger.AsRejection(err) != nil:
						rejected.Add(1)
					default:
						fail("Resize(%s, %d -> %d) error = %v", l.ID, l.KVTokens, kv, err)
						return
					}
				case p < 80:
					i := rng.IntN(len(*mine))
					l := (*mine)[i]
					kv := min(l.KVTokens+100+rng.Int64N(1500), tr.capKV[l.Engine])
					if !elastic {
						_, _, err := retry(&s.backendFailures, func() (ledger.Renewal, error) { return f.l.Grow(f.ctx, l.Ref(), kv) })
						if !errors.Is(err, ledger.ErrInvalidArgument) {
							fail("Grow(%s, %d -> %d) in a worst_case pool error = %v, want ErrInvalidArgument", l.ID, l.KVTokens, kv, err)
							return
						}
						continue
					}
					delta := kv - l.KVTokens
					tr.intend(l, delta)
					win := tr.open()
					rn, _, err := retry(&s.backendFailures, func() (ledger.Renewal, error) { return f.l.Grow(f.ctx, l.Ref(), kv) })
					tr.close(win)
					if err != nil {
						fail("Grow(%s, %d -> %d) error = %v, want never refused", l.ID, l.KVTokens, kv, err)
						return
					}
					if rn.Lease.KVTokens != kv || (l.Overgrown && !rn.Lease.Overgrown) {
						fail("Grow(%s, %d -> %d) lease kv=%d overgrown=%v, want kv=%d and overgrown kept (was %v)",
							l.ID, l.KVTokens, kv, rn.Lease.KVTokens, rn.Lease.Overgrown, kv, l.Overgrown)
						return
					}
					if delta > 0 {
						tr.grew(win, l, delta, rn.Lease.Overgrown)
						tr.add(l, delta, 0, "grow")
						growths.Add(1)
						grownKV.Add(delta)
						if rn.Lease.Overgrown && !l.Overgrown {
							overgrown.Add(1)
						}
					}
					(*mine)[i].KVTokens, (*mine)[i].Overgrown = kv, rn.Lease.Overgrown
				default:
					i := rng.IntN(len(*mine))
					l := (*mine)[i]
					*mine = append((*mine)[:i], (*mine)[i+1:]...)
					tr.add(l, -l.KVTokens, -l.Slots, "release") // before the call
					rel, unknown, err := retry(&s.backendFailures, func() (ledger.Released, error) {
						return f.l.Release(f.ctx, l.Ref(), ledger.Usage{PromptTokens: 1})
					})
					if err != nil || (!rel.Released && !unknown) {
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
	lf.report(t)
	if v := tr.violation(); v != "" {
		t.Errorf("over-admission: %s", v)
	}
	if t.Failed() {
		return
	}
	t.Logf("%d grants, %d rejections, %d growths (%d KV tokens, %d leases newly overgrown), %d Stats polls, %d backend failures retried",
		grants.Load(), rejected.Load(), growths.Load(), grownKV.Load(), overgrown.Load(), polls.Load(), s.backendFailures.Load())
	if grants.Load() == 0 || rejected.Load() == 0 {
		t.Errorf("grants = %d, rejections = %d: want both, the workload must contend", grants.Load(), rejected.Load())
	}
	// Audit before cleanup: Stats agrees with List, an engine past its
	// capacity holds an overgrown lease, and the Grow counters count the
	// growths.
	st, listed := f.stats(), f.list(ledger.Filter{Pool: pool})
	checkStatsMatchList(t, st, listed)
	checkOvergrown(t, st, listed)
	if elastic && growths.Load() == 0 {
		t.Errorf("growths = 0 in an elastic pool: want the workload to grow leases")
	}
	f.growCounters("the growths the workers made", growths.Load(), grownKV.Load(), st.Counters[ledger.CounterOvergrowths])
	if st.Counters[ledger.CounterOvergrowths] < overgrown.Load() {
		t.Errorf("Counters overgrowths = %d, want at least the %d leases Grow newly flagged", st.Counters[ledger.CounterOvergrowths], overgrown.Load())
	}
	for _, mine := range held {
		for _, l := range mine {
			f.release(l)
		}
	}
	st = f.stats()
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
	if g, r := st.Counters[ledger.CounterGrants], st.Counters[ledger.CounterReleases]; g != r || g < grants.Load() {
		t.Errorf("Counters grants = %d, releases = %d, want both %d", g, r, grants.Load())
	}
}

// checkOvergrown checks that every engine st shows reserved past its
// capacity holds a listed lease flagged Overgrown: only Grow (or Reassert)
// takes an engine there.
func checkOvergrown(t testing.TB, st ledger.PoolStats, listed []ledger.Lease) {
	t.Helper()
	flagged := map[ledger.EngineID]bool{}
	for _, l := range listed {
		if l.Overgrown || l.Reasserted {
			flagged[l.Engine] = true
		}
	}
	for _, e := range st.Engines {
		if e.ReservedKV > e.Spec.KVTokens && !flagged[e.Spec.ID] {
			t.Errorf("Stats engine %s reserved kv=%d past its capacity %d, and none of its listed leases is flagged Overgrown",
				e.Spec.ID, e.ReservedKV, e.Spec.KVTokens)
		}
	}
}

// testExpiryUnderLoad churns leases with short TTLs and short-lived sessions
// while a sweeper runs. Expired leases count until swept, so the ledger's own
// totals never exceed capacity; every grant ends exactly once, as a release,
// an expiry or a revocation.
func (s *suite) testExpiryUnderLoad(t *testing.T) {
	spec := concSpec()
	f := s.setup(t, spec, ledger.Options{RecoveryWindow: -1, SweepBatch: 4})
	engines := []ledger.EngineID{e1, e2, e3}
	lf := &loadFailures{}
	fail, stop := lf.fail, &lf.stop
	var bg sync.WaitGroup
	bg.Add(1)
	go func() { // the poller and sweeper
		defer bg.Done()
		for !stop.Load() {
			if _, _, err := retry(&s.backendFailures, func() (ledger.Swept, error) { return f.l.Sweep(f.ctx, pool, 3) }); err != nil {
				fail("Sweep error = %v", err)
				return
			}
			if _, ok := s.pollStats(f, lf, nil); !ok {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var last atomic.Int64 // the latest deadline or session expiry, unix ns
	note := func(t time.Time) {
		for {
			old := last.Load()
			if t.UnixNano() <= old || last.CompareAndSwap(old, t.UnixNano()) {
				return
			}
		}
	}
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			// Every fourth worker's session is short and dies mid-run,
			// holding leases with long TTLs: those end by revocation.
			holder := ledger.HolderID(fmt.Sprintf("xh%d", w))
			sttl := longTTL
			if w%4 == 0 {
				sttl = f.ttl(150 * time.Millisecond)
			}
			sess, _, err := retry(&s.backendFailures, func() (ledger.Session, error) { return f.l.KeepAlive(f.ctx, pool, holder, sttl) })
			if err != nil {
				fail("KeepAlive(%s) error = %v", holder, err)
				return
			}
			if sttl != longTTL {
				note(sess.Expires)
			}
			var mine []ledger.Lease
			defer s.totalsMatch(f, lf, fmt.Sprintf("worker %d's last operation", w))
			for op := 0; op < 30 && !stop.Load(); op++ {
				if op > 0 && !s.totalsMatch(f, lf, fmt.Sprintf("worker %d's operation %d", w, op-1)) {
					return
				}
				if len(mine) > 0 && rng.IntN(3) == 0 {
					i := rng.IntN(len(mine))
					l := mine[i]
					mine = append(mine[:i], mine[i+1:]...)
					if _, _, err := retry(&s.backendFailures, func() (ledger.Released, error) { return f.l.Release(f.ctx, l.Ref(), ledger.Usage{}) }); err != nil {
						fail("Release(%s) error = %v, want nil (Released may be false if it expired)", l.ID, err)
						return
					}
					continue
				}
				cands := append([]ledger.EngineID(nil), engines...)
				rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
				r := ledger.AcquireRequest{
					Pool: pool, Candidates: cands, Tenant: "tc", Priority: prioStd,
					KVTokens: 500 + rng.Int64N(3000), Slots: 1 + rng.Int64N(3), Holder: holder,
					RequestID: ledger.RequestID(fmt.Sprintf("x%d-%d", w, op)), TTL: f.ttl(time.Duration(20+rng.IntN(200)) * time.Millisecond),
				}
				if sttl != longTTL {
					r.TTL = longTTL
				}
				g, _, err := retry(&s.backendFailures, func() (ledger.Grant, error) { return f.l.Acquire(f.ctx, r) })
				switch {
				case err == nil:
					if sttl == longTTL {
						note(g.Lease.Deadline)
					}
					mine = append(mine, g.Lease)
				case ledger.AsRejection(err) != nil:
				case errors.Is(err, ledger.ErrSessionExpired), errors.Is(err, ledger.ErrNoSession):
					if sttl == longTTL {
						fail("Acquire by live holder %s error = %v", holder, err)
					}
					return
				default:
					fail("Acquire(%s) error = %v", describe(r), err)
					return
				}
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	bg.Wait()
	lf.report(t)
	if t.Failed() {
		return
	}
	f.waitPast(time.Unix(0, last.Load()))
	f.sweepAll()
	st := f.stats()
	for _, e := range st.Engines {
		if e.ReservedKV != 0 || e.ReservedSlots != 0 || e.Leases != 0 {
			t.Errorf("after every deadline and a sweep engine %s reserved kv=%d slots=%d leases=%d, want 0", e.Spec.ID, e.ReservedKV, e.ReservedSlots, e.Leases)
		}
	}
	c := st.Counters
	ended := c[ledger.CounterReleases] + c[ledger.CounterExpired] + c[ledger.CounterRevoked]
	if c[ledger.CounterGrants] == 0 || ended != c[ledger.CounterGrants] {
		t.Errorf("Counters grants = %d, releases+expired+revoked = %d+%d+%d = %d, want every grant ended exactly once",
			c[ledger.CounterGrants], c[ledger.CounterReleases], c[ledger.CounterExpired], c[ledger.CounterRevoked], ended)
	}
	t.Logf("grants %d: released %d, expired %d, revoked %d", c[ledger.CounterGrants], c[ledger.CounterReleases], c[ledger.CounterExpired], c[ledger.CounterRevoked])
}

// concurrently runs op from n goroutines at once, each retrying undefined
// errors, and returns each one's result and error, and whether any of them
// saw an unknown outcome (see retry).
func concurrently[T any](s *suite, n int, op func() (T, error)) ([]T, []error, bool) {
	vals, errs := make([]T, n), make([]error, n)
	var unknown atomic.Bool
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var u bool
			vals[i], u, errs[i] = retry(&s.backendFailures, op)
			if u {
				unknown.Store(true)
			}
		}()
	}
	wg.Wait()
	return vals, errs, unknown.Load()
}

// testConcurrentReplay retries one request from many goroutines at once:
// exactly one lease is created and every caller gets it.
func (s *suite) testConcurrentReplay(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4)), noWindow)
	r := f.req(h1, 600, 1, e1, e2)
	const n = 16
	grants, errs, unknown := concurrently(s, n, func() (ledger.Grant, error) { return f.l.Acquire(f.ctx, r) })
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("concurrent retry %d error = %v, want the one lease", i, errs[i])
		}
		if !grants[i].Replayed {
			fresh++
		}
		if grants[i].Lease.ID != grants[0].Lease.ID {
			t.Errorf("concurrent retry %d got lease %s, want %s like retry 0", i, grants[i].Lease.ID, grants[0].Lease.ID)
		}
	}
	if fresh != 1 && !(fresh == 0 && unknown) {
		t.Errorf("%d of %d concurrent retries were not Replayed, want exactly 1", fresh, n)
	}
	st := f.stats()
	if st.Leases != 1 {
		t.Errorf("Stats Leases after %d concurrent retries = %d, want 1", n, st.Leases)
	}
	checkStatsMatchList(t, st, f.list(ledger.Filter{Pool: pool}))
}

// testConcurrentRelease releases one lease from many goroutines at once:
// exactly one release frees it, and no other reservation is touched.
func (s *suite) testConcurrentRelease(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4)), noWindow)
	a := f.acquire(f.req(h1, 600, 1, e1), e1)
	b := f.acquire(f.req(h2, 400, 1, e1), e1)
	const n = 16
	released, errs, unknown := concurrently(s, n, func() (ledger.Released, error) {
		return f.l.Release(f.ctx, a.Ref(), ledger.Usage{PromptTokens: 10})
	})
	count := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("concurrent release %d error = %v, want nil", i, errs[i])
		}
		if released[i].Released {
			count++
		}
	}
	if count != 1 && !(count == 0 && unknown) {
		t.Errorf("%d of %d concurrent releases reported Released, want exactly 1", count, n)
	}
	f.wantReserved(e1, b.KVTokens, b.Slots, 1)
	c := f.stats().Counters
	if c[ledger.CounterReleases] != 1 || c[ledger.CounterActualPrompt] != 10 {
		t.Errorf("Counters releases = %d, actual prompt = %d, want 1 and 10", c[ledger.CounterReleases], c[ledger.CounterActualPrompt])
	}
}
