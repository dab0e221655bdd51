package estimate

import (
	"maps"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// releases adds n releases of length tokens by tenant to counters, as the
// ledger counts them.
func releases(counters map[string]int64, tenant ledger.TenantID, tokens int64, n int) map[string]int64 {
	c := map[string]int64{}
	maps.Copy(c, counters)
	for range n {
		for _, name := range ledger.CompletionCounters(ledger.Usage{CompletionTokens: tokens, Finished: true}, tenant) {
			c[name]++
		}
		c[ledger.CounterReleases]++
	}
	return c
}

func TestLearnedColdThenWarm(t *testing.T) {
	l := NewLearned(0.9, time.Minute, 20)
	now := time.Unix(1000, 0)
	if _, ok := l.Expected("a"); ok {
		t.Fatal("a new estimate is warm")
	}
	cold := NewLearned(0.9, time.Minute, 20)
	c := releases(nil, "a", 50, ColdSamples-1)
	cold.Update(now, c)
	if _, ok := cold.Expected("a"); ok {
		t.Fatalf("an estimate from %d releases, want the worst case until %d", ColdSamples-1, ColdSamples)
	}
	c = releases(releases(c, "a", 30, 2), "b", 90, 1)
	cold.Update(now.Add(time.Second), c)
	if got, ok := cold.Expected("a"); !ok || got != ledger.CompletionBucket(90) {
		t.Fatalf("cold pool with %d releases = %d, %v; want the longest so far, %d", ColdSamples+2, got, ok, ledger.CompletionBucket(90))
	}
	c = releases(nil, "a", 50, 10)
	l.Update(now, c)
	if got, ok := l.Expected("a"); !ok || got != ledger.CompletionBucket(50) {
		t.Fatalf("10 releases = %d, %v; want the cold pool's longest, %d", got, ok, ledger.CompletionBucket(50))
	}
	c = releases(c, "b", 500, 15) // pool: 25 releases, 60% at 500
	l.Update(now.Add(time.Second), c)
	got, ok := l.Expected("a")
	if !ok || got != ledger.CompletionBucket(500) {
		t.Errorf("tenant a (10 of its own) = %d, %v; want the pool's p90 %d", got, ok, ledger.CompletionBucket(500))
	}
	c = releases(c, "a", 50, 15) // a: 25 of its own, all at 50
	l.Update(now.Add(2*time.Second), c)
	if got, _ := l.Expected("a"); got != ledger.CompletionBucket(50) {
		t.Errorf("tenant a with 25 of its own = %d, want its p90 %d", got, ledger.CompletionBucket(50))
	}
	if got, _ := l.Expected("nobody"); got != ledger.CompletionBucket(500) {
		t.Errorf("tenant without samples = %d, want the pool's %d", got, ledger.CompletionBucket(500))
	}
	if tokens, samples := l.Pool(); tokens != ledger.CompletionBucket(500) || samples != 30 { // the window: since the first read
		t.Errorf("Pool() = %d from %d, want %d from 30", tokens, samples, ledger.CompletionBucket(500))
	}
}

func TestLearnedFollowsTheWindow(t *testing.T) {
	l := NewLearned(0.5, time.Minute, 20)
	now := time.Unix(1000, 0)
	c := releases(nil, "t", 1000, 100) // long answers, long ago
	l.Update(now, c)
	if got, _ := l.Expected("t"); got != ledger.CompletionBucket(1000) {
		t.Fatalf("median = %d, want %d", got, ledger.CompletionBucket(1000))
	}
	// A minute later the workload changed: short answers only.
	now = now.Add(61 * time.Second)
	c = releases(c, "t", 20, 30)
	l.Update(now, c)
	if got, _ := l.Expected("t"); got != ledger.CompletionBucket(20) {
		t.Errorf("after the change, median = %d, want the window's %d", got, ledger.CompletionBucket(20))
	}
	// A thin window (under 20) falls back to everything counted.
	l2 := NewLearned(0.5, time.Minute, 20)
	l2.Update(time.Unix(0, 0), releases(nil, "t", 1000, 100))
	l2.Update(time.Unix(61, 0), releases(releases(nil, "t", 1000, 100), "t", 20, 5))
	if got, _ := l2.Expected("t"); got != ledger.CompletionBucket(1000) {
		t.Errorf("thin window: median = %d, want the whole history's %d", got, ledger.CompletionBucket(1000))
	}
}

func TestLearnedRestartsWithTheLedger(t *testing.T) {
	l := NewLearned(0.5, time.Minute, 20)
	l.Update(time.Unix(0, 0), releases(nil, "t", 1000, 100))
	// The ledger lost the pool: counters start again from zero.
	l.Update(time.Unix(1, 0), releases(nil, "t", 30, 5))
	if _, ok := l.Expected("t"); ok {
		t.Error("warm from a lost epoch's counters, want cold")
	}
	l.Update(time.Unix(2, 0), releases(releases(nil, "t", 30, 5), "t", 30, 20))
	if got, ok := l.Expected("t"); !ok || got != max(ledger.CompletionBucket(30), learnedFloor) {
		t.Errorf("after 25 new releases = %d, %v; want %d", got, ok, max(ledger.CompletionBucket(30), learnedFloor))
	}
}
