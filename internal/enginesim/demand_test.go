package enginesim

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testutil/poll"
)

// reply is the answer to a request sent with postAsync.
type reply struct {
	status int
	body   []byte
	err    error
}

// postAsync sends body to /v1/completions from a goroutine: with a manual
// engine the answer comes only as the test runs steps.
func postAsync(ts *httptest.Server, body string) <-chan reply {
	c := make(chan reply, 1)
	go func() {
		resp, err := ts.Client().Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			c <- reply{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		c <- reply{status: resp.StatusCode, body: b, err: err}
	}()
	return c
}

// openActual is the actual demand computed from the requests themselves:
// Σ prompt + generated over sequences still running or waiting.
func openActual(rs []*request) int64 {
	var sum int64
	for _, r := range rs {
		for _, s := range r.seqs {
			if s.state == seqRunning || s.state == seqWaiting {
				sum += int64(s.held())
			}
		}
	}
	return sum
}

// Actual demand grows by one per generated token of every running
// sequence, while the admitted demand stays at prompt + max_tokens, and
// returns to 0 when the request completes.
func TestActualDemandTokenByToken(t *testing.T) {
	e, ts := newServer(t, Config{KVTokens: 1024, Slots: 4, manual: true, PrefillTokensPerSec: 1e9})
	replyC := postAsync(ts, `{"prompt":"a b","max_tokens":5,"n":2,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`)
	poll.Eventually(t, 5*time.Second, "both sequences running", func() bool { return e.Stats().Running == 2 })
	s := getStats(t, ts, ts.URL)
	p := s.KVTokensUsed / 2 // prompt tokens of each sequence
	if p < 1 || s.ActualDemandTokens != 2*p || s.AdmittedDemandTokens != 2*(p+5) || s.PeakActualDemand != 2*p {
		t.Fatalf("admitted: actual %d (peak %d), admitted %d, kv used %d; want 2×prompt, 2×(prompt+5)",
			s.ActualDemandTokens, s.PeakActualDemand, s.AdmittedDemandTokens, s.KVTokensUsed)
	}
	for k := int64(1); k <= 4; k++ {
		e.advance(1)
		s = getStats(t, ts, ts.URL)
		if s.ActualDemandTokens != 2*(p+k) || s.PeakActualDemand != 2*(p+k) || s.AdmittedDemandTokens != 2*(p+5) {
			t.Fatalf("step %d: actual %d (peak %d), admitted %d; want %d, %d", k,
				s.ActualDemandTokens, s.PeakActualDemand, s.AdmittedDemandTokens, 2*(p+k), 2*(p+5))
		}
	}
	e.advance(1) // the last token: both sequences finish
	r := <-replyC
	if r.err != nil || r.status != 200 {
		t.Fatalf("reply: %d %v %s", r.status, r.err, r.body)
	}
	if a := parseAnswer(t, r.body, true, false); a.usage.CompletionTokens != 10 {
		t.Fatalf("completion tokens %d, want 10", a.usage.CompletionTokens)
	}
	s = getStats(t, ts, ts.URL)
	if s.ActualDemandTokens != 0 || s.AdmittedDemandTokens != 0 || s.PeakActualDemand != 2*(p+4) || s.OverActualKVCapacitySeconds != 0 {
		t.Fatalf("after completion: actual %d (peak %d), admitted %d, over %v; want 0 (%d), 0, 0",
			s.ActualDemandTokens, s.PeakActualDemand, s.AdmittedDemandTokens, s.OverActualKVCapacitySeconds, 2*(p+4))
	}
}

// Every change of the actual demand is counted: tokens, sequences that end
// at different times, preemption (which keeps what a sequence generated),
// aborts of running and waiting requests, and later submissions.
func TestActualDemandMatchesSequences(t *testing.T) {
	e := newManual(t, Config{KVTokens: 96, Slots: 3, OutputTokens: 24, OutputDist: OutputLognormal})
	var rs []*request
	submit := func(prompt, n int) *request {
		t.Helper()
		r, err := e.submit(submission{promptTokens: prompt, maxTokens: 50, n: n, key: uint64(len(rs))})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
		return r
	}
	checkActual := func(step string) {
		t.Helper()
		s := e.Stats()
		if want := openActual(rs); s.ActualDemandTokens != want || s.ActualDemandTokens < s.KVTokensUsed {
			t.Fatalf("%s: actual demand %d, want %d (>= kv used %d)", step, s.ActualDemandTokens, want, s.KVTokensUsed)
		}
	}
	submit(20, 3)
	submit(30, 1)
	checkActual("submitted")
	for i := range 200 {
		switch i {
		case 5:
			submit(10, 2)
		case 9:
			e.abort(rs[1])
		case 12:
			submit(40, 1)
			submit(16, 1)
		case 14:
			e.abort(rs[len(rs)-1]) // waiting behind the others
		}
		e.advance(1)
		checkActual("step")
	}
	s := e.Stats()
	if s.Preemptions == 0 || s.AcceptedRequests != 0 || s.ActualDemandTokens != 0 || s.SequencesFinished[finishStop] == 0 {
		t.Fatalf("want preemptions, every request done and natural stops: %+v", s)
	}
}

// The over-actual-capacity clock runs while accepted sequences' actual
// usage exceeds the KV capacity — a small engine with long requests, where
// the engine queues and preempts and never holds more than its capacity —
// and stops when it falls back; POST /admin/reset restarts it and the peak.
func TestOverActualKVCapacity(t *testing.T) {
	e, ts := newServer(t, Config{KVTokens: 256, Slots: 16, Speed: 4, manual: true, PrefillTokensPerSec: 1e9})
	var replies []<-chan reply
	for range 6 {
		replies = append(replies, postAsync(ts, `{"prompt":"a","max_tokens":100,"ignore_eos":true}`))
	}
	poll.Eventually(t, 5*time.Second, "six accepted", func() bool { return e.Stats().AcceptedRequests == 6 })
	time.Sleep(10 * time.Millisecond)
	if s := getStats(t, ts, ts.URL); s.OverActualKVCapacitySeconds != 0 || s.OverKVCapacitySeconds < 0.005 {
		t.Fatalf("prompts only: over actual %v, over admitted %v; want 0 and > 0", s.OverActualKVCapacitySeconds, s.OverKVCapacitySeconds)
	}
	for i := 0; e.Stats().ActualDemandTokens <= 256; i++ {
		if i > 1000 {
			t.Fatalf("actual demand never over capacity: %+v", e.Stats())
		}
		e.advance(1)
	}
	// The time over capacity is charged by the next step, before it
	// changes anything: here that step starts a run to the end.
	time.Sleep(20 * time.Millisecond)
	e.advance(5000)
	s := getStats(t, ts, ts.URL)
	if s.AcceptedRequests != 0 {
		t.Fatalf("requests never finished: %+v", s)
	}
	if s.OverActualKVCapacitySeconds < 0.015 || s.OverActualKVCapacitySimSeconds != s.OverActualKVCapacitySeconds*4 {
		t.Fatalf("over actual capacity %v s (sim %v), want >= 0.015 (× 4)", s.OverActualKVCapacitySeconds, s.OverActualKVCapacitySimSeconds)
	}
	for _, c := range replies {
		if r := <-c; r.err != nil || r.status != 200 || parseAnswer(t, r.body, false, false).usage.CompletionTokens != 100 {
			t.Fatalf("reply: %d %v %s", r.status, r.err, r.body)
		}
	}
	if s.Preemptions == 0 || s.PeakKVTokensUsed > 256 || s.PeakActualDemand <= 256 || s.ActualDemandTokens != 0 {
		t.Fatalf("preemptions %d, peak kv used %d, peak actual %d, actual %d: want > 0, <= 256, > 256, 0",
			s.Preemptions, s.PeakKVTokensUsed, s.PeakActualDemand, s.ActualDemandTokens)
	}
	time.Sleep(10 * time.Millisecond)
	if later := getStats(t, ts, ts.URL); later.OverActualKVCapacitySeconds != s.OverActualKVCapacitySeconds {
		t.Fatalf("over actual capacity grew while idle: %v then %v", s.OverActualKVCapacitySeconds, later.OverActualKVCapacitySeconds)
	}
	status, b := do(t, ts, "POST", "/admin/reset", "")
	var r Stats
	if err := json.Unmarshal(b, &r); err != nil || status != 200 {
		t.Fatalf("reset: %d %s", status, b)
	}
	if r.PeakActualDemand != 0 || r.OverActualKVCapacitySeconds != 0 || r.OverActualKVCapacitySimSeconds != 0 || r.Preemptions != 0 {
		t.Fatalf("after reset: %+v", r)
	}
}

// Requests without max_tokens put the admitted demand over capacity while
// what they actually use stays far below it: the actual clock stays 0.
func TestActualDemandWithinCapacity(t *testing.T) {
	e, ts := newServer(t, Config{KVTokens: 4096, Slots: 16, OutputTokens: 8, manual: true, PrefillTokensPerSec: 1e9})
	var replies []<-chan reply
	for range 3 {
		replies = append(replies, postAsync(ts, `{"prompt":"a b c"}`))
	}
	poll.Eventually(t, 5*time.Second, "three accepted", func() bool { return e.Stats().AcceptedRequests == 3 })
	time.Sleep(10 * time.Millisecond)
	for i := 0; e.Stats().AcceptedRequests > 0; i++ {
		if i > 100 {
			t.Fatalf("requests never finished: %+v", e.Stats())
		}
		e.advance(1)
	}
	for _, c := range replies {
		if r := <-c; r.err != nil || r.status != 200 {
			t.Fatalf("reply: %d %v %s", r.status, r.err, r.body)
		}
	}
	s := getStats(t, ts, ts.URL)
	if s.OverKVCapacitySeconds < 0.005 || s.PeakAdmittedDemand <= 4096 {
		t.Fatalf("admitted: over %v s, peak %d; want > 0, > 4096", s.OverKVCapacitySeconds, s.PeakAdmittedDemand)
	}
	if s.OverActualKVCapacitySeconds != 0 || s.OverActualKVCapacitySimSeconds != 0 || s.Preemptions != 0 ||
		s.PeakActualDemand == 0 || s.PeakActualDemand > 100 || s.ActualDemandTokens != 0 {
		t.Fatalf("actual: over %v s (sim %v), preemptions %d, peak %d, now %d; want 0, 0, 0, 1..100, 0",
			s.OverActualKVCapacitySeconds, s.OverActualKVCapacitySimSeconds, s.Preemptions, s.PeakActualDemand, s.ActualDemandTokens)
	}
}

// An abort that brings the actual demand back within capacity charges the
// time before it to the over-actual clock, and none after.
func TestOverActualKVCapacityUntilAbort(t *testing.T) {
	e := newManual(t, Config{KVTokens: 64, Slots: 8})
	start := time.Now()
	a := mustSubmit(t, e, 30, 2, 1)
	b := mustSubmit(t, e, 30, 2, 1) // waits: 2 + 2 blocks do not fit with a's first token
	c := mustSubmit(t, e, 30, 2, 1)
	if s := e.Stats(); s.ActualDemandTokens != 90 || s.Waiting != 1 {
		t.Fatalf("actual %d, waiting %d; want 90, 1", s.ActualDemandTokens, s.Waiting)
	}
	time.Sleep(20 * time.Millisecond)
	e.abort(b)
	e.abort(c)
	elapsed := time.Since(start).Seconds()
	time.Sleep(10 * time.Millisecond)
	s := e.Stats()
	if s.ActualDemandTokens != 30 || s.OverActualKVCapacitySeconds < 0.02 || s.OverActualKVCapacitySeconds > elapsed {
		t.Fatalf("actual %d, over actual %v s; want 30, 0.02..%v", s.ActualDemandTokens, s.OverActualKVCapacitySeconds, elapsed)
	}
	e.abort(a)
	if s := e.Stats(); s.ActualDemandTokens != 0 || s.PeakActualDemand != 90 {
		t.Fatalf("after aborts: actual %d peak %d, want 0, 90", s.ActualDemandTokens, s.PeakActualDemand)
	}
}
