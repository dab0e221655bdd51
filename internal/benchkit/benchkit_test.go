package benchkit

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	s := make([]time.Duration, 100)
	for i := range s {
		s[i] = time.Duration(i + 1)
	}
	for _, tc := range []struct {
		name string
		q    float64
		want time.Duration
	}{
		{"p50", 0.50, 50}, {"p99", 0.99, 99}, {"max", 1, 100}, {"min", 0, 1},
	} {
		if got := Quantile(s, tc.q); got != tc.want {
			t.Errorf("%s: Quantile(1..100, %v) = %v, want %v", tc.name, tc.q, got, tc.want)
		}
	}
	if got := Quantile(nil, 0.5); got != 0 {
		t.Errorf("Quantile(nil) = %v, want 0", got)
	}
}

func TestRunCountsOpsAndErrors(t *testing.T) {
	r := Run(context.Background(), "x", 4, 50*time.Millisecond, func(ctx context.Context, c, seq int) error {
		if seq%2 == 1 {
			return errors.New("odd")
		}
		return nil
	})
	if r.Ops == 0 || r.Callers != 4 {
		t.Fatalf("Run: ops=%d callers=%d, want ops>0 callers=4", r.Ops, r.Callers)
	}
	if r.Errors < r.Ops/2-4 || r.Errors > r.Ops/2+4 {
		t.Errorf("Run: errors=%d of %d ops, want about half", r.Errors, r.Ops)
	}
}

func TestRunStopsCallerOnErrStop(t *testing.T) {
	r := Run(context.Background(), "x", 3, 5*time.Second, func(ctx context.Context, c, seq int) error {
		if seq == 10 {
			return ErrStop
		}
		return nil
	})
	if r.Ops != 30 || r.Errors != 0 {
		t.Errorf("Run with ErrStop at seq 10: ops=%d errors=%d, want 30 and 0", r.Ops, r.Errors)
	}
	if r.Elapsed > 4*time.Second {
		t.Errorf("Run with ErrStop took %s, want it to end when every caller stopped", r.Elapsed)
	}
}
