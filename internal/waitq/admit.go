package waitq

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Outcomes passed to Config.OnLeave.
const (
	OutcomeGranted   = "granted"
	OutcomeRejected  = "rejected"
	OutcomeCancelled = "cancelled"
)

// Admit is one request's way through the queue under k. Each attempt
// calls plan (which may refuse, e.g. no candidate can meet the class's
// TTFT objective, and returns until, the latest time to plan again; zero:
// none), then try (one ledger call). The first attempt is made at once
// unless waiters of k's class or above are queued (Busy): then the request
// enters and waits for its turn. A refusal that Config.Waits accepts
// enters the queue (or, for a waiter, keeps its place: Missed) and the
// request tries again at its next turn, or at until. It returns nil once
// try succeeds (and passes the wake-up on: one release may make room for
// several); plan's or try's error when it is not a refusal that waits; a
// *FullError when a bound is reached; the latest refusal when
// Config.Timeout passes; ErrStopped when stopC closes; ctx's error when
// ctx ends. With Config.Timeout or Config.Depth 0 nothing waits: try's
// refusal is the answer (--queue-depth 0 rejects at once).
func (q *Queue) Admit(ctx context.Context, k Key, stopC <-chan struct{}, plan func() (until time.Time, err error), try func() error) error {
	var (
		w     *Waiter
		last  error // the latest refusal: the answer when the wait ends
		hint  time.Duration
		until time.Time
	)
	leave := func(outcome string) {
		if w != nil {
			d := q.Leave(w, outcome == OutcomeGranted)
			if q.cfg.OnLeave != nil {
				q.cfg.OnLeave(outcome, d)
			}
			w = nil
		}
	}
	enter := func(rej *ledger.Rejection) (err error) {
		if w, err = q.Enter(k, rej); err == nil && q.cfg.OnEnter != nil {
			q.cfg.OnEnter()
		}
		return err
	}
	waits := q.cfg.Timeout > 0 && q.cfg.Depth > 0
	for {
		if w != nil {
			if err := q.Await(ctx, w, hint, until, stopC); err != nil {
				outcome := OutcomeCancelled
				if errors.Is(err, ErrTimeout) {
					outcome, err = OutcomeRejected, cmp.Or(last, err)
				}
				leave(outcome)
				return err
			}
		}
		u, err := plan()
		until = u
		if err == nil && w == nil && waits && q.Busy(k.Rank) {
			if err := enter(nil); err != nil {
				return err
			}
			if rej := q.Last(); rej != nil { // set: the first waiter entered refused
				last, hint = rej, rej.RetryAfter
			}
			q.Notify() // a turn, maybe its own
			continue
		}
		if err == nil {
			err = try()
		}
		if err == nil {
			if w != nil {
				leave(OutcomeGranted)
				q.Notify()
			}
			return nil
		}
		rej := ledger.AsRejection(err)
		if rej == nil || !waits || (q.cfg.Waits != nil && !q.cfg.Waits(rej)) {
			leave(OutcomeRejected)
			return err
		}
		last, hint = err, rej.RetryAfter
		if w != nil {
			q.Missed(w, rej)
		} else if err := enter(rej); err != nil {
			return err
		}
	}
}
