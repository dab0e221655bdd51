package chaos

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/enginesim"
)

// TestFirstTokenTimeout: a client gives up on a stream without a first
// token after workload.first_token_timeout and records it as a failure
// (not a "client:" error); a stream whose first token comes in time is
// untouched. The engine is a real enginesim; its hang fault keeps a
// request unanswered.
func TestFirstTokenTimeout(t *testing.T) {
	eng, err := enginesim.New(enginesim.Config{Model: "sim", KVTokens: 16384, Slots: 8, Speed: 10, OutputTokens: 20})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(eng.Handler())
	defer func() {
		srv.Close()
		eng.Close()
	}()
	sc := testScenario(t)
	sc.Workload.FirstTokenTimeout = Duration(300 * time.Millisecond)
	sc.Workload.Stream = 1
	rec, err := newRecorder(t.TempDir() + "/events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer rec.close()
	tr := &traffic{sc: sc, rec: rec, client: &http.Client{Transport: &http.Transport{}}, tenants: []weighted{{"acme", 1}}}
	defer tr.client.CloseIdleConnections()
	target := &routerNode{id: "engine-0", addr: strings.TrimPrefix(srv.URL, "http://")}
	rng := rand.New(rand.NewPCG(1, 1))
	ctx := context.Background()

	tr.send(ctx, target, tr.gen(rng, "in-time"), false)
	yes, no := true, false
	eng.Fail(enginesim.FailChange{Hang: &yes})
	tr.send(ctx, target, tr.gen(rng, "hung"), false)
	eng.Fail(enginesim.FailChange{Hang: &no})

	if len(rec.requests) != 2 {
		t.Fatalf("recorded %d requests, want 2", len(rec.requests))
	}
	ok, hung := rec.requests[0], rec.requests[1]
	if ok.Status != 200 || ok.Err != "" || ok.TTFTMS <= 0 {
		t.Errorf("in-time stream = status %d, err %q, ttft %g ms; want 200, no error, a TTFT", ok.Status, ok.Err, ok.TTFTMS)
	}
	if want := "first token timeout: no first token within 300ms"; hung.Err != want || hung.Status != 0 || hung.TTFTMS != 0 {
		t.Errorf("hung stream = status %d, err %q, ttft %g; want 0, %q, none", hung.Status, hung.Err, hung.TTFTMS, want)
	}
	if _, ok := failed(hung); !ok {
		t.Errorf("failed(%+v) = false, want a failure", hung)
	}
}
