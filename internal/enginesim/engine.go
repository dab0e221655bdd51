package enginesim

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Errors of the engine, mapped to HTTP statuses in one table (api.go).
var (
	// ErrClosed: the engine is shutting down.
	ErrClosed = errors.New("enginesim: engine closed")
	// ErrTooLong: prompt + max_tokens is more than MaxModelLen.
	ErrTooLong = errors.New("enginesim: request too long")
	// ErrEngineFailure: the request was dropped by POST /admin/fail abort.
	ErrEngineFailure = errors.New("enginesim: engine failure")
)

// maxStepsPerTick bounds the decode steps one tick of the scheduler runs,
// so a stalled process catches up in bounded bursts (the simulation then
// falls behind the wall clock rather than freezing).
const maxStepsPerTick = 4096

// seqState is where a sequence is in the scheduler.
type seqState uint8

const (
	seqWaiting seqState = iota
	seqRunning
	seqFinished
	seqAborted
)

// Finish reasons, as in OpenAI responses and vLLM metrics.
const (
	finishStop   = "stop"
	finishLength = "length"
	finishAbort  = "abort"
)

// sequence is one output of a request (a request with n = 3 has three).
type sequence struct {
	req   *request
	index int
	key   uint64 // seeds this sequence's text
	// target is how many tokens this sequence produces before it stops.
	target    int
	generated int
	// blocks held while running; 0 while waiting.
	blocks int
	// prefillLeft is the steps of prefill before the next token; the step
	// that brings it to 0 produces a token.
	prefillLeft int
	state       seqState
	finish      string
	admitted    bool // admitted at least once (prompt counted)
}

// held is the tokens the sequence's KV cache holds while running.
func (s *sequence) held() int { return s.req.prompt + s.generated }

// request is one accepted API request.
type request struct {
	id     uint64
	prompt int
	// media is the prompt tokens its images, audio and videos took.
	media     [mediaKinds]int
	maxTokens int
	n         int
	// demand is (prompt + maxTokens) × n: what the request may ever hold.
	demand int64
	seqs   []*sequence
	open   int // sequences neither finished nor aborted
	err    error
	// notifyC gets a value (never blocks the scheduler) when any of the
	// request's sequences made progress or ended.
	notifyC chan struct{}
	// doneC is closed when every sequence ended.
	doneC chan struct{}
}

// submission is what a caller asks the engine to run.
type submission struct {
	promptTokens int
	// media is the part of promptTokens each media kind takes.
	media [mediaKinds]int
	// maxTokens is the explicit max_tokens, or 0 for MaxModelLen − prompt.
	maxTokens int
	minTokens int
	n         int
	ignoreEOS bool
	// key seeds output lengths and text: the request seed or a hash of the
	// prompt.
	key uint64
}

// Engine is the simulated engine: the KV-cache model, its scheduler
// goroutine and its ground truth. Close stops it.
type Engine struct {
	cfg        Config
	numBlocks  int
	stepDur    time.Duration
	prefillPer float64 // prompt tokens prefilled per step
	started    time.Time

	// mu guards every field below, the requests and their sequences.
	mu       sync.Mutex
	free     int // free KV blocks
	running  []*sequence
	waiting  []*sequence
	requests map[uint64]*request
	nextID   uint64
	held     int64 // tokens held by running sequences
	// accepted is what accepted, unfinished requests may hold.
	acceptedReqs int
	acceptedSeqs int
	demand       int64
	// actual is what accepted, unfinished sequences hold or would hold if
	// all ran: Σ (prompt + generated), waiting sequences included.
	actual int64
	st     stats
	fail   FailState
	hangC  chan struct{} // closed when Hang ends
	closed bool

	wakeC chan struct{}
	stopC chan struct{}
	doneC chan struct{}
}

// New starts an engine with cfg (zero fields take their defaults).
func New(cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	now := time.Now()
	e := &Engine{
		cfg:        cfg,
		numBlocks:  int(cfg.KVTokens / int64(cfg.BlockSize)),
		stepDur:    cfg.stepDuration(),
		prefillPer: cfg.PrefillTokensPerSec / cfg.DecodeTokensPerSec,
		started:    now,
		requests:   map[uint64]*request{},
		hangC:      make(chan struct{}),
		wakeC:      make(chan struct{}, 1),
		stopC:      make(chan struct{}),
		doneC:      make(chan struct{}),
	}
	e.free = e.numBlocks
	close(e.hangC)
	e.st.reset(now)
	if cfg.manual {
		close(e.doneC)
	} else {
		go e.run()
	}
	return e, nil
}

// Config returns the engine's configuration, defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Close stops the scheduler and fails every request still waiting for
// output with ErrClosed. It is idempotent.
func (e *Engine) Close() {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		close(e.stopC)
		if e.fail.Hang {
			close(e.hangC)
			e.fail.Hang = false
		}
	}
	e.mu.Unlock()
	<-e.doneC
}

// run is the scheduler goroutine: while sequences run, it ticks and runs
// the decode steps the elapsed wall time (× Speed) pays for.
func (e *Engine) run() {
	defer close(e.doneC)
	tick := max(time.Duration(float64(e.stepDur)/e.cfg.Speed), time.Millisecond)
	t := time.NewTimer(tick)
	defer t.Stop()
	var debt time.Duration // simulated time owed to steps not yet run
	last := time.Now()
	for {
		e.mu.Lock()
		busy := len(e.running) > 0
		e.mu.Unlock()
		if !busy {
			select {
			case <-e.stopC:
				return
			case <-e.wakeC:
			}
			last, debt = time.Now(), 0
			t.Reset(tick)
			continue
		}
		select {
		case <-e.stopC:
			return
		case <-t.C:
		}
		now := time.Now()
		debt += time.Duration(float64(now.Sub(last)) * e.cfg.Speed)
		last = now
		steps := int(debt / e.stepDur)
		debt -= time.Duration(steps) * e.stepDur
		if steps > maxStepsPerTick {
			steps, debt = maxStepsPerTick, 0
		}
		e.advance(steps)
		t.Reset(tick)
	}
}

// advance runs up to steps decode steps, stopping early when idle.
func (e *Engine) advance(steps int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for range steps {
		if len(e.running) == 0 {
			break
		}
		e.stepLocked()
	}
}

// wake tells an idle scheduler there is work.
func (e *Engine) wake() {
	select {
	case e.wakeC <- struct{}{}:
	default:
	}
}

// blocksFor is the blocks that hold tokens.
func (e *Engine) blocksFor(tokens int) int {
	return (tokens + e.cfg.BlockSize - 1) / e.cfg.BlockSize
}

// submit accepts a request and queues its sequences. It returns
// ErrTooLong when the request can never fit one sequence.
func (e *Engine) submit(sub submission) (*request, error) {
	maxTokens := sub.maxTokens
	if maxTokens == 0 {
		maxTokens = e.cfg.MaxModelLen - sub.promptTokens
	}
	if maxTokens < 1 || sub.promptTokens+maxTokens > e.cfg.MaxModelLen {
		return nil, fmt.Errorf("%w: %d prompt tokens + max_tokens %d is more than the maximum context length %d",
			ErrTooLong, sub.promptTokens, max(maxTokens, 0), e.cfg.MaxModelLen)
	}
	r := &request{
		prompt:    sub.promptTokens,
		media:     sub.media,
		maxTokens: maxTokens,
		n:         sub.n,
		demand:    int64(sub.promptTokens+maxTokens) * int64(sub.n),
		open:      sub.n,
		notifyC:   make(chan struct{}, 1),
		doneC:     make(chan struct{}),
	}
	for i := range sub.n {
		key := mix(mix(sub.key, e.cfg.Seed), uint64(i))
		target := e.cfg.naturalLength(key)
		if sub.ignoreEOS {
			target = maxTokens
		}
		target = min(max(target, sub.minTokens), maxTokens)
		r.seqs = append(r.seqs, &sequence{req: r, index: i, key: key, target: target})
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	e.nextID++
	r.id = e.nextID
	now := time.Now()
	e.st.integrate(e, now)
	e.requests[r.id] = r
	e.acceptedReqs++
	e.acceptedSeqs += r.n
	e.demand += r.demand
	e.actual += int64(r.prompt) * int64(r.n)
	e.waiting = append(e.waiting, r.seqs...)
	e.st.accepted++
	e.scheduleLocked()
	e.st.observe(e)
	e.wake()
	return r, nil
}

// scheduleLocked admits waiting sequences, first come first served, while
// the head of the queue fits the free slots and blocks.
func (e *Engine) scheduleLocked() {
	for len(e.waiting) > 0 && len(e.running) < e.cfg.Slots {
		s := e.waiting[0]
		need := e.blocksFor(s.held())
		if need > e.free {
			return
		}
		e.waiting = e.waiting[1:]
		e.free -= need
		s.blocks = need
		s.state = seqRunning
		s.prefillLeft = max(1, int(float64(s.held())/e.prefillPer+0.999999))
		if !s.admitted {
			s.admitted = true
			e.st.promptTokens += int64(s.req.prompt)
		}
		e.held += int64(s.held())
		e.running = append(e.running, s)
	}
}

// stepLocked is one decode step: admit what fits, then give every running
// sequence past its prefill one token, allocating a block when a
// sequence's tokens fill its last one and preempting the newest running
// sequence when no block is free. A step changes the actual demand of
// every running sequence at once, so it brings the clocks up to date first.
func (e *Engine) stepLocked() {
	e.st.integrate(e, time.Now())
	e.scheduleLocked()
	for i := 0; i < len(e.running); {
		s := e.running[i]
		if s.prefillLeft > 1 {
			s.prefillLeft--
			i++
			continue
		}
		s.prefillLeft = 0
		need := e.blocksFor(s.held() + 1)
		self := false
		for s.blocks < need && !self {
			if e.free > 0 {
				e.free--
				s.blocks++
				continue
			}
			victim := e.running[len(e.running)-1]
			e.preemptLocked(victim)
			self = victim == s
		}
		if self {
			break // s was the newest, so nothing after it runs
		}
		s.generated++
		e.held++
		e.actual++
		e.st.generationTokens++
		switch {
		case s.generated >= s.target:
			reason := finishStop
			if s.generated >= s.req.maxTokens {
				reason = finishLength
			}
			e.endLocked(s, reason, i)
		default:
			i++
		}
		notify(s.req)
	}
	e.scheduleLocked()
	e.st.observe(e)
}

// preemptLocked frees the blocks of running sequence s and puts it at the
// front of the queue, to be recomputed when admitted again.
func (e *Engine) preemptLocked(s *sequence) {
	i := slices.Index(e.running, s)
	e.running = slices.Delete(e.running, i, i+1)
	e.free += s.blocks
	e.held -= int64(s.held())
	s.blocks, s.prefillLeft, s.state = 0, 0, seqWaiting
	e.waiting = slices.Insert(e.waiting, 0, s)
	e.st.preemptions++
}

// endLocked ends sequence s (finished or aborted) and, with its last
// sequence, its request. runIdx is s's index in running, or -1 to look.
// The caller has brought the over-capacity clocks up to date.
func (e *Engine) endLocked(s *sequence, reason string, runIdx int) {
	switch s.state {
	case seqRunning:
		if runIdx < 0 {
			runIdx = slices.Index(e.running, s)
		}
		e.running = slices.Delete(e.running, runIdx, runIdx+1)
		e.free += s.blocks
		e.held -= int64(s.held())
		s.blocks = 0
	case seqWaiting:
		i := slices.Index(e.waiting, s)
		e.waiting = slices.Delete(e.waiting, i, i+1)
	default:
		return
	}
	e.actual -= int64(s.held())
	s.finish = reason
	if reason == finishAbort {
		s.state = seqAborted
	} else {
		s.state = seqFinished
	}
	e.st.finish(reason)
	r := s.req
	if r.open--; r.open > 0 {
		return
	}
	delete(e.requests, r.id)
	e.acceptedReqs--
	e.acceptedSeqs -= r.n
	e.demand -= r.demand
	if reason != finishAbort {
		e.st.completed++
	}
	close(r.doneC)
}

// abort ends every sequence of r still running or waiting, freeing its
// blocks at once: a client disconnect. It is a no-op for a finished
// request.
func (e *Engine) abort(r *request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.abortLocked(r, nil)
}

func (e *Engine) abortLocked(r *request, err error) {
	if r.open == 0 {
		return
	}
	e.st.integrate(e, time.Now())
	r.err = err
	if err == nil {
		e.st.aborted++
	}
	for _, s := range r.seqs {
		e.endLocked(s, finishAbort, -1)
	}
	notify(r)
	e.scheduleLocked()
	e.st.observe(e)
	e.wake()
}

// abortAll drops every request in flight with err (POST /admin/fail
// abort); it returns how many.
func (e *Engine) abortAll(err error) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	rs := make([]*request, 0, len(e.requests))
	for _, r := range e.requests {
		rs = append(rs, r)
	}
	for _, r := range rs {
		e.abortLocked(r, err)
	}
	e.st.failed += int64(len(rs))
	return len(rs)
}

// notify wakes r's handler without blocking.
func notify(r *request) {
	select {
	case r.notifyC <- struct{}{}:
	default:
	}
}

// progress is a snapshot of one sequence for a handler.
type progress struct {
	generated int
	finish    string // "" while running or waiting
}

// snapshot returns the progress of r's sequences into dst, and the error
// that ended r, if any (an injected engine failure).
func (e *Engine) snapshot(r *request, dst []progress) ([]progress, error) {
	dst = dst[:0]
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range r.seqs {
		dst = append(dst, progress{generated: s.generated, finish: s.finish})
	}
	return dst, r.err
}
