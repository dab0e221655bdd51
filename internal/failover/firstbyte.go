package failover

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// ErrFirstByteTimeout is the cause FirstByte cancels a dispatch with.
var ErrFirstByteTimeout = errors.New("failover: no response byte within the first-byte timeout")

// FirstByte cancels with ErrFirstByteTimeout when d passes on clock before
// the returned stop is called; d <= 0 sets no bound. stop reports whether
// the bound passed first: then the dispatch was cancelled, even if its
// headers arrived meanwhile, and counts as timed out. After stop returns
// the bound never cancels.
func FirstByte(clock clockwork.Clock, d time.Duration, cancel context.CancelCauseFunc) (stop func() (fired bool)) {
	if d <= 0 {
		return func() bool { return false }
	}
	var (
		mu             sync.Mutex // guards stopped and fired
		stopped, fired bool
	)
	t := clock.AfterFunc(d, func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			fired = true
			cancel(ErrFirstByteTimeout)
		}
	})
	return func() bool {
		t.Stop()
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		return fired
	}
}
