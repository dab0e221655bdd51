package route

import (
	"io"
	"strings"
	"testing"
	"time"
)

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
