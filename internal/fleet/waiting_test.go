package fleet

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold/internal/ledger"
)

func TestUpdateWaiting(t *testing.T) {
	by := map[ledger.PoolID][]WaitingEngine{}
	a := WaitingEngine{ID: "a", Err: errors.New("a: no capacity yet")}
	b := WaitingEngine{ID: "b", Err: errors.New("b: no capacity yet")}
	steps := []struct {
		waiting []WaitingEngine
		changed bool
	}{
		{nil, false},                   // nothing waited, nothing waits
		{[]WaitingEngine{a, b}, true},  // two start waiting
		{[]WaitingEngine{a, b}, false}, // the same ids again
		{[]WaitingEngine{a}, true},     // b joined
		{nil, true},                    // the last one joined
	}
	for i, st := range steps {
		if got := UpdateWaiting(by, "p", st.waiting); got != st.changed {
			t.Errorf("step %d: changed = %v, want %v", i, got, st.changed)
		}
		if len(by["p"]) != len(st.waiting) {
			t.Errorf("step %d: recorded %v, want %v", i, by["p"], st.waiting)
		}
	}
	if _, ok := by["p"]; ok {
		t.Errorf("a pool with nothing waiting is still recorded")
	}
}
