package httpguard

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testutil/testpki"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// errBadKey is the test servers' refusal.
var errBadKey = errors.New("unknown key")

// testServer is a Guard serving a test mux on loopback.
type testServer struct {
	addr string
	g    *Guard
	reg  *prometheus.Registry
}

// serveGuard serves mux through a Guard with cfg: /healthz is a probe,
// /metrics public, everything else needs "Authorization: Bearer good".
func serveGuard(t *testing.T, cfg Config, mux http.Handler) *testServer {
	t.Helper()
	reg := prometheus.NewRegistry()
	g := New(cfg, Options{Probes: []string{"/healthz"}, Public: []string{"/metrics"}, Registerer: reg,
		Authenticate: func(r *http.Request) error {
			if Bearer(r) != "good" {
				return errBadKey
			}
			return nil
		}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := g.Server(mux, nil)
	doneC := make(chan struct{})
	go func() { defer close(doneC); _ = srv.Serve(g.Listener(ln)) }()
	t.Cleanup(func() { _ = srv.Close(); <-doneC })
	return &testServer{addr: ln.Addr().String(), g: g, reg: reg}
}

// fast is a Config with short bounds for tests.
func fast() Config {
	return Config{ReadHeaderTimeout: 300 * time.Millisecond, BodyTimeout: 300 * time.Millisecond,
		WriteTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond, MaxConns: 64, MaxUnauthenticated: 8}
}

// dial opens a raw connection to s, closed at cleanup.
func (s *testServer) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closedByServer reports whether the server closed c within d: reads
// (discarding what comes) end in EOF or a reset.
func closedByServer(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want []string // substrings of the error; none: valid
	}{
		{name: "defaults", edit: func(*Config) {}},
		{name: "explicit conns", edit: func(c *Config) { c.MaxConns = 100 }},
		{name: "zero body timeout", edit: func(c *Config) { c.BodyTimeout = 0 }, want: []string{"--http-body-timeout = 0s: must be at least 10ms"}},
		{name: "every timeout", edit: func(c *Config) { *c = Config{MaxUnauthenticated: 1} },
			want: []string{"--http-read-header-timeout", "--http-body-timeout", "--http-write-timeout", "--http-idle-timeout"}},
		{name: "negative conns", edit: func(c *Config) { c.MaxConns = -1 }, want: []string{"--http-max-conns = -1"}},
		{name: "no unauthenticated", edit: func(c *Config) { c.MaxUnauthenticated = 0 }, want: []string{"--http-max-unauthenticated = 0: want 1.."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			tc.edit(&c)
			err := c.Validate()
			if len(tc.want) == 0 && err != nil {
				t.Fatalf("Validate = %v, want nil", err)
			}
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %v, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestFlags(t *testing.T) {
	c := Defaults()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.RegisterFlags(fs)
	err := fs.Parse([]string{"--http-read-header-timeout=1s", "--http-body-timeout=2s", "--http-write-timeout=3s",
		"--http-idle-timeout=4s", "--http-max-conns=5", "--http-max-unauthenticated=6"})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{ReadHeaderTimeout: time.Second, BodyTimeout: 2 * time.Second, WriteTimeout: 3 * time.Second,
		IdleTimeout: 4 * time.Second, MaxConns: 5, MaxUnauthenticated: 6}
	if c != want {
		t.Errorf("parsed %+v, want %+v", c, want)
	}
}

func TestConnLimit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxConns int
		nofile   uint64
		want     int
		wantAuto bool
	}{
		{name: "explicit", maxConns: 500, nofile: 256, want: 500},
		{name: "256 descriptors", nofile: 256, want: 96, wantAuto: true},
		{name: "1024 descriptors", nofile: 1024, want: 480, wantAuto: true},
		{name: "tiny", nofile: 20, want: minAutoConns, wantAuto: true},
		{name: "unknown", nofile: 0, want: MaxAutoConns, wantAuto: true},
		{name: "huge", nofile: 1 << 20, want: MaxAutoConns, wantAuto: true},
		{name: "unlimited", nofile: ^uint64(0), want: MaxAutoConns, wantAuto: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{MaxConns: tc.maxConns}
			got, auto := c.ConnLimit(tc.nofile)
			if got != tc.want || auto != tc.wantAuto {
				t.Errorf("ConnLimit(%d) = %d, %v; want %d, %v", tc.nofile, got, auto, tc.want, tc.wantAuto)
			}
		})
	}
}

func TestBearer(t *testing.T) {
	for _, tc := range []struct{ name, header, want string }{
		{"bearer", "Bearer sk-1", "sk-1"},
		{"lower case scheme", "bearer sk-1", "sk-1"},
		{"padded", "Bearer   sk-1 ", "sk-1"},
		{"basic", "Basic c2stMQ==", ""},
		{"none", "", ""},
		{"scheme only", "Bearer", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			if got := Bearer(r); got != tc.want {
				t.Errorf("Bearer(%q) = %q, want %q", tc.header, got, tc.want)
			}
		})
	}
}

// A request without a credential is answered 401 on its headers, and the
// connection closed, without a byte of its announced body: plain net/http
// drains the body first, so a client that sends it one byte at a time (or
// never) held the answer and the connection.
func TestRefusedBeforeTheBody(t *testing.T) {
	reached := make(chan struct{}, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/x", func(http.ResponseWriter, *http.Request) { reached <- struct{}{} })
	s := serveGuard(t, Defaults(), mux) // long timeouts: nothing here waits for one
	for _, auth := range []string{"", "Authorization: Bearer bad\r\n"} {
		c := s.dial(t)
		fmt.Fprintf(c, "POST /v1/x HTTP/1.1\r\nHost: x\r\n%sContent-Length: 100000\r\n\r\n{", auth)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("auth %q: no answer before the body: %v", auth, err)
		}
		if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
			t.Errorf("auth %q: status %d, close %v; want 401 and the connection closed", auth, resp.StatusCode, resp.Close)
		}
		if !closedByServer(c, 10*time.Second) {
			t.Errorf("auth %q: the connection stayed open after the refusal", auth)
		}
	}
	if got := count(s.g.cut.WithLabelValues(cutUnauthenticated)); got != 2 {
		t.Errorf("requests_cut_total{reason=unauthenticated} = %v, want 2", got)
	}
	select {
	case <-reached:
		t.Error("the handler ran for a refused request")
	default:
	}
}

// A body that does not arrive within BodyTimeout (a Content-Length longer
// than what is sent) fails the handler's read, and the connection closes.
func TestBodyTimeout(t *testing.T) {
	readErr := make(chan error, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/x", func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
		http.Error(w, "bad body", http.StatusBadRequest)
	})
	s := serveGuard(t, fast(), mux)
	c := s.dial(t)
	fmt.Fprint(c, "POST /v1/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\nContent-Length: 100\r\n\r\n{\"a\":")
	select {
	case err := <-readErr:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("body read error = %v, want a deadline error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the body read did not end")
	}
	if !closedByServer(c, 10*time.Second) {
		t.Error("the connection stayed open")
	}
	if got := count(s.g.cut.WithLabelValues(cutBodyTimeout)); got != 1 {
		t.Errorf("requests_cut_total{reason=body_timeout} = %v, want 1", got)
	}
}

// A stream that is read goes on well past every timeout, with its request
// body read first (the body deadline is lifted, so the server's background
// read does not cancel the request).
func TestStreamOutlivesTimeouts(t *testing.T) {
	const chunks = 60 // × 20ms: four times every timeout of fast()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/stream", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc := http.NewResponseController(w)
		for i := range chunks {
			if r.Context().Err() != nil {
				return
			}
			fmt.Fprintf(w, "data: %d\n\n", i)
			if err := rc.Flush(); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	s := serveGuard(t, fast(), mux)
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.addr+"/v1/stream", strings.NewReader(`{"x":1}`))
	req.Header.Set("Authorization", "Bearer good")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("stream read: %v after %q", err, data)
	}
	if got := strings.Count(string(data), "data: "); got != chunks {
		t.Errorf("stream carried %d events, want %d", got, chunks)
	}
}

// A client that stops reading an answer is cut: the handler's write fails.
func TestStalledReaderCut(t *testing.T) {
	writeErr := make(chan error, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/big", func(w http.ResponseWriter, _ *http.Request) {
		buf := make([]byte, 1<<20)
		for range 1024 { // 1 GiB: far more than socket buffers hold
			if _, err := w.Write(buf); err != nil {
				writeErr <- err
				return
			}
		}
		writeErr <- nil
	})
	s := serveGuard(t, fast(), mux)
	c := s.dial(t)
	fmt.Fprint(c, "GET /v1/big HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\n\r\n")
	select {
	case err := <-writeErr:
		if err == nil {
			t.Error("1 GiB written to a client that reads nothing")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the write to a client that reads nothing never failed")
	}
}

// A keep-alive connection with no request for IdleTimeout is closed.
func TestIdleClosed(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	s := serveGuard(t, fast(), mux)
	c := s.dial(t)
	fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("probe: %v %v, want a 200 kept alive", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("idle connection: read %v, want EOF (closed by the server)", err)
	}
}

// At the limit a new connection sheds the stalest idle or reading one,
// never one being answered; when every one is answered the new one is
// refused.
func TestShedding(t *testing.T) {
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /v1/hold", func(w http.ResponseWriter, _ *http.Request) {
		<-release
		fmt.Fprintln(w, "held")
	})
	cfg := Defaults()
	cfg.MaxConns = 4
	s := serveGuard(t, cfg, mux)

	// Four silent connections, the first the stalest.
	var silent []net.Conn
	for range 4 {
		silent = append(silent, s.dial(t))
		waitOpen(t, s, len(silent))
	}
	// A legitimate request gets in: the stalest silent one is shed.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + s.addr + "/healthz")
	if err != nil {
		t.Fatalf("probe at the limit: %v", err)
	}
	resp.Body.Close()
	if !closedByServer(silent[0], 10*time.Second) {
		t.Error("the stalest silent connection was not shed")
	}
	for i, c := range silent[1:] {
		if closedByServer(c, 50*time.Millisecond) {
			t.Errorf("silent connection %d was shed; only the stalest should be", i+1)
		}
	}
	if got := count(s.g.t.shed.WithLabelValues(shedIdle)); got != 1 {
		t.Errorf("connections_shed_total{reason=idle} = %v, want 1", got)
	}

	// Four held requests: every connection is being answered.
	done := make(chan error, 4)
	for range 4 {
		go func() {
			req, _ := http.NewRequest(http.MethodGet, "http://"+s.addr+"/v1/hold", nil)
			req.Header.Set("Authorization", "Bearer good")
			resp, err := client.Do(req)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			done <- err
		}()
	}
	waitServing(t, s, 4)
	c := s.dial(t)
	if !closedByServer(c, 10*time.Second) {
		t.Error("a fifth connection while four are answered was not refused")
	}
	if got := count(s.g.t.shed.WithLabelValues(shedRefused)); got < 1 {
		t.Errorf("connections_shed_total{reason=refused} = %v, want at least 1 (idle %v, reading %v, open %d)", got,
			count(s.g.t.shed.WithLabelValues(shedIdle)), count(s.g.t.shed.WithLabelValues(shedReading)), s.g.t.open())
	}
	close(release)
	for range 4 {
		if err := <-done; err != nil {
			t.Errorf("held request: %v (an answered connection was shed)", err)
		}
	}
}

func waitOpen(t *testing.T, s *testServer, n int) {
	t.Helper()
	waitFor(t, func() bool { return s.g.t.open() == n }, "open connections = %d", n)
}

// waitServing waits until n connections are serving.
func waitServing(t *testing.T, s *testServer, n int) {
	t.Helper()
	waitFor(t, func() bool {
		s.g.t.mu.Lock()
		defer s.g.t.mu.Unlock()
		k := 0
		for c := range s.g.t.conns {
			if c.serving > 0 {
				k++
			}
		}
		return k == n
	}, "%d connections serving", n)
}

func waitFor(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: "+format, args...)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Past MaxUnauthenticated a public request is answered 503 and a refusal
// dropped; probes and authenticated requests are not bounded.
func TestUnauthenticatedBound(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		entered <- struct{}{}
		<-release
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /v1/x", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "x") })
	cfg := fast()
	cfg.MaxUnauthenticated = 1
	s := serveGuard(t, cfg, mux)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	held := make(chan error, 1)
	go func() {
		resp, err := client.Get("http://" + s.addr + "/metrics")
		if err == nil {
			resp.Body.Close()
		}
		held <- err
	}()
	<-entered
	get := func(path, key string) (int, error) {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+s.addr+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	for _, tc := range []struct {
		name, path, key string
		want            int // 0: dropped unanswered
	}{
		{"public over the bound", "/metrics", "", http.StatusServiceUnavailable},
		{"probe", "/healthz", "", http.StatusOK},
		{"authenticated", "/v1/x", "good", http.StatusOK},
		{"refusal over the bound", "/v1/x", "bad", 0},
	} {
		code, err := get(tc.path, tc.key)
		if tc.want == 0 {
			if err == nil {
				t.Errorf("%s: answered %d, want dropped unanswered", tc.name, code)
			}
			continue
		}
		if err != nil || code != tc.want {
			t.Errorf("%s: %d %v, want %d", tc.name, code, err, tc.want)
		}
	}
	close(release)
	if err := <-held; err != nil {
		t.Errorf("held public request: %v", err)
	}
	if got := count(s.g.cut.WithLabelValues(cutOverLimit)); got != 2 {
		t.Errorf("requests_cut_total{reason=over_limit} = %v, want 2", got)
	}
	if code, err := get("/v1/x", "bad"); err != nil || code != http.StatusUnauthorized {
		t.Errorf("refusal under the bound: %d %v, want 401", code, err)
	}
}

// count reads a counter.
func count(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// Over TLS (http.Server.ServeTLS wraps the Guard's listener, and HTTP/2 is
// negotiated) connections are tracked through the TLS connection, the
// credential is checked first and a held connection counts while it
// serves.
func TestTLSAndHTTP2(t *testing.T) {
	ca := testpki.New(t, "guard-ca")
	_, _, pair := ca.Server(t, "guard")
	release, entered := make(chan struct{}), make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/hold", func(w http.ResponseWriter, _ *http.Request) {
		entered <- struct{}{}
		<-release
		fmt.Fprintln(w, "held")
	})
	cfg := fast()
	cfg.MaxConns = 2
	g := New(cfg, Options{Authenticate: func(r *http.Request) error {
		if Bearer(r) != "good" {
			return errBadKey
		}
		return nil
	}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := g.Server(mux, nil)
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	doneC := make(chan struct{})
	go func() { defer close(doneC); _ = srv.ServeTLS(g.Listener(ln), "", "") }()
	defer func() { _ = srv.Close(); <-doneC }()

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	url := "https://" + ln.Addr().String() + "/v1/hold"
	get := func(key string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		return client.Do(req)
	}
	resp, err := get("bad")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.ProtoMajor != 2 {
		t.Errorf("bad key: %d over HTTP/%d, want 401 over HTTP/2", resp.StatusCode, resp.ProtoMajor)
	}
	held := make(chan error, 1)
	go func() {
		resp, err := get("good")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		held <- err
	}()
	<-entered
	waitFor(t, func() bool {
		g.t.mu.Lock()
		defer g.t.mu.Unlock()
		for c := range g.t.conns {
			if c.serving > 0 {
				return true
			}
		}
		return false
	}, "the TLS connection serving")
	close(release)
	if err := <-held; err != nil {
		t.Errorf("held request over TLS: %v", err)
	}
}
