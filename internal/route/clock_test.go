package route

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// The offset clock shifts Now by the offset and nothing else: the
// difference of two readings, Since, Until and timers are the base
// clock's.
func TestOffsetClockShiftsNowNotDurations(t *testing.T) {
	for _, off := range []time.Duration{30 * time.Second, -30 * time.Second} {
		base := clockwork.NewFakeClockAt(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
		c := OffsetClock(base, off)
		t0 := c.Now()
		if got := t0.Sub(base.Now()); got != off {
			t.Errorf("offset %s: Now - base Now = %s", off, got)
		}
		base.Advance(1500 * time.Millisecond)
		if got := c.Since(t0); got != 1500*time.Millisecond {
			t.Errorf("offset %s: Since = %s, want 1.5s", off, got)
		}
		if got := c.Now().Sub(t0); got != 1500*time.Millisecond {
			t.Errorf("offset %s: reading difference = %s, want 1.5s", off, got)
		}
		if got := c.Until(t0.Add(2 * time.Second)); got != 500*time.Millisecond {
			t.Errorf("offset %s: Until = %s, want 500ms", off, got)
		}
		tm := c.NewTimer(time.Second)
		base.Advance(time.Second)
		select {
		case <-tm.Chan():
		default:
			t.Errorf("offset %s: a 1s timer did not fire after 1s", off)
		}
	}

	// On the real clock the monotonic reading is kept: intervals measured
	// with the skewed clock are real intervals.
	c := OffsetClock(clockwork.NewRealClock(), -30*time.Second)
	t0 := c.Now()
	if !strings.Contains(t0.String(), "m=") {
		t.Errorf("skewed reading %s lost its monotonic clock", t0)
	}
	if skew := time.Since(t0); skew < 29*time.Second || skew > 31*time.Second {
		t.Errorf("real now - skewed now = %s, want ~30s", skew)
	}
	time.Sleep(20 * time.Millisecond)
	if d := c.Since(t0); d < 20*time.Millisecond || d > 5*time.Second {
		t.Errorf("Since after 20ms = %s", d)
	}
	if OffsetClock(clockwork.NewRealClock(), 0) == c {
		t.Error("zero offset should return the base clock")
	}
}

func TestClockOffsetFlagAndEnv(t *testing.T) {
	base := []string{"--config", "f.yaml", "--ledger", "grpc://reserver:7400", "--id", "r"}
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	c, err := ParseFlags(base, env(nil), io.Discard)
	if err != nil || c.ClockOffset != 0 {
		t.Fatalf("default: %s, %v; want 0", c.ClockOffset, err)
	}
	c, err = ParseFlags(base, env(map[string]string{"LEASEHOLD_CLOCK_OFFSET": "-30s"}), io.Discard)
	if err != nil || c.ClockOffset != -30*time.Second {
		t.Fatalf("env -30s: %s, %v", c.ClockOffset, err)
	}
	c, err = ParseFlags(append(base, "--clock-offset=+30s"), env(map[string]string{"LEASEHOLD_CLOCK_OFFSET": "-30s"}), io.Discard)
	if err != nil || c.ClockOffset != 30*time.Second {
		t.Fatalf("flag +30s over env: %s, %v", c.ClockOffset, err)
	}
	if _, err := ParseFlags(append(base, "--clock-offset=25h"), env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "--clock-offset") {
		t.Errorf("25h: err %v, want one naming --clock-offset", err)
	}
}
