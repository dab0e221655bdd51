package enginesim

import "fmt"

// FailState is the injected faults (POST /admin/fail), for chaos tests.
// The admin endpoints always answer.
type FailState struct {
	// Errors: the OpenAI endpoints, /tokenize and /health answer 500.
	Errors bool `json:"errors"`
	// Hang: new inference requests hang, unanswered and holding nothing,
	// until their client gives up or Hang is cleared (then they proceed).
	Hang bool `json:"hang"`
	// MetricsOff: /metrics answers 503.
	MetricsOff bool `json:"metrics_off"`
	// Tokenize: /tokenize alone answers 500; inference keeps working (a
	// router's exact prompt counts must fall back to its estimate).
	Tokenize bool `json:"tokenize"`
	// Unavailable: the OpenAI endpoints, /tokenize and /health answer 503,
	// as an engine starting, draining or behind a proxy with no backend.
	Unavailable bool `json:"unavailable"`
	// Reset: the OpenAI endpoints, /tokenize and /health cut the
	// connection without an answer, as a crashing engine does (the admin
	// endpoints and /metrics still answer). Errors and Unavailable apply
	// only while Reset is off.
	Reset bool `json:"reset"`
}

// FailChange is a POST /admin/fail body: nil fields are left as they are.
// Abort drops every request in flight at once, as an engine crash would:
// their connections are cut without a final chunk.
type FailChange struct {
	Errors     *bool `json:"errors,omitempty"`
	Hang       *bool `json:"hang,omitempty"`
	MetricsOff *bool `json:"metrics_off,omitempty"`
	Tokenize   *bool `json:"tokenize,omitempty"`
	// Unavailable and Reset: see FailState.
	Unavailable *bool `json:"unavailable,omitempty"`
	Reset       *bool `json:"reset,omitempty"`
	Abort       bool  `json:"abort,omitempty"`
}

// failMode turns a ?mode= shorthand into a change: errors (or 500),
// unavailable (or 503), hang, reset, crash (reset and abort: every request
// in flight is cut and every new one), metrics, tokenize, abort, or none
// (clear every fault).
func failMode(mode string) (FailChange, error) {
	yes, no := true, false
	switch mode {
	case "errors", "500":
		return FailChange{Errors: &yes}, nil
	case "unavailable", "503":
		return FailChange{Unavailable: &yes}, nil
	case "reset":
		return FailChange{Reset: &yes}, nil
	case "crash":
		return FailChange{Reset: &yes, Abort: true}, nil
	case "hang":
		return FailChange{Hang: &yes}, nil
	case "metrics", "metrics_off":
		return FailChange{MetricsOff: &yes}, nil
	case "tokenize":
		return FailChange{Tokenize: &yes}, nil
	case "abort":
		return FailChange{Abort: true}, nil
	case "none", "off", "clear":
		return FailChange{Errors: &no, Hang: &no, MetricsOff: &no, Tokenize: &no, Unavailable: &no, Reset: &no}, nil
	}
	return FailChange{}, fmt.Errorf("mode %q: want errors, unavailable, hang, reset, crash, metrics, tokenize, abort or none", mode)
}

// Fail applies c and returns the faults now in force and how many requests
// Abort dropped. Reset is set before the abort, so no request gets in
// between.
func (e *Engine) Fail(c FailChange) (FailState, int) {
	e.mu.Lock()
	if c.Reset != nil {
		e.fail.Reset = *c.Reset
	}
	e.mu.Unlock()
	aborted := 0
	if c.Abort {
		aborted = e.abortAll(ErrEngineFailure)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if c.Unavailable != nil {
		e.fail.Unavailable = *c.Unavailable
	}
	if c.Errors != nil {
		e.fail.Errors = *c.Errors
	}
	if c.MetricsOff != nil {
		e.fail.MetricsOff = *c.MetricsOff
	}
	if c.Tokenize != nil {
		e.fail.Tokenize = *c.Tokenize
	}
	if c.Hang != nil && *c.Hang != e.fail.Hang && !e.closed {
		e.fail.Hang = *c.Hang
		if e.fail.Hang {
			e.hangC = make(chan struct{})
		} else {
			close(e.hangC)
		}
	}
	return e.fail, aborted
}

// faults returns the faults in force and the channel closed when Hang ends.
func (e *Engine) faults() (FailState, <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fail, e.hangC
}
