package fleetapply

import (
	"math/rand/v2"
	"time"
)

// Start runs the loop of rounds in a goroutine until Stop: every Recheck
// after a round where every pool succeeded, after a jittered exponential
// backoff after a failed one, and at once on Kick or Reapply. It does not
// wait for the ledger.
func (a *Applier) Start() {
	a.started.Store(true)
	go a.loop()
}

// Stop ends the loop, aborting its calls in flight, and waits for it;
// idempotent, and safe without Start.
func (a *Applier) Stop() {
	a.stopOnce.Do(func() {
		close(a.stopC)
		a.cancel()
		if !a.started.Load() {
			close(a.doneC)
		}
	})
	<-a.doneC
}

// Kick asks for a round now.
func (a *Applier) Kick() {
	select {
	case a.kickC <- struct{}{}:
	default:
	}
}

// Reapply asks for a round that configures every pool again: the ledger
// refused a candidate or the pool, so its configuration changed without a
// new epoch.
func (a *Applier) Reapply() {
	a.forceNext.Store(true)
	a.Kick()
}

func (a *Applier) loop() {
	defer close(a.doneC)
	failures := 0
	warnAt := a.cfg.Clock.Now().Add(a.cfg.ReadyTimeout)
	for {
		failed := a.ApplyAll(a.ctx, a.forceNext.Swap(false))
		if failed && !warnAt.IsZero() && a.cfg.Clock.Now().After(warnAt) && !a.Configured() {
			a.log.Error("pools still not configured after --ready-timeout; serving unready and retrying", "waited", a.cfg.ReadyTimeout)
			warnAt = time.Time{}
		}
		wait := a.cfg.Recheck
		if failed {
			wait = min(a.cfg.BackoffMin<<min(failures, 16), a.cfg.BackoffMax)
			wait = time.Duration(float64(wait) * (0.8 + 0.4*rand.Float64()))
			failures++
		} else {
			failures = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-a.stopC:
			t.Stop()
			return
		case <-a.kickC:
			t.Stop()
		case <-t.C:
		}
	}
}

// Kicked receives after Kick or Reapply, for a caller that schedules
// rounds itself (calls ApplyAll) instead of Start. Reapply's force applies
// only to the loop of Start.
func (a *Applier) Kicked() <-chan struct{} { return a.kickC }
