package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
)

// AfterDone runs its function once Done closes, seeing Err set; a stopped
// one is unregistered (stop true) and a fired one reports false; on a
// ticket already done it runs at once. Both kinds of ticket.
func TestAfterDone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fx *fixture) {
		m := newManager(t, fx.blockConfig(t))
		for _, tc := range []struct {
			name   string
			ticket func(t *testing.T) lease.DoneFunc
		}{
			{"held", func(t *testing.T) lease.DoneFunc { return acquire(t, m, 10) }},
			{"sub", func(t *testing.T) lease.DoneFunc { return subOf(t, m, request(10)) }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tk := tc.ticket(t)
				ran := make(chan error, 3)
				stopFired := tk.AfterDone(func() { ran <- tk.Err() })
				stopStopped := tk.AfterDone(func() { ran <- errors.New("a stopped AfterDone function ran") })
				if !stopStopped() {
					t.Fatalf("stop of a registered function = false, want true")
				}
				if err := tk.Release(ledger.Usage{}); err != nil {
					t.Fatalf("Release: %v", err)
				}
				select {
				case err := <-ran:
					if !errors.Is(err, lease.ErrReleased) {
						t.Errorf("Err seen by the AfterDone function = %v, want ErrReleased", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("AfterDone function did not run within 5s of Release")
				}
				if stopFired() {
					t.Errorf("stop of a function already started = true, want false")
				}
				_ = tk.AfterDone(func() { ran <- nil })
				select {
				case err := <-ran:
					if err != nil {
						t.Errorf("AfterDone on a done ticket: %v", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("AfterDone on a done ticket did not run within 5s")
				}
			})
		}
	})
}
