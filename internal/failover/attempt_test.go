package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/leasehold/leasehold/internal/freeport"
	"github.com/leasehold/leasehold/internal/ledger"
)

// realErrors makes the transport errors a dispatch meets, with real
// sockets: a refused connection, a TLS certificate not trusted, a
// connection closed before the answer, and an answer cut after its headers.
func realErrors(t *testing.T) (refused, tlsBad, resetBeforeHeaders, cutMidBody error) {
	t.Helper()
	post := func(u string) (*http.Response, error) {
		c := &http.Client{Transport: &http.Transport{}}
		t.Cleanup(c.CloseIdleConnections)
		return c.Post(u, "application/json", nil)
	}
	_, refused = post("http://" + freeport.AddrT(t) + "/v1/completions") // nothing listens there

	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(tlsSrv.Close)
	_, tlsBad = post(tlsSrv.URL)

	hangup := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		panic(http.ErrAbortHandler) // close the connection, no answer
	}))
	t.Cleanup(hangup.Close)
	_, resetBeforeHeaders = post(hangup.URL)

	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		_, _ = w.Write([]byte(`{"id":`))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	t.Cleanup(cut.Close)
	resp, err := post(cut.URL)
	if err != nil {
		t.Fatalf("cut server: %v", err)
	}
	_, cutMidBody = io.ReadAll(resp.Body)
	resp.Body.Close()
	for name, e := range map[string]error{"refused": refused, "tls": tlsBad, "reset": resetBeforeHeaders, "cut": cutMidBody} {
		if e == nil {
			t.Fatalf("%s: no error", name)
		}
	}
	return refused, tlsBad, resetBeforeHeaders, cutMidBody
}

func TestOutcomeAndRetryable(t *testing.T) {
	refused, tlsBad, reset, cut := realErrors(t)
	dns := &url.Error{Op: "Post", URL: "http://gpu-9.invalid", Err: &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "gpu-9.invalid", IsNotFound: true}}}
	canceled := fmt.Errorf("post: %w", context.Canceled)
	tests := []struct {
		name      string
		a         Attempt
		want      ledger.Outcome
		retryable bool
	}{
		{"never sent", Attempt{}, ledger.OutcomeNone, false},
		{"answered 200", Attempt{Status: 200}, ledger.OutcomeOK, false},
		{"answered 400", Attempt{Status: 400}, ledger.OutcomeOK, false},
		{"answered 429", Attempt{Status: 429}, ledger.OutcomeOK, false},
		{"answered 500", Attempt{Status: 500}, ledger.OutcomeStatus5xx, true},
		{"answered 501", Attempt{Status: 501}, ledger.OutcomeStatus5xx, false},
		{"answered 502", Attempt{Status: 502}, ledger.OutcomeStatus5xx, true},
		{"answered 503", Attempt{Status: 503}, ledger.OutcomeStatus5xx, true},
		{"answered 504", Attempt{Status: 504}, ledger.OutcomeStatus5xx, true},
		{"answered 505", Attempt{Status: 505}, ledger.OutcomeStatus5xx, false},
		{"503 whose body broke", Attempt{Status: 503, Err: cut}, ledger.OutcomeStatus5xx, true},
		{"connection refused", Attempt{Err: refused}, ledger.OutcomeConnect, true},
		{"name does not resolve", Attempt{Err: dns}, ledger.OutcomeConnect, true},
		{"certificate not trusted", Attempt{Err: tlsBad}, ledger.OutcomeConnect, true},
		{"closed before the headers", Attempt{Err: reset}, ledger.OutcomeReset, true},
		{"answer broke off after the headers", Attempt{Status: 200, Err: cut}, ledger.OutcomeReset, true},
		{"answer cut by the router or client", Attempt{Status: 200, Err: canceled, Cancelled: true}, ledger.OutcomeOK, false},
		{"no byte within the bound", Attempt{Err: canceled, FirstByteTimeout: true}, ledger.OutcomeFirstByteTimeout, true},
		{"first token past the SLO", Attempt{Status: 200, TTFTBreach: true}, ledger.OutcomeTTFTBreach, false},
		{"first token past the SLO, then cut by the client", Attempt{Status: 200, TTFTBreach: true, Err: canceled, Cancelled: true}, ledger.OutcomeTTFTBreach, false},
		{"first token past the SLO, then broke off", Attempt{Status: 200, TTFTBreach: true, Err: cut}, ledger.OutcomeReset, true},
		{"client gone before the headers", Attempt{Err: canceled, Cancelled: true}, ledger.OutcomeNone, false},
		{"lease ended before the headers", Attempt{Err: fmt.Errorf("post: %w", errors.New("lease: fenced")), Cancelled: true}, ledger.OutcomeNone, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.a.Outcome(); got != tc.want {
				t.Errorf("Outcome() = %q, want %q (err %v)", got, tc.want, tc.a.Err)
			}
			if got := tc.a.Retryable(); got != tc.retryable {
				t.Errorf("Retryable() = %v, want %v", got, tc.retryable)
			}
			if o := tc.a.Outcome(); !o.Valid() {
				t.Errorf("Outcome() = %q: not a ledger outcome", o)
			}
		})
	}
}

func TestRequestIDs(t *testing.T) {
	base := NewRequestID()
	if len(base) != 32 || base == NewRequestID() {
		t.Fatalf("NewRequestID() = %q: want 32 hex digits, fresh each call", base)
	}
	seen := map[ledger.RequestID]int{}
	for n := 1; n <= 16; n++ {
		id := RequestID(base, n)
		if m, dup := seen[id]; dup {
			t.Fatalf("attempts %d and %d share request id %q", m, n, id)
		}
		seen[id] = n
		if err := ledger.ValidateAcquire(ledger.AcquireRequest{Pool: "p", Candidates: []ledger.EngineID{"e"}, Tenant: "t", Priority: "x",
			Holder: "h", RequestID: id, KVTokens: 1, Slots: 1, TTL: 1e9}); err != nil {
			t.Errorf("attempt %d's id %q is not a valid request id: %v", n, id, err)
		}
	}
	if got := RequestID(base, 1); got != base {
		t.Errorf("RequestID(base, 1) = %q, want the base %q", got, base)
	}
	if got, want := RequestID("abc", 3), ledger.RequestID("abc#3"); got != want {
		t.Errorf("RequestID(abc, 3) = %q, want %q", got, want)
	}
}

func TestWithout(t *testing.T) {
	cands := []ledger.EngineID{"a", "b", "c", "d"}
	tests := []struct {
		name   string
		failed []ledger.EngineID
		want   []ledger.EngineID
	}{
		{"none failed", nil, []ledger.EngineID{"a", "b", "c", "d"}},
		{"first failed", []ledger.EngineID{"a"}, []ledger.EngineID{"b", "c", "d"}},
		{"two failed", []ledger.EngineID{"c", "a"}, []ledger.EngineID{"b", "d"}},
		{"all failed", cands, []ledger.EngineID{}},
		{"unknown engine", []ledger.EngineID{"z"}, []ledger.EngineID{"a", "b", "c", "d"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Without(cands, tc.failed)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("Without(%v, %v) = %v, want %v", cands, tc.failed, got, tc.want)
			}
		})
	}
	got := Without(cands, nil)
	got[0] = "x"
	if cands[0] != "a" {
		t.Errorf("Without shares its result with the candidates")
	}
}
