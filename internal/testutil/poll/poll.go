// Package poll is how tests wait: Eventually polls a condition until it
// holds or a deadline passes, and Every runs a check on a period in its own
// goroutine until the test stops it.
package poll

import (
	"time"
)

// interval is how often Eventually polls.
const interval = 5 * time.Millisecond

// TB is the part of testing.TB that Eventually uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Eventually fails t unless cond holds within d, polling it every 5ms. what
// names the condition in the failure.
func Eventually(t TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(interval)
	}
}

// Every calls check every period from a goroutine it owns, until the
// returned stop is called; stop waits for the goroutine (and a check in
// progress) to return and may be called more than once. check reports
// through the test (t.Errorf, not t.Fatal: it runs outside the test's
// goroutine).
func Every(period time.Duration, check func()) (stop func()) {
	stopC, doneC := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(doneC)
		for {
			select {
			case <-stopC:
				return
			case <-time.After(period):
			}
			check()
		}
	}()
	var stopped bool
	return func() {
		if !stopped {
			stopped = true
			close(stopC)
		}
		<-doneC
	}
}
