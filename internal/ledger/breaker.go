package ledger

import (
	"fmt"
	"time"
)

// This file is the circuit breaker's rule in one place, as pure functions
// over an engine's breaker state, like Admit for admission. Every backend
// keeps the state beside the engine's drain flag and applies these
// functions inside its atomic step (scripts/lua implements the same rule;
// the conformance suite holds every backend to it).
//
// Evidence arrives with Release: the releasing holder says what its
// dispatch came to (Usage.Outcome). Release is idempotent per lease, so a
// retried release never counts twice (only a Release that releases the
// lease, Released=true, carries evidence), and any router's evidence moves
// the one breaker every router admits against.
//
//	closed    --Failures consecutive failures-->  open
//	open      --Cooldown passed (ledger clock)--> half_open (read lazily)
//	half_open --a probe fails-->                  open (cooldown again)
//	half_open --Successes probes succeed-->       closed
//
// An open engine takes no grant (ReasonBreakerOpen); a half-open one takes
// only probe leases (Lease.Probe), at most Probes outstanding fleet-wide.
// In half_open only probes' outcomes count; in open, outcomes of leases
// granted before it opened are ignored.
//
// While closed, a success resets the count of consecutive failures only
// when its lease was granted after the engine's latest counted failure
// (Lease.Created > Breaker.LastFailureAt, in whole milliseconds of the
// ledger clock): a stream granted before the engine started failing and
// finishing fine says nothing about the engine since, and resetting on it
// let an engine that fails every new request but still finishes its old
// streams keep its count at one. A lease granted in the same millisecond
// as the failure is taken as granted before it (no reset): the ledger
// cannot order the two, and erring that way only opens a failing engine
// sooner.

// BreakerSpec is a pool's circuit-breaker thresholds (fleet file
// pools[].breaker). The zero value takes the defaults; Failures < 0 turns
// the breaker off (every engine stays closed).
type BreakerSpec struct {
	// Failures is how many consecutive failed dispatches open an engine's
	// breaker (default 5).
	Failures int
	// Cooldown is how long an open breaker refuses grants before it lets
	// probes through (default 10s, ledger clock).
	Cooldown time.Duration
	// Probes bounds the probe leases outstanding on a half-open engine,
	// fleet-wide (default 1).
	Probes int
	// Successes is how many successful probes close it again (default 2).
	Successes int
}

// Breaker defaults.
const (
	DefaultBreakerFailures  = 5
	DefaultBreakerCooldown  = 10 * time.Second
	DefaultBreakerProbes    = 1
	DefaultBreakerSuccesses = 2
)

// WithDefaults returns s with zero fields set to their defaults.
func (s BreakerSpec) WithDefaults() BreakerSpec {
	if s.Failures == 0 {
		s.Failures = DefaultBreakerFailures
	}
	if s.Cooldown == 0 {
		s.Cooldown = DefaultBreakerCooldown
	}
	if s.Probes == 0 {
		s.Probes = DefaultBreakerProbes
	}
	if s.Successes == 0 {
		s.Successes = DefaultBreakerSuccesses
	}
	return s
}

// Off reports whether the breaker is turned off.
func (s BreakerSpec) Off() bool { return s.Failures < 0 }

// Validate checks s (defaults not yet applied).
func (s BreakerSpec) Validate() error {
	switch {
	case s.Cooldown < 0:
		return fmt.Errorf("%w: breaker cooldown = %s, want >= 0", ErrInvalidArgument, s.Cooldown)
	case s.Probes < 0:
		return fmt.Errorf("%w: breaker probes = %d, want >= 0", ErrInvalidArgument, s.Probes)
	case s.Successes < 0:
		return fmt.Errorf("%w: breaker successes = %d, want >= 0", ErrInvalidArgument, s.Successes)
	}
	return nil
}

// BreakerState is a breaker's position.
type BreakerState string

// Breaker states. The zero value is closed.
const (
	BreakerClosed   BreakerState = ""
	BreakerOpen     BreakerState = "open"
	BreakerHalfOpen BreakerState = "half_open"
)

// String returns "closed" for the zero state.
func (s BreakerState) String() string {
	if s == BreakerClosed {
		return "closed"
	}
	return string(s)
}

// Breaker is one engine's breaker as the ledger keeps it.
type Breaker struct {
	State BreakerState
	// Failures counts consecutive failures while closed.
	Failures int
	// Successes counts successful probes while half-open.
	Successes int
	// OpenedAt is when it last opened (ledger clock, ms precision); zero
	// when it never did.
	OpenedAt time.Time
	// LastFailureAt is when the latest failure Report counted arrived
	// (ledger clock, ms precision): a failure while closed or a failed
	// probe. Zero when none did. Only a success on a lease granted after
	// it resets Failures.
	LastFailureAt time.Time
	// Probes is the probe leases outstanding.
	Probes int
}

// At returns b as it reads at now: an open breaker whose cooldown has
// passed is half-open. Backends store the transition when they next write
// the engine; readers (Stats, Admit) use At.
//
// With the breaker off (s.Off) every engine reads closed, whatever it
// stored, and keeps only its outstanding probe count (those leases still
// free their slot when they end): turning the breaker off by
// reconfiguration opens nothing.
func (b Breaker) At(now time.Time, s BreakerSpec) Breaker {
	if s.Off() {
		return Breaker{Probes: b.Probes}
	}
	s = s.WithDefaults()
	if b.State == BreakerOpen && !now.Before(b.OpenedAt.Add(s.Cooldown)) {
		b.State, b.Successes = BreakerHalfOpen, 0
	}
	return b
}

// Advance is At for a backend about to store b: it returns b as it reads
// at now and the transition that reading made (TransitionHalfOpen when an
// open breaker's cooldown has passed, else none), which the backend counts
// with the change it stores. Every write of an engine's breaker (a grant,
// a Release, a probe lease the ledger ends) starts with Advance.
func (b Breaker) Advance(now time.Time, s BreakerSpec) (Breaker, BreakerTransition) {
	a := b.At(now, s)
	if b.State == BreakerOpen && a.State == BreakerHalfOpen {
		return a, TransitionHalfOpen
	}
	return a, TransitionNone
}

// Grant returns b (read with At) after a grant on its engine that Admits
// allowed, and whether that grant is a probe: a probe takes one slot of
// the probe budget until its lease ends (Report or Unprobe).
func (b Breaker) Grant(s BreakerSpec) (Breaker, bool) {
	if _, probe := b.Admits(s); probe {
		b.Probes++
		return b, true
	}
	return b, false
}

// Admits reports whether a grant may go to an engine whose breaker reads b
// (after At), and whether that grant is a probe. A refusal is
// ReasonBreakerOpen.
func (b Breaker) Admits(s BreakerSpec) (ok, probe bool) {
	if s.Off() {
		return true, false
	}
	s = s.WithDefaults()
	switch b.State {
	case BreakerOpen:
		return false, false
	case BreakerHalfOpen:
		return b.Probes < s.Probes, true
	}
	return true, false
}

// Outcome is what a dispatch came to, reported with Release
// (Usage.Outcome). The empty Outcome is no evidence: a lease released
// before it was dispatched, or whose dispatch ended for the client's sake
// (a disconnect, a refusal by the router).
type Outcome string

// Outcomes.
const (
	OutcomeNone Outcome = ""
	// OutcomeOK: the engine answered (any status below 500, or a stream
	// that started).
	OutcomeOK Outcome = "ok"
	// OutcomeConnect: the connection to the engine could not be made.
	OutcomeConnect Outcome = "connect_error"
	// OutcomeReset: the connection broke before the answer ended.
	OutcomeReset Outcome = "reset"
	// OutcomeStatus5xx: the engine answered with a 5xx status.
	OutcomeStatus5xx Outcome = "status_5xx"
	// OutcomeFirstByteTimeout: no response byte within the pool's bound.
	OutcomeFirstByteTimeout Outcome = "first_byte_timeout"
	// OutcomeTTFTBreach: the first token came later than the class's
	// ttft_slo.
	OutcomeTTFTBreach Outcome = "ttft_slo_breach"
)

// Outcomes lists every Outcome but OutcomeNone.
var Outcomes = []Outcome{OutcomeOK, OutcomeConnect, OutcomeReset, OutcomeStatus5xx, OutcomeFirstByteTimeout, OutcomeTTFTBreach}

// Failure reports whether o is evidence against the engine.
func (o Outcome) Failure() bool { return o != OutcomeNone && o != OutcomeOK }

// Valid reports whether o is a known outcome (or none).
func (o Outcome) Valid() bool {
	if o == OutcomeNone {
		return true
	}
	for _, x := range Outcomes {
		if o == x {
			return true
		}
	}
	return false
}

// BreakerTransition names a change of state, for counters
// ("breaker:<transition>" in PoolStats.Counters) and the event log.
type BreakerTransition string

// Transitions.
const (
	TransitionNone     BreakerTransition = ""
	TransitionOpened   BreakerTransition = "opened"    // closed -> open
	TransitionHalfOpen BreakerTransition = "half_open" // open -> half_open (stored lazily)
	TransitionReopened BreakerTransition = "reopened"  // half_open -> open
	TransitionClosed   BreakerTransition = "closed"    // half_open -> closed
)

// CounterBreaker prefixes the pool counters of breaker transitions
// (PoolStats.Counters): BreakerCounter(t) is "breaker:<t>".
const CounterBreaker = "breaker"

// BreakerTransitions lists every transition but TransitionNone.
var BreakerTransitions = []BreakerTransition{TransitionOpened, TransitionHalfOpen, TransitionReopened, TransitionClosed}

// BreakerCounter names the pool counter of transition t.
func BreakerCounter(t BreakerTransition) string { return CounterBreaker + ":" + string(t) }

// Report applies the outcome of a released lease to b (already read with
// At at now): granted is the lease's grant time (Lease.Created, ledger
// clock) and probe says whether it was a probe. It returns the new state
// and the transition it made, if any. A success while closed resets the
// count only if granted is a later millisecond than b.LastFailureAt (see
// Fresh). Probe leases free their slot of the probe budget whatever their
// outcome; so does Unprobe for a probe lease the ledger ends itself.
func (b Breaker) Report(now time.Time, s BreakerSpec, granted time.Time, probe bool, o Outcome) (Breaker, BreakerTransition) {
	if probe {
		b.Probes = max(0, b.Probes-1)
	}
	if s.Off() || o == OutcomeNone {
		return b, TransitionNone
	}
	s = s.WithDefaults()
	switch b.State {
	case BreakerClosed:
		if !o.Failure() {
			if b.Fresh(granted) {
				b.Failures = 0
			}
			return b, TransitionNone
		}
		b.Failures++
		b.LastFailureAt = now
		if b.Failures >= s.Failures {
			b.State, b.Failures, b.OpenedAt = BreakerOpen, 0, now
			return b, TransitionOpened
		}
	case BreakerHalfOpen:
		if !probe {
			return b, TransitionNone
		}
		if o.Failure() {
			b.State, b.Successes, b.OpenedAt, b.LastFailureAt = BreakerOpen, 0, now, now
			return b, TransitionReopened
		}
		b.Successes++
		if b.Successes >= s.Successes {
			b.State, b.Successes, b.Failures = BreakerClosed, 0, 0
			return b, TransitionClosed
		}
	}
	return b, TransitionNone
}

// Fresh reports whether a lease granted at granted (Lease.Created) was
// granted after b's latest counted failure, comparing whole milliseconds
// of the ledger clock: a lease of the failure's own millisecond is not
// fresh. With no failure counted (LastFailureAt zero) every lease is.
// scripts/lua/release.lua compares the same milliseconds.
func (b Breaker) Fresh(granted time.Time) bool {
	return b.LastFailureAt.IsZero() || granted.UnixMilli() > b.LastFailureAt.UnixMilli()
}

// Unprobe frees a probe lease's slot of the budget when the ledger ends
// the lease itself (expiry, a dead holder): no outcome is known.
func (b Breaker) Unprobe() Breaker {
	b.Probes = max(0, b.Probes-1)
	return b
}
