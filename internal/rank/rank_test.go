package rank

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/enginehealth"
	"github.com/leasehold/leasehold/internal/ledger"
)

func order(views []View, o Options) []ledger.EngineID {
	ids, _ := Order(views, o)
	return ids
}

func TestFreeCapacityAndAffinity(t *testing.T) {
	views := []View{
		{ID: "a", CapKV: 100, CapSlots: 10, UsedKV: 90},
		{ID: "b", CapKV: 100, CapSlots: 10, UsedKV: 10},
		{ID: "c", CapKV: 100, CapSlots: 10, UsedKV: 50, UsedSlots: 9},
	}
	o := Options{AffinityBonus: 0.15}
	if got := order(views, o); got[0] != "b" || got[2] == "b" {
		t.Errorf("rank without affinity %v, want b first", got)
	}
	// Equal free capacity: the same prefix always prefers the same engine,
	// and different prefixes spread.
	even := []View{{ID: "a", CapKV: 1, CapSlots: 1}, {ID: "b", CapKV: 1, CapSlots: 1}, {ID: "c", CapKV: 1, CapSlots: 1}}
	firsts := map[ledger.EngineID]int{}
	for i := range 60 {
		o.Prefix = []byte(strings.Repeat("x", i))
		first := order(even, o)[0]
		if again := order(even, o)[0]; again != first {
			t.Fatalf("prefix %d: %s then %s", i, first, again)
		}
		firsts[first]++
	}
	if len(firsts) != 3 {
		t.Errorf("affinity over 60 prefixes picked %v, want all three engines", firsts)
	}
	// The bonus does not outweigh a large difference in free capacity.
	for i := range 20 {
		o.Prefix = []byte{byte(i)}
		if got := order(views, o); got[0] != "b" {
			t.Errorf("prefix %d: %v, want b (80%% free) before a 10%%-free preferred engine", i, got)
		}
	}
}

// Health comes before capacity: an open or draining engine is no
// candidate, a half-open one goes first (the ledger grants it only its
// probes and passes over it once they are out), and one this router saw
// fail ranks after every healthy one however empty it looks.
func TestHealthTiers(t *testing.T) {
	empty := func(id ledger.EngineID, h enginehealth.Health) View {
		return View{ID: id, CapKV: 100, CapSlots: 10, Health: h}
	}
	busy := func(id ledger.EngineID, h ...enginehealth.Health) View {
		v := View{ID: id, CapKV: 100, CapSlots: 10, UsedKV: 95, UsedSlots: 9}
		if len(h) > 0 {
			v.Health = h[0]
		}
		return v
	}
	for _, tc := range []struct {
		name   string
		views  []View
		want   string
		reason ledger.Reason
	}{
		{"a failing engine that looks empty is not first",
			[]View{empty("crashed", enginehealth.Health{Demoted: true}), busy("ok")}, "ok,crashed", ""},
		{"open breaker: no candidate",
			[]View{empty("open", enginehealth.Health{Breaker: ledger.BreakerOpen}), busy("ok")}, "ok", ""},
		{"draining: no candidate",
			[]View{empty("drained", enginehealth.Health{Draining: true}), busy("ok")}, "ok", ""},
		{"half-open first (the ledger bounds its probes), demoted last",
			[]View{busy("ok"), empty("failing", enginehealth.Health{Demoted: true}), busy("probe", enginehealth.Health{Breaker: ledger.BreakerHalfOpen})},
			"probe,ok,failing", ""},
		{"half-open and demoted by this router: still probed first",
			[]View{empty("ok", enginehealth.Health{}), busy("probe", enginehealth.Health{Breaker: ledger.BreakerHalfOpen, Demoted: true})},
			"probe,ok", ""},
		{"all open", []View{empty("x", enginehealth.Health{Breaker: ledger.BreakerOpen})}, "", ledger.ReasonBreakerOpen},
		{"all out, one draining", []View{empty("x", enginehealth.Health{Breaker: ledger.BreakerOpen}), empty("y", enginehealth.Health{Draining: true})}, "", ledger.ReasonDraining},
		{"no engines", nil, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 10 { // whatever the prefix
				ids, reason := Order(tc.views, Options{Prefix: []byte(fmt.Sprint(i)), AffinityBonus: 0.15})
				got := make([]string, len(ids))
				for j, id := range ids {
					got[j] = string(id)
				}
				if strings.Join(got, ",") != tc.want || reason != tc.reason {
					t.Fatalf("order %v, reason %q; want %s, %q", got, reason, tc.want, tc.reason)
				}
			}
		})
	}
}

// The estimated time to first token weighs against free capacity: a
// slightly fuller engine whose queue is short goes before an emptier one
// with a long queue; close estimates leave the order to capacity.
func TestTTFTWeighs(t *testing.T) {
	v := func(id ledger.EngineID, used int64, ttft time.Duration) View {
		return View{ID: id, CapKV: 100, CapSlots: 100, UsedKV: used, UsedSlots: used, TTFT: ttft}
	}
	for _, tc := range []struct {
		name  string
		views []View
		o     Options
		first ledger.EngineID
	}{
		{"long queue loses", []View{v("empty-queued", 10, 900*time.Millisecond), v("fuller-idle", 40, 200*time.Millisecond)}, Options{}, "fuller-idle"},
		{"close estimates: capacity", []View{v("emptier", 10, 120*time.Millisecond), v("fuller", 40, 100*time.Millisecond)}, Options{}, "emptier"},
		{"few ms apart: capacity", []View{v("emptier", 10, 6*time.Millisecond), v("fuller", 40, 2*time.Millisecond)}, Options{}, "emptier"},
		{"estimates ignored", []View{v("empty-queued", 10, 900*time.Millisecond), v("fuller-idle", 40, 200*time.Millisecond)}, Options{TTFTWeight: -1}, "empty-queued"},
		{"unknown estimates", []View{v("emptier", 10, 0), v("fuller", 40, 0)}, Options{}, "emptier"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := order(tc.views, tc.o); got[0] != tc.first {
				t.Errorf("order %v, want %s first", got, tc.first)
			}
		})
	}
}
