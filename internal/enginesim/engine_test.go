package enginesim

import (
	"errors"
	"testing"
	"time"
)

// newManual returns an engine whose steps the test drives with advance.
// Prefill is fast enough to take one step.
func newManual(t *testing.T, cfg Config) *Engine {
	t.Helper()
	cfg.manual = true
	if cfg.PrefillTokensPerSec == 0 {
		cfg.PrefillTokensPerSec = 1e9
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

func mustSubmit(t *testing.T, e *Engine, prompt, maxTokens, n int) *request {
	t.Helper()
	r, err := e.submit(submission{promptTokens: prompt, maxTokens: maxTokens, n: n, ignoreEOS: true, key: uint64(prompt)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

type want struct {
	running, waiting, blocks int
	preemptions              int64
}

func check(t *testing.T, e *Engine, step string, w want) Stats {
	t.Helper()
	s := e.Stats()
	if s.Running != w.running || s.Waiting != w.waiting || s.KVBlocksUsed != w.blocks || s.Preemptions != w.preemptions {
		t.Fatalf("%s: running %d waiting %d blocks %d preemptions %d, want %+v",
			step, s.Running, s.Waiting, s.KVBlocksUsed, s.Preemptions, w)
	}
	return s
}

func isDone(r *request) bool {
	select {
	case <-r.doneC:
		return true
	default:
		return false
	}
}

func TestQueueWhenKVFull(t *testing.T) {
	// 4 blocks of 16 tokens.
	e := newManual(t, Config{KVTokens: 64, Slots: 8})
	a := mustSubmit(t, e, 48, 2, 1) // 3 blocks
	b := mustSubmit(t, e, 20, 2, 1) // 2 blocks: only 1 free
	c := mustSubmit(t, e, 5, 2, 1)  // 1 block would fit, but FIFO: behind b
	check(t, e, "after submit", want{running: 1, waiting: 2, blocks: 3})

	e.advance(1) // a's prefill and first token: 49 tokens take a 4th block
	check(t, e, "step 1", want{running: 1, waiting: 2, blocks: 4})
	e.advance(1) // a finishes; b then c are admitted
	if !isDone(a) || a.seqs[0].finish != finishLength {
		t.Fatalf("a: done %v finish %q, want length", isDone(a), a.seqs[0].finish)
	}
	check(t, e, "step 2", want{running: 2, waiting: 0, blocks: 3})
	e.advance(10)
	if !isDone(b) || !isDone(c) {
		t.Fatal("b and c should have finished")
	}
	s := check(t, e, "end", want{})
	if s.PeakKVBlocksUsed != 4 || s.PeakKVBlockTokensUsed != 64 || s.PeakKVTokensUsed != 49 || s.PeakWaiting != 2 {
		t.Fatalf("peaks: blocks %d (%d tokens), held %d, waiting %d; want 4, 64, 49, 2",
			s.PeakKVBlocksUsed, s.PeakKVBlockTokensUsed, s.PeakKVTokensUsed, s.PeakWaiting)
	}
	if s.RequestsCompleted != 3 || s.GenerationTokens != 6 || s.PromptTokens != 73 {
		t.Fatalf("counters: %+v", s)
	}
}

func TestQueueWhenSlotsFull(t *testing.T) {
	e := newManual(t, Config{KVTokens: 1024, Slots: 2})
	for range 3 {
		mustSubmit(t, e, 10, 3, 1)
	}
	check(t, e, "submitted", want{running: 2, waiting: 1, blocks: 2})
	e.advance(3)
	check(t, e, "first two done", want{running: 1, waiting: 0, blocks: 1})
	s := e.Stats()
	if s.PeakRunning != 2 || s.PeakAcceptedRequests != 3 || s.OverSlotCapacitySeconds <= 0 {
		t.Fatalf("peak running %d, peak accepted %d, over slots %v: want 2, 3, > 0",
			s.PeakRunning, s.PeakAcceptedRequests, s.OverSlotCapacitySeconds)
	}
}

func TestPreemptNewestWhenDecodeNeedsBlock(t *testing.T) {
	e := newManual(t, Config{KVTokens: 64, Slots: 8})
	a := mustSubmit(t, e, 32, 20, 1) // 2 blocks, grows to 52 tokens = 4 blocks
	b := mustSubmit(t, e, 32, 20, 1) // 2 blocks: the cache is full
	check(t, e, "admitted", want{running: 2, blocks: 4})

	// a's first token needs a 3rd block: b, the newest, is preempted.
	e.advance(1)
	check(t, e, "preempted", want{running: 1, waiting: 1, blocks: 3, preemptions: 1})
	if got := b.seqs[0].generated; got != 0 {
		t.Fatalf("b generated %d before preemption, want 0", got)
	}
	e.advance(19)
	if !isDone(a) {
		t.Fatal("a should be done")
	}
	// b was readmitted as a finished, and recomputes its prompt.
	check(t, e, "b readmitted", want{running: 1, blocks: 2, preemptions: 1})
	e.advance(20)
	if !isDone(b) || b.seqs[0].generated != 20 {
		t.Fatalf("b: done %v generated %d, want 20", isDone(b), b.seqs[0].generated)
	}
	s := e.Stats()
	if s.PeakKVBlocksUsed != 4 || s.KVBlocksUsed != 0 || s.SequencesFinished[finishLength] != 2 {
		t.Fatalf("stats: %+v", s)
	}
}

func TestPreemptMidGenerationRecomputes(t *testing.T) {
	e := newManual(t, Config{KVTokens: 64, Slots: 8})
	a := mustSubmit(t, e, 20, 40, 1) // 2 blocks; needs a 3rd after 12 tokens
	e.advance(5)
	b := mustSubmit(t, e, 25, 20, 1) // 2 blocks: full; needs a 3rd after 8 tokens
	check(t, e, "both running", want{running: 2, blocks: 4})
	// Step 8: a (older) needs its 3rd block first; b, the newest, goes.
	e.advance(8)
	check(t, e, "b preempted", want{running: 1, waiting: 1, blocks: 3, preemptions: 1})
	if b.seqs[0].state != seqWaiting || b.seqs[0].generated != 7 {
		t.Fatalf("b: state %d generated %d, want waiting with 7", b.seqs[0].state, b.seqs[0].generated)
	}
	e.advance(27)
	if !isDone(a) {
		t.Fatal("a should be done")
	}
	// b is readmitted with its prompt and the 7 tokens it had: 32 tokens.
	s := check(t, e, "b readmitted", want{running: 1, blocks: 2, preemptions: 1})
	if s.KVTokensUsed != 32 {
		t.Fatalf("b holds %d tokens, want 32 (recomputed)", s.KVTokensUsed)
	}
	e.advance(40)
	if !isDone(b) || b.seqs[0].generated != 20 {
		t.Fatalf("b: done %v generated %d, want 20", isDone(b), b.seqs[0].generated)
	}
}

func TestAbortFreesAtOnce(t *testing.T) {
	e := newManual(t, Config{KVTokens: 64, Slots: 8})
	a := mustSubmit(t, e, 40, 20, 1)
	b := mustSubmit(t, e, 40, 20, 1) // waits
	check(t, e, "submitted", want{running: 1, waiting: 1, blocks: 3})
	e.abort(a)
	s := check(t, e, "a aborted", want{running: 1, blocks: 3})
	if !isDone(a) || s.RequestsAborted != 1 || s.AcceptedRequests != 1 || s.AdmittedDemandTokens != 60 {
		t.Fatalf("after abort: %+v", s)
	}
	e.abort(b)
	e.abort(b) // idempotent
	s = check(t, e, "b aborted", want{})
	if s.RequestsAborted != 2 || s.SequencesFinished[finishAbort] != 2 || s.AdmittedDemandTokens != 0 {
		t.Fatalf("after both: %+v", s)
	}
}

func TestAdmittedDemandAndOverCapacity(t *testing.T) {
	e := newManual(t, Config{KVTokens: 64, Slots: 8})
	a := mustSubmit(t, e, 10, 20, 1) // demand 30
	b := mustSubmit(t, e, 10, 10, 2) // demand 40: 70 > 64
	s := e.Stats()
	if s.AdmittedDemandTokens != 70 || s.AcceptedRequests != 2 || s.AcceptedSequences != 3 {
		t.Fatalf("demand %d, accepted %d/%d; want 70, 2, 3", s.AdmittedDemandTokens, s.AcceptedRequests, s.AcceptedSequences)
	}
	time.Sleep(20 * time.Millisecond)
	e.abort(b)
	over := e.Stats().OverKVCapacitySeconds
	if over < 0.015 {
		t.Fatalf("over-capacity %v s, want >= 0.015", over)
	}
	time.Sleep(10 * time.Millisecond)
	s = e.Stats()
	if s.OverKVCapacitySeconds != over || s.OverCapacitySeconds != over || s.OverSlotCapacitySeconds != 0 {
		t.Fatalf("over-capacity kept growing within capacity: %v, then %+v", over, s)
	}
	if s.PeakAdmittedDemand != 70 || s.PeakAcceptedSequences != 3 || s.OverCapacitySimSeconds != over {
		t.Fatalf("peaks: %+v", s)
	}

	e.Reset()
	s = e.Stats()
	if s.PeakAdmittedDemand != 30 || s.PeakAcceptedRequests != 1 || s.OverCapacitySeconds != 0 ||
		s.RequestsAccepted != 0 || s.RequestsAborted != 0 || s.PeakKVBlocksUsed != 1 {
		t.Fatalf("after reset: %+v", s)
	}
	e.abort(a)
	if s := e.Stats(); s.RequestsAborted != 1 || s.AdmittedDemandTokens != 0 {
		t.Fatalf("after abort: %+v", s)
	}
}

func TestSubmitRules(t *testing.T) {
	e := newManual(t, Config{KVTokens: 64, Slots: 8, OutputTokens: 4})
	if _, err := e.submit(submission{promptTokens: 60, maxTokens: 5, n: 1}); !errors.Is(err, ErrTooLong) {
		t.Fatalf("60 + 5 > 64: err %v, want ErrTooLong", err)
	}
	// Without max_tokens, the demand is the whole context.
	r, err := e.submit(submission{promptTokens: 10, n: 1, key: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.maxTokens != 54 || r.demand != 64 {
		t.Fatalf("max_tokens %d demand %d, want 54 and 64", r.maxTokens, r.demand)
	}
	// Natural lengths are 1..2×OutputTokens−1, deterministic per key and
	// index; min_tokens raises them.
	for k := range uint64(50) {
		r1, _ := e.submit(submission{promptTokens: 1, maxTokens: 50, n: 3, key: k})
		r2, _ := e.submit(submission{promptTokens: 1, maxTokens: 50, n: 3, key: k, minTokens: 7})
		for i, s := range r1.seqs {
			if s.target < 1 || s.target > 7 || r2.seqs[i].target != 7 {
				t.Fatalf("key %d seq %d: target %d (min_tokens 7: %d), want 1..7 (7)", k, i, s.target, r2.seqs[i].target)
			}
		}
		e.abort(r1)
		e.abort(r2)
	}
	e.Close()
	if _, err := e.submit(submission{promptTokens: 1, maxTokens: 1, n: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}

// The scheduler goroutine: with real time and a high speed, requests run
// to the end on their own and the engine stops cleanly.
func TestRealTimeScheduler(t *testing.T) {
	e, err := New(Config{KVTokens: 256, Slots: 4, Speed: 1000, DecodeTokensPerSec: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var rs []*request
	for i := range 6 {
		rs = append(rs, mustSubmit(t, e, 20+i, 30, 1))
	}
	deadline := time.After(10 * time.Second)
	for _, r := range rs {
		select {
		case <-r.doneC:
		case <-deadline:
			t.Fatalf("not done: %+v", e.Stats())
		}
	}
	s := e.Stats()
	if s.RequestsCompleted != 6 || s.GenerationTokens != 180 || s.KVBlocksUsed != 0 || s.PeakRunning > 4 {
		t.Fatalf("stats: %+v", s)
	}
}
