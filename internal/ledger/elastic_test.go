package ledger

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCompletionBucket(t *testing.T) {
	for _, c := range []struct{ n, want int64 }{
		{-3, 1}, {0, 1}, {1, 1}, {2, 2}, {3, 3}, {4, 4}, {7, 7}, {8, 9}, {9, 9}, {10, 11},
		{15, 15}, {16, 19}, {19, 19}, {20, 23}, {100, 111}, {1000, 1023}, {1024, 1279}, {MaxAmount, MaxAmount + MaxAmount/4 - 1},
	} {
		if got := CompletionBucket(c.n); got != c.want {
			t.Errorf("CompletionBucket(%d) = %d, want %d", c.n, got, c.want)
		}
	}
	// Every length is at most its bound, the bound less than 25% above it,
	// and the buckets are contiguous: the next length past a bound starts
	// a new bucket.
	for n := int64(1); n < 5000; n++ {
		b := CompletionBucket(n)
		if b < n || (n >= 4 && float64(b) >= 1.25*float64(n)) {
			t.Fatalf("CompletionBucket(%d) = %d, want in [n, 1.25n)", n, b)
		}
		if CompletionBucket(b) != b || CompletionBucket(b+1) <= b {
			t.Fatalf("bucket of %d (bound %d) is not closed at its bound", n, b)
		}
	}
}

func TestCompletionHistogram(t *testing.T) {
	counters := map[string]int64{CounterGrants: 9}
	add := func(n int64, tenant TenantID, times int) {
		for range times {
			for _, c := range CompletionCounters(Usage{CompletionTokens: n, Finished: true}, tenant) {
				counters[c]++
			}
		}
	}
	add(10, "a", 50)  // bucket 11
	add(100, "a", 40) // bucket 111
	add(1000, "b", 10)
	pool := CompletionHistogram(counters, "")
	if pool.Total != 100 {
		t.Fatalf("pool total = %d, want 100", pool.Total)
	}
	for _, c := range []struct {
		q    float64
		want int64
	}{{0.01, 11}, {0.5, 11}, {0.51, 111}, {0.9, 111}, {0.91, 1023}, {1, 1023}} {
		if got := pool.Quantile(c.q); got != c.want {
			t.Errorf("pool quantile %v = %d, want %d", c.q, got, c.want)
		}
	}
	a := CompletionHistogram(counters, "a")
	if a.Total != 90 || a.Quantile(0.99) != 111 {
		t.Errorf("tenant a = %d releases, p99 %d; want 90, 111", a.Total, a.Quantile(0.99))
	}
	if h := CompletionHistogram(counters, "nobody"); h.Total != 0 || h.Quantile(0.5) != 0 {
		t.Errorf("unknown tenant = %+v, want empty with quantile 0", h)
	}
	before := CompletionHistogram(counters, "")
	add(1000, "b", 30)
	w := CompletionHistogram(counters, "").Sub(before)
	if w.Total != 30 || w.Quantile(0.5) != 1023 {
		t.Errorf("window = %d releases, median %d; want 30, 1023", w.Total, w.Quantile(0.5))
	}
}

func elasticEngine(capKV int64, reservedKV int64) EngineState {
	return EngineState{Spec: EngineSpec{ID: "e1", KVTokens: capKV, Slots: 8}, ReservedKV: reservedKV}
}

func TestGrowthOf(t *testing.T) {
	tenant := TenantSpec{Name: "t", KVShare: 0.5}
	a := Admission{Now: time.Unix(100, 0), CapacityKV: 1000, CapacitySlots: 8, Tenant: tenant, MaxFill: 1}
	lease := Lease{ID: "1-1", Pool: "p", Engine: "e1", Tenant: "t", KVTokens: 100, Slots: 1}

	a.TenantKV = 100
	g, err := GrowthOf(ReserveElastic, a, elasticEngine(1000, 100), lease, 300)
	if err != nil || g != (Growth{Delta: 200}) {
		t.Fatalf("growth within capacity = %+v, %v; want delta 200, not overgrown", g, err)
	}
	if g, err := GrowthOf(ReserveElastic, a, elasticEngine(1000, 100), lease, 100); err != nil || g != (Growth{}) {
		t.Errorf("growth to the same size = %+v, %v; want a no-op", g, err)
	}
	// Past the tenant's quota (500) but within the engine: recorded, flagged.
	if g, err := GrowthOf(ReserveElastic, a, elasticEngine(1000, 100), lease, 600); err != nil || !g.Overgrown || !g.Passed || g.Delta != 500 {
		t.Errorf("growth past the tenant quota = %+v, %v; want delta 500, passed, overgrown", g, err)
	}
	// Past the engine's capacity: recorded, flagged, even in recovery,
	// draining and with stale telemetry under block.
	busy := elasticEngine(1000, 900)
	busy.Draining = true
	busy.Spec.StaleAfter, busy.Spec.StalePolicy = time.Second, StaleBlock
	a.RecoveringUntil = a.Now.Add(time.Minute)
	a.Tenant.KVShare = 1
	if g, err := GrowthOf(ReserveElastic, a, busy, lease, 250); err != nil || !g.Overgrown || !g.Passed || g.Delta != 150 {
		t.Errorf("growth past the engine = %+v, %v; want delta 150, passed, overgrown", g, err)
	}
	// The flag sticks.
	flagged := lease
	flagged.Overgrown = true
	if g, _ := GrowthOf(ReserveElastic, a, elasticEngine(1000, 100), flagged, 110); !g.Overgrown || g.Passed {
		t.Errorf("growth within limits of an overgrown lease = %+v, want the flag kept, not passed", g)
	}
	// The engine's own report bounds capacity.
	small := elasticEngine(1000, 200) // this lease and another of 100
	small.ReportedKV = 400
	if g, _ := GrowthOf(ReserveElastic, a, small, lease, 350); !g.Overgrown {
		t.Errorf("growth past the reported capacity (400) not flagged: %+v", g)
	}

	for _, c := range []struct {
		name string
		mode ReserveMode
		e    EngineState
		kv   int64
		want string
	}{
		{"worst_case pool", ReserveWorstCase, elasticEngine(1000, 100), 200, "worst_case"},
		{"shrink", ReserveElastic, elasticEngine(1000, 100), 99, "below the 100"},
		{"beyond the engine", ReserveElastic, elasticEngine(1000, 100), 1001, "more than engine e1 holds in all (1000)"},
		{"beyond the reported engine", ReserveElastic, small, 401, "(400)"},
	} {
		_, err := GrowthOf(c.mode, a, c.e, lease, c.kv)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument mentioning %q", c.name, err, c.want)
		}
	}
}

func TestAdmitHeadroomAndReportedCapacity(t *testing.T) {
	base := Admission{Now: time.Unix(100, 0), CapacityKV: 1000, CapacitySlots: 8,
		Tenant: TenantSpec{Name: "t", KVShare: 1}, MaxFill: 1, Slots: 1}
	for _, c := range []struct {
		name     string
		headroom float64
		reported int64
		reserved int64
		kv       int64
		want     Reason
	}{
		{"no headroom fills the engine", 0, 0, 900, 100, ""},
		{"headroom kept free", 0.1, 0, 850, 100, ReasonEngineKV},
		{"fits below headroom", 0.1, 0, 800, 100, ""},
		{"larger than capacity less headroom", 0.1, 0, 0, 901, ReasonTooLarge},
		{"reported capacity wins when smaller", 0, 500, 400, 101, ReasonEngineKV},
		{"reported capacity fits", 0, 500, 400, 100, ""},
		{"larger reported capacity is ignored", 0, 5000, 900, 101, ReasonEngineKV},
		{"headroom on the reported capacity", 0.2, 500, 300, 101, ReasonEngineKV},
	} {
		a := base
		a.GrowthHeadroom, a.KVTokens = c.headroom, c.kv
		e := elasticEngine(1000, c.reserved)
		e.ReportedKV = c.reported
		a.Candidates = []EngineState{e}
		_, rej := Admit(a)
		got := Reason("")
		if rej != nil {
			got = rej.Reason
		}
		if got != c.want {
			t.Errorf("%s: reason %q, want %q", c.name, got, c.want)
		}
	}
}

func TestValidatePoolSpecReserve(t *testing.T) {
	spec := func(mode ReserveMode, h float64) PoolSpec {
		return PoolSpec{Name: "p", Engines: []EngineSpec{{ID: "e", KVTokens: 10, Slots: 1}}, Reserve: mode, GrowthHeadroom: h}
	}
	for _, ok := range []PoolSpec{spec("", 0), spec(ReserveElastic, 0.1), spec(ReserveElastic, 0.5), spec(ReserveWorstCase, 0)} {
		if err := ValidatePoolSpec(ok); err != nil {
			t.Errorf("ValidatePoolSpec(%s, %v) = %v", ok.Reserve, ok.GrowthHeadroom, err)
		}
	}
	for _, c := range []struct {
		s    PoolSpec
		want string
	}{
		{spec("optimistic", 0), `reserve = "optimistic", want elastic or worst_case`},
		{spec(ReserveElastic, 0.6), "growth_headroom = 0.6, want [0, 0.5]"},
		{spec(ReserveElastic, -0.1), "growth_headroom = -0.1"},
		{spec(ReserveWorstCase, 0.1), "worst_case pool reserves every output token up front"},
	} {
		err := ValidatePoolSpec(c.s)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ValidatePoolSpec(%s, %v) = %v, want %q", c.s.Reserve, c.s.GrowthHeadroom, err, c.want)
		}
	}
	if (PoolSpec{}).Mode() != ReserveElastic || spec(ReserveWorstCase, 0).Mode() != ReserveWorstCase {
		t.Error("Mode() default is not elastic")
	}
}
