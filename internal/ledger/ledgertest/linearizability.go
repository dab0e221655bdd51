package ledgertest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Linearizability: clients acquire, grow, release and read Stats
// concurrently in two elastic pools with a growth headroom; the recorded
// history (call and return times on one monotonic clock) must be explained
// by some sequential order of first-fit admission on engine KV tokens and
// slots (headroom kept free), with growth never refused, added to its
// engine and flagged Overgrown past capacity (ledger.GrowthOf), and each
// release's outcome moving its engine's circuit breaker (ledger.Breaker:
// in pool la three consecutive failures open it, for longer than the test,
// and an open engine refuses with breaker_open; pool lb's breaker is off,
// so it keeps contending on capacity). Leases have long TTLs, so nothing
// expires.
//
// A success resets the count only if its lease was granted in a later
// millisecond than the engine's latest counted failure
// (ledger.Breaker.Fresh). The history has each grant's Created but not
// the time of a failed release, so the model bounds it: no earlier than
// the latest grant on the engine before it, no later than the first grant
// on the engine after it (the ledger orders a release and the grants on
// its engine in one clock). A success on a lease granted in that window
// may go either way, and the model keeps both: its breaker state is the
// set of states the two engines' breakers may be in (linBreakers).

const (
	linClients = 8
	linOps     = 100
)

// linEngines are the engines of both pools, in the model's index order.
var linEngines = []ledger.EngineSpec{engine("x1", 1000, 3), engine("x2", 700, 2)}

// linHeadroom is both pools' growth headroom: grants fill 800 of x1 and 560
// of x2, and growth may take either to its capacity and past it.
const linHeadroom = 0.2

// linBreaker is pool p's breaker: in la three consecutive failed releases
// open an engine for the rest of the test; in lb it is off.
func linBreaker(p ledger.PoolID) ledger.BreakerSpec {
	if p == "la" {
		return ledger.BreakerSpec{Failures: 3, Cooldown: time.Hour}
	}
	return ledger.BreakerSpec{Failures: -1}
}

// linInput is one call of the history.
type linInput struct {
	pool    ledger.PoolID
	kind    string // "acquire", "grow", "release", "stats"
	cands   []int  // engine indexes, acquire only
	kv      int64  // acquire: requested; grow: the lease's new size
	slots   int64
	id      ledger.LeaseID // grow and release
	outcome ledger.Outcome // release
}

// linBreakers is the set of states the model's two engines' breakers may
// be in: bit 4*a+b when x1's may read a and x2's b, a state being the
// failures counted while closed (0-2) or linOpen. The zero value is
// impossible; a model starts at linClosed.
type linBreakers uint16

const (
	linOpen   = 3 // la's Failures: a state that reads open
	linClosed = linBreakers(1)
)

// linBreakerState is b as a state of linBreakers.
func linBreakerState(b ledger.Breaker) int {
	if b.State == ledger.BreakerOpen {
		return linOpen
	}
	return b.Failures
}

// linBreakerOf is the breaker in state k, its times zero: with
// linBreaker's hour of cooldown an open breaker read at the zero time
// stays open.
func linBreakerOf(k int) ledger.Breaker {
	if k == linOpen {
		return ledger.Breaker{State: ledger.BreakerOpen}
	}
	return ledger.Breaker{Failures: k}
}

// each calls f with every pair of states in the set.
func (m linBreakers) each(f func(x1, x2 int)) {
	for i := range 16 {
		if m&(1<<i) != 0 {
			f(i/4, i%4)
		}
	}
}

// with is m with the pair of states added.
func (m linBreakers) with(x1, x2 int) linBreakers { return m | 1<<(4*x1+x2) }

// linOutput is one return of the history.
type linOutput struct {
	engine   int            // acquire: granted engine index, -1 if rejected
	id       ledger.LeaseID // acquire: the granted lease
	created  int64          // acquire: the granted lease's Created, ms
	reason   ledger.Reason  // acquire: the rejection reason
	released bool           // release
	grownKV  int64          // grow: the lease's KV tokens after
	over     bool           // grow: the lease's Overgrown flag after
	kv       [2]int64       // stats: reserved per engine
	slots    [2]int64
}

// linLease is a lease in the model.
type linLease struct {
	engine    int
	kv, slots int64
	overgrown bool
	created   int64 // ms
}

// linState is the model's state of one pool; never mutated once built.
type linState struct {
	kv, slots [2]int64
	leases    map[ledger.LeaseID]linLease
	// breakers are the states the engines' breakers may be in.
	breakers linBreakers
	// granted is the Created (ms) of the latest grant on each engine;
	// failedLo and failedHi bound the ms of its latest failed release:
	// the latest grant on it before, and the first after (0 while none
	// followed). failedLo is 0 while none failed.
	granted, failedLo, failedHi [2]int64
}

func (s linState) with(id ledger.LeaseID, l linLease, add bool) linState {
	n := s
	n.leases = make(map[ledger.LeaseID]linLease, len(s.leases)+1)
	for k, v := range s.leases {
		n.leases[k] = v
	}
	if add {
		n.leases[id] = l
		n.kv[l.engine] += l.kv
		n.slots[l.engine] += l.slots
	} else {
		delete(n.leases, id)
		n.kv[l.engine] -= l.kv
		n.slots[l.engine] -= l.slots
	}
	return n
}

// grown returns s with lease id grown to l (same engine and slots).
func (s linState) grown(id ledger.LeaseID, l linLease) linState {
	old := s.leases[id]
	n := s.with(id, old, false)
	return n.with(id, l, true)
}

// linAdmission is the pool-wide part of the model's admissions in pool p:
// tenant t1 (kv_share 1) at priority std (max_fill 1) in an elastic pool.
func linAdmission(p ledger.PoolID, s linState) ledger.Admission {
	a := ledger.Admission{
		Tenant:         ledger.TenantSpec{Name: tenantAll, KVShare: 1},
		MaxFill:        1,
		GrowthHeadroom: linHeadroom,
		Breaker:        linBreaker(p),
	}
	for i, e := range linEngines {
		a.CapacityKV += e.KVTokens
		a.CapacitySlots += e.Slots
		a.TenantKV += s.kv[i]
		a.TenantSlots += s.slots[i]
	}
	return a
}

// linEngine is engine e's state in the model, its breaker in state k.
func linEngine(s linState, e, k int) ledger.EngineState {
	return ledger.EngineState{Spec: linEngines[e], ReservedKV: s.kv[e], ReservedSlots: s.slots[e], Breaker: linBreakerOf(k)}
}

// linGranted is s after a grant on engine e at created (ms): the first
// grant after a failed release bounds its time from above.
func linGranted(s linState, e int, created int64) linState {
	s.granted[e] = max(s.granted[e], created)
	if s.failedLo[e] != 0 && (s.failedHi[e] == 0 || created < s.failedHi[e]) {
		s.failedHi[e] = created
	}
	return s
}

// linReport is s's breakers after the release of l with outcome o in pool
// p (ledger.Breaker.Report), and after a failure the new bounds on its
// time. The latest failure's time is known only within
// [failedLo, failedHi]: the rule is applied at both ends, which give every
// result a time between them could (a later failure only makes fewer
// leases fresh), and both results are kept.
func linReport(p ledger.PoolID, s linState, l linLease, o ledger.Outcome) linState {
	e, spec := l.engine, linBreaker(p)
	failedAt := []int64{s.failedLo[e]}
	if s.failedHi[e] > s.failedLo[e] {
		failedAt = append(failedAt, s.failedHi[e])
	}
	var next linBreakers
	s.breakers.each(func(x1, x2 int) {
		k := []int{x1, x2}
		for _, at := range failedAt {
			b := linBreakerOf(k[e])
			if at != 0 {
				b.LastFailureAt = time.UnixMilli(at)
			}
			r, _ := b.Report(time.Time{}, spec, time.UnixMilli(l.created), false, o)
			after := []int{x1, x2}
			after[e] = linBreakerState(r)
			next = next.with(after[0], after[1])
		}
	})
	s.breakers = next
	if o.Failure() {
		s.failedLo[e], s.failedHi[e] = s.granted[e], 0
	}
	return s
}

// linGrow is the model's Grow, the contract's rule (ledger.GrowthOf): the
// lease grown, or false where the call is malformed (the clients never
// make one).
func linGrow(p ledger.PoolID, s linState, id ledger.LeaseID, kv int64) (linLease, bool) {
	l, ok := s.leases[id]
	if !ok {
		return l, false
	}
	g, err := ledger.GrowthOf(ledger.ReserveElastic, linAdmission(p, s), linEngine(s, l.engine, 0),
		ledger.Lease{ID: id, KVTokens: l.kv, Overgrown: l.overgrown}, kv)
	if err != nil {
		return l, false
	}
	l.kv += g.Delta
	l.overgrown = g.Overgrown
	return l, true
}

// linAdmit is the model's admission: the contract's rule, ledger.Admit, on
// the model state (see linAdmission) with the engines' breakers in states
// k. It returns the granted engine index or the rejection reason.
func linAdmit(p ledger.PoolID, s linState, k [2]int, cands []int, kv, slots int64) (int, ledger.Reason) {
	a := linAdmission(p, s)
	a.KVTokens, a.Slots = kv, slots
	for _, e := range cands {
		a.Candidates = append(a.Candidates, linEngine(s, e, k[e]))
	}
	i, rej := ledger.Admit(a)
	if rej != nil {
		return -1, rej.Reason
	}
	return cands[i], ""
}

var linModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[ledger.PoolID][]porcupine.Operation{}
		for _, op := range history {
			p := op.Input.(linInput).pool
			by[p] = append(by[p], op)
		}
		var out [][]porcupine.Operation
		for _, p := range sortedPools(by) {
			out = append(out, by[p])
		}
		return out
	},
	Init: func() any { return linState{leases: map[ledger.LeaseID]linLease{}, breakers: linClosed} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(linState), input.(linInput), output.(linOutput)
		switch in.kind {
		case "acquire":
			// Keep the breakers' states that admit as the ledger did.
			var kept linBreakers
			s.breakers.each(func(x1, x2 int) {
				e, reason := linAdmit(in.pool, s, [2]int{x1, x2}, in.cands, in.kv, in.slots)
				if e == out.engine && (e >= 0 || reason == out.reason) {
					kept = kept.with(x1, x2)
				}
			})
			if kept == 0 {
				return false, s
			}
			if out.engine < 0 {
				n := s
				n.breakers = kept
				return true, n
			}
			if _, dup := s.leases[out.id]; dup {
				return false, s
			}
			n := s.with(out.id, linLease{engine: out.engine, kv: in.kv, slots: in.slots, created: out.created}, true)
			n.breakers = kept
			return true, linGranted(n, out.engine, out.created)
		case "grow":
			l, ok := linGrow(in.pool, s, in.id, in.kv)
			if !ok || out.grownKV != l.kv || out.over != l.overgrown {
				return false, s
			}
			return true, s.grown(in.id, l)
		case "release":
			l, ok := s.leases[in.id]
			if out.released != ok {
				return false, s
			}
			if !ok {
				return true, s
			}
			return true, linReport(in.pool, s.with(in.id, l, false), l, in.outcome)
		case "stats":
			return out.kv == s.kv && out.slots == s.slots, s
		}
		return false, s
	},
	Equal: func(a, b any) bool {
		x, y := a.(linState), b.(linState)
		if x.kv != y.kv || x.slots != y.slots || x.breakers != y.breakers || x.granted != y.granted ||
			x.failedLo != y.failedLo || x.failedHi != y.failedHi || len(x.leases) != len(y.leases) {
			return false
		}
		for k, l := range x.leases {
			if m, ok := y.leases[k]; !ok || m != l {
				return false
			}
		}
		return true
	},
	Hash: func(a any) uint64 {
		x := a.(linState)
		h := uint64(len(x.leases))
		for i := range 2 {
			h = h*1000003 + uint64(x.kv[i])*31 + uint64(x.slots[i])
		}
		return h*65537 + uint64(x.breakers)
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		switch in.kind {
		case "acquire":
			if out.engine < 0 {
				return fmt.Sprintf("acquire(%v kv=%d slots=%d) -> %s", in.cands, in.kv, in.slots, out.reason)
			}
			return fmt.Sprintf("acquire(%v kv=%d slots=%d) -> %s on x%d", in.cands, in.kv, in.slots, out.id, out.engine+1)
		case "grow":
			return fmt.Sprintf("grow(%s to %d) -> kv=%d overgrown=%v", in.id, in.kv, out.grownKV, out.over)
		case "release":
			return fmt.Sprintf("release(%s, %q) -> %v", in.id, in.outcome, out.released)
		}
		return fmt.Sprintf("stats() -> kv=%v slots=%v", out.kv, out.slots)
	},
	DescribeState: func(state any) string {
		s := state.(linState)
		ids := make([]string, 0, len(s.leases))
		for id, l := range s.leases {
			over := ""
			if l.overgrown {
				over = "!"
			}
			ids = append(ids, fmt.Sprintf("%s:x%d:%d%s", id, l.engine+1, l.kv, over))
		}
		sort.Strings(ids)
		var bs []string
		s.breakers.each(func(x1, x2 int) { bs = append(bs, fmt.Sprintf("%d/%d", x1, x2)) })
		return fmt.Sprintf("kv=%v slots=%v breakers=[%s] (failures counted, %d open) failed in %v..%v leases=[%s]", s.kv, s.slots,
			strings.Join(bs, " "), linOpen, s.failedLo, s.failedHi, strings.Join(ids, " "))
	},
}

// linHeld is a lease as the client holding it knows it.
type linHeld struct {
	id     ledger.LeaseID
	engine int
	kv     int64
}

func sortedPools(m map[ledger.PoolID][]porcupine.Operation) []ledger.PoolID {
	var ps []ledger.PoolID
	for p := range m {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	return ps
}

func (s *suite) testLinearizability(t *testing.T) {
	l := s.open(t, noWindow)
	ctx := t.Context()
	pools := []ledger.PoolID{"la", "lb"}
	for _, p := range pools {
		spec := poolSpec(p, linEngines...)
		spec.Reserve, spec.GrowthHeadroom, spec.Breaker = ledger.ReserveElastic, linHeadroom, linBreaker(p)
		if _, err := l.Configure(ctx, spec); err != nil {
			t.Fatalf("Configure(%s) error = %v", p, err)
		}
		for c := range linClients {
			if _, err := l.KeepAlive(ctx, p, ledger.HolderID(fmt.Sprintf("lc%d", c)), longTTL); err != nil {
				t.Fatalf("KeepAlive error = %v", err)
			}
		}
	}
	start := time.Now()
	stamp := func() int64 { return int64(time.Since(start)) }
	var (
		mu      sync.Mutex // guards history and errs
		history []porcupine.Operation
		errs    []string
		wg      sync.WaitGroup
	)
	for c := range linClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			holder := ledger.HolderID(fmt.Sprintf("lc%d", c))
			held := map[ledger.PoolID][]linHeld{}
			record := func(in linInput, call int64, out linOutput) {
				ret := stamp()
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
			failed := func(format string, args ...any) {
				mu.Lock()
				errs = append(errs, fmt.Sprintf(format, args...))
				mu.Unlock()
			}
			for op := range linOps {
				p := pools[rng.IntN(len(pools))]
				switch x := rng.IntN(100); {
				case x < 10:
					in := linInput{pool: p, kind: "stats"}
					call := stamp()
					st, _, err := retry(&s.backendFailures, func() (ledger.PoolStats, error) { return l.Stats(ctx, p) })
					if err != nil {
						failed("Stats(%s) error = %v", p, err)
						return
					}
					var out linOutput
					for i, e := range linEngines {
						es, _ := engineStats(st, e.ID)
						out.kv[i], out.slots[i] = es.ReservedKV, es.ReservedSlots
					}
					record(in, call, out)
				case x < 30 && len(held[p]) > 0:
					h := &held[p][rng.IntN(len(held[p]))]
					kv := min(h.kv+50+rng.Int64N(250), linEngines[h.engine].KVTokens)
					in := linInput{pool: p, kind: "grow", id: h.id, kv: kv}
					call := stamp()
					r, _, err := retry(&s.backendFailures, func() (ledger.Renewal, error) {
						return l.Grow(ctx, ledger.LeaseRef{Pool: p, ID: h.id, Holder: holder}, kv)
					})
					if err != nil {
						failed("Grow(%s from %d to %d) error = %v, want never refused", h.id, h.kv, kv, err)
						return
					}
					h.kv = kv
					record(in, call, linOutput{grownKV: r.Lease.KVTokens, over: r.Lease.Overgrown})
				case x < 70 && len(held[p]) > 0:
					i := rng.IntN(len(held[p]))
					id := held[p][i].id
					held[p] = append(held[p][:i], held[p][i+1:]...)
					in := linInput{pool: p, kind: "release", id: id,
						outcome: []ledger.Outcome{ledger.OutcomeOK, ledger.OutcomeOK, ledger.OutcomeNone, ledger.OutcomeConnect, ledger.OutcomeStatus5xx}[rng.IntN(5)]}
					call := stamp()
					rel, unknown, err := retry(&s.backendFailures, func() (ledger.Released, error) {
						return l.Release(ctx, ledger.LeaseRef{Pool: p, ID: id, Holder: holder}, ledger.Usage{Outcome: in.outcome})
					})
					if err != nil {
						failed("Release(%s) error = %v", id, err)
						return
					}
					// Only this client releases its lease: after an attempt
					// of unknown outcome, "already gone" means that attempt
					// released it.
					record(in, call, linOutput{released: rel.Released || unknown})
				default:
					in := linInput{pool: p, kind: "acquire", kv: 100 + rng.Int64N(401), slots: 1}
					cands := rng.Perm(len(linEngines))[:1+rng.IntN(len(linEngines))]
					in.cands = cands
					names := make([]ledger.EngineID, len(cands))
					for i, e := range cands {
						names[i] = linEngines[e].ID
					}
					r := ledger.AcquireRequest{
						Pool: p, Candidates: names, Tenant: tenantAll, Priority: prioStd, KVTokens: in.kv, Slots: in.slots,
						Holder: holder, RequestID: ledger.RequestID(fmt.Sprintf("lin-%d-%d", c, op)), TTL: longTTL,
					}
					call := stamp()
					g, _, err := retry(&s.backendFailures, func() (ledger.Grant, error) { return l.Acquire(ctx, r) })
					out := linOutput{engine: -1}
					switch rej := ledger.AsRejection(err); {
					case err == nil:
						out.id, out.created = g.Lease.ID, g.Lease.Created.UnixMilli()
						for i, e := range linEngines {
							if e.ID == g.Lease.Engine {
								out.engine = i
							}
						}
						held[p] = append(held[p], linHeld{id: g.Lease.ID, engine: out.engine, kv: g.Lease.KVTokens})
					case rej != nil:
						out.reason = rej.Reason
					default:
						failed("Acquire(%s) error = %v", describe(r), err)
						return
					}
					record(in, call, out)
				}
			}
		}()
	}
	wg.Wait()
	for _, e := range errs {
		t.Error(e)
	}
	if t.Failed() {
		return
	}
	kinds := map[string]int{}
	for _, op := range history {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		kinds[in.kind]++
		switch {
		case in.kind == "grow" && out.over:
			kinds["overgrown"]++
		case in.kind == "acquire" && out.engine < 0:
			kinds["rejected"]++
			kinds["rejected:"+string(out.reason)]++
		}
	}
	if kinds["grow"] == 0 || kinds["rejected"] == 0 {
		t.Errorf("history has %d grows and %d rejections, want both: the workload must grow and contend", kinds["grow"], kinds["rejected"])
	}
	res, info := porcupine.CheckOperationsVerbose(linModel, history, 20*time.Second)
	switch res {
	case porcupine.Ok:
		t.Logf("history of %d operations is linearizable (%v)", len(history), kinds)
	case porcupine.Illegal:
		msg := "see the porcupine visualization"
		if fh, err := os.CreateTemp("", "ledgertest-lin-*.html"); err == nil {
			if err := porcupine.Visualize(linModel, info, fh); err == nil {
				msg = "visualization written to " + fh.Name()
			}
			_ = fh.Close()
		}
		t.Errorf("history of %d operations is not linearizable against first-fit admission (%s)", len(history), msg)
	default:
		t.Errorf("linearizability check of %d operations inconclusive after 20s (result %s), want Ok", len(history), res)
	}
}
