package hostile

import (
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs a plain net/http server with srv's timeouts on loopback.
func serve(t *testing.T, srv *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	doneC := make(chan struct{})
	go func() { defer close(doneC); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-doneC })
	return ln.Addr().String()
}

func TestOutcomes(t *testing.T) {
	timeouts := serve(t, &http.Server{ReadHeaderTimeout: 100 * time.Millisecond, IdleTimeout: 100 * time.Millisecond})
	patient := serve(t, &http.Server{ReadHeaderTimeout: time.Minute})
	for _, tc := range []struct {
		name       string
		addr       string
		attack     Attack
		wantClosed bool
		wantStatus int // -1: any (net/http answers a header timeout 400 or not at all)
	}{
		{"idle, closed at the idle timeout", timeouts, Attack{Kind: IdleKeepAlive, Path: "/"}, true, http.StatusOK},
		{"headers, closed at the header timeout", timeouts, Attack{Kind: TrickleHeaders, Path: "/"}, true, -1},
		{"headers, held until stopped", patient, Attack{Kind: TrickleHeaders, Path: "/"}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Start(tc.addr, 3, tc.attack)
			wait := 5 * time.Second // long enough for the closes expected
			if !tc.wantClosed {
				wait = 300 * time.Millisecond // three times the header timeout that does not apply
			}
			if got := r.Wait(wait); got != tc.wantClosed {
				t.Errorf("Wait = %v, want %v", got, tc.wantClosed)
			}
			for i, c := range r.Stop() {
				if c.DialErr != nil || c.ClosedBy != tc.wantClosed || (tc.wantStatus >= 0 && c.Status != tc.wantStatus) {
					t.Errorf("conn %d = %+v, want closed by the server %v, status %d", i, c, tc.wantClosed, tc.wantStatus)
				}
			}
		})
	}
}
