// Package skewclock skews a clock's wall time for fault injection: the
// router's --clock-offset (internal/route) and the chaos clock_offset fault.
package skewclock

import (
	"time"

	"github.com/jonboulle/clockwork"
)

// Offset returns c with its wall clock skewed by offset: Now reads
// c.Now() + offset, as a router whose system clock is set wrong would.
// Go's monotonic reading is shifted by the same amount, so the difference
// of two readings (and Since, Until, timers and tickers) is exactly what it
// is on c: intervals, and so session fencing and renewal, are unaffected.
// Only readings of this clock compare correctly with each other; code that
// mixes them with time.Now() would see the offset, which is why every
// reading of the time and every timer in the router (route.Router.clock: request
// timing, the request path's waits for queue timeouts, retry hints and
// --abort-grace, the lease manager, the fleet applier and view, the local
// baseline's scrapes, and estimate.ContextLens) comes from one clock; a
// test drives them all with a clockwork.FakeClock. Deadlines that bound a
// network call (context timeouts: the upstream exchange, scrapes, fleet
// view polls, shutdown's releases) stay the context's own, on real time,
// so a stopped fake clock cannot hang I/O. A zero offset returns c itself.
//
// It exists for fault injection (--clock-offset, the chaos clock_offset
// fault): the ledger decides by its own clock, so a skewed router must
// behave exactly as an unskewed one.
func Offset(c clockwork.Clock, offset time.Duration) clockwork.Clock {
	if offset == 0 {
		return c
	}
	return offsetClock{Clock: c, off: offset}
}

type offsetClock struct {
	clockwork.Clock
	off time.Duration
}

func (c offsetClock) Now() time.Time                  { return c.Clock.Now().Add(c.off) }
func (c offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c offsetClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }
