package failover

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

func TestFirstByte(t *testing.T) {
	const bound = 2 * time.Second
	tests := []struct {
		name      string
		d         time.Duration
		advance   time.Duration // before stop
		wantFired bool
	}{
		{"headers in time", bound, bound - time.Millisecond, false},
		{"bound passed", bound, bound, true},
		{"no bound", 0, time.Hour, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := clockwork.NewFakeClock()
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			stop := FirstByte(clock, tc.d, cancel)
			clock.Advance(tc.advance)
			if tc.wantFired {
				<-ctx.Done() // the timer's function runs on its own goroutine
			}
			if got := stop(); got != tc.wantFired {
				t.Errorf("stop() = %v, want %v", got, tc.wantFired)
			}
			clock.Advance(time.Hour) // a stopped bound never cancels
			switch cause := context.Cause(ctx); {
			case tc.wantFired && !errors.Is(cause, ErrFirstByteTimeout):
				t.Errorf("cause %v, want ErrFirstByteTimeout", cause)
			case !tc.wantFired && ctx.Err() != nil:
				t.Errorf("cancelled (%v) though the headers came in time", cause)
			}
		})
	}
}
