package poll_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testutil/poll"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeT records a Fatalf instead of ending the test.
type fakeT struct{ failed string }

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	panic(f)
}

func TestEventually(t *testing.T) {
	var n atomic.Int64
	poll.Eventually(t, time.Second, "third poll", func() bool { return n.Add(1) >= 3 })
	if got := n.Load(); got != 3 {
		t.Errorf("cond called %d times, want 3", got)
	}

	f := &fakeT{}
	func() {
		defer func() {
			if r := recover(); r != nil && r != f {
				panic(r)
			}
		}()
		poll.Eventually(f, 20*time.Millisecond, "never", func() bool { return false })
	}()
	if want := "never: not within 20ms"; f.failed != want {
		t.Errorf("failure = %q, want %q", f.failed, want)
	}
}

func TestEvery(t *testing.T) {
	var n atomic.Int64
	stop := poll.Every(time.Millisecond, func() { n.Add(1) })
	poll.Eventually(t, time.Second, "three checks", func() bool { return n.Load() >= 3 })
	stop()
	after := n.Load()
	time.Sleep(10 * time.Millisecond)
	if got := n.Load(); got != after {
		t.Errorf("checks after stop: %d, want none", got-after)
	}
	stop() // a second stop returns at once
}
