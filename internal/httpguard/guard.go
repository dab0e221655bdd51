package httpguard

import (
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons of leasehold_http_requests_cut_total.
const (
	cutUnauthenticated = "unauthenticated" // refused on its headers, body unread
	cutOverLimit       = "over_limit"      // past MaxUnauthenticated
	cutBodyTimeout     = "body_timeout"    // body not in within BodyTimeout
)

// Options are a Guard's policy and collaborators.
type Options struct {
	// Probes are paths (exact URL paths) served to anyone and never
	// counted against MaxUnauthenticated, so that a flood cannot fail
	// them: keep their handlers cheap (/healthz, /readyz).
	Probes []string
	// Public are paths served without a credential, counted against
	// MaxUnauthenticated (/metrics).
	Public []string
	// Authenticate checks the credential of a request to any other path,
	// on its headers alone: it must not read the body. A nil error lets
	// the request through; nil Authenticate refuses every such request.
	Authenticate func(*http.Request) error
	// Refuse answers a request Authenticate refused (401 or 403); the
	// Guard has already set "Connection: close". Nil answers 401 with
	// the error's text.
	Refuse func(http.ResponseWriter, *http.Request, error)
	// Logger receives the connection limit chosen by New; nil discards.
	Logger *slog.Logger
	// Registerer receives the leasehold_http_* metrics; nil keeps them
	// unregistered.
	Registerer prometheus.Registerer
}

// Guard serves a handler under Config's bounds: build the server with
// Server and serve it on Listener(ln). One Guard serves one listener.
type Guard struct {
	cfg    Config
	opts   Options
	probes map[string]bool
	public map[string]bool
	t      *tracker
	limit  int
	cut    *prometheus.CounterVec // reason
	// unauth counts requests in flight without a credential (probes
	// aside).
	unauth atomic.Int64
}

// New returns a Guard for cfg, which should have passed Validate: a field
// Validate refuses is taken at its default instead, so a Guard never runs
// unbounded. It reads RLIMIT_NOFILE for the connection limit (see
// Config.ConnLimit) and logs the limit chosen.
func New(cfg Config, opts Options) *Guard {
	def := Defaults()
	for _, f := range []struct{ v, d *time.Duration }{
		{&cfg.ReadHeaderTimeout, &def.ReadHeaderTimeout}, {&cfg.BodyTimeout, &def.BodyTimeout},
		{&cfg.WriteTimeout, &def.WriteTimeout}, {&cfg.IdleTimeout, &def.IdleTimeout},
	} {
		if *f.v < minTimeout {
			*f.v = *f.d
		}
	}
	if cfg.MaxConns < 0 || cfg.MaxConns > maxConns {
		cfg.MaxConns = 0
	}
	if cfg.MaxUnauthenticated < 1 || cfg.MaxUnauthenticated > maxConns {
		cfg.MaxUnauthenticated = def.MaxUnauthenticated
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Guard{cfg: cfg, opts: opts, probes: set(opts.Probes), public: set(opts.Public)}
	nofile := fileLimit()
	limit, auto := cfg.ConnLimit(nofile)
	g.limit = limit
	if !auto && nofile > 0 && uint64(limit) > nofile-min(nofile, ReservedFDs) {
		opts.Logger.Warn("--http-max-conns is above what the file descriptor limit leaves: at the limit accept fails instead of shedding; raise the limit (ulimit -n) or lower --http-max-conns",
			"max_conns", limit, "rlimit_nofile", nofile)
	} else {
		opts.Logger.Info("http connection limit", "max_conns", limit, "derived_from_rlimit_nofile", auto, "rlimit_nofile", nofile)
	}
	const ns, sub = "leasehold", "http"
	shed := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "connections_shed_total",
		Help: "Client connections closed at --http-max-conns, by reason: idle (new or keep-alive, closed to admit a new one), reading (still sending headers or body, closed to admit a new one), refused (the new one, every open one being answered)."},
		[]string{"reason"})
	g.cut = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "requests_cut_total",
		Help: "Requests refused or cut before their handler, by reason: unauthenticated (no valid credential: answered 401/403 before the body was read), over_limit (past --http-max-unauthenticated: 503 or dropped), body_timeout (body not in within --http-body-timeout)."},
		[]string{"reason"})
	g.t = newTracker(limit, cfg.WriteTimeout, shed)
	if r := opts.Registerer; r != nil {
		r.MustRegister(shed, g.cut,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "connections",
				Help: "Open client connections."}, func() float64 { return float64(g.t.open()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "connections_limit",
				Help: "The client connection limit in force (--http-max-conns, or derived from RLIMIT_NOFILE)."}, func() float64 { return float64(limit) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "unauthenticated_in_flight",
				Help: "Requests in flight without a credential (public paths and refusals; probes aside)."}, func() float64 { return float64(g.unauth.Load()) }))
	}
	return g
}

func set(paths []string) map[string]bool {
	m := make(map[string]bool, len(paths))
	for _, p := range paths {
		m[p] = true
	}
	return m
}

// ConnLimit is the connection limit in force.
func (g *Guard) ConnLimit() int { return g.limit }

// Listener wraps ln: every accepted connection is tracked and bounded
// (shedding at the limit, per-write deadlines). Serve the Guard's Server
// on it; with TLS, wrap before the TLS listener (http.Server.ServeTLS
// does).
func (g *Guard) Listener(ln net.Listener) net.Listener { return listener{Listener: ln, t: g.t} }

// Server returns an http.Server serving h through the Guard, with
// errorLog as its ErrorLog (nil: the log package's). It sets
// ReadHeaderTimeout, IdleTimeout, ConnState and ConnContext; it sets no
// ReadTimeout or WriteTimeout, which would cut long streams.
func (g *Guard) Server(h http.Handler, errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler: g.Wrap(h), ErrorLog: errorLog,
		ReadHeaderTimeout: g.cfg.ReadHeaderTimeout, IdleTimeout: g.cfg.IdleTimeout,
		ConnState: g.t.connState,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc := unwrap(c); tc != nil {
				return context.WithValue(ctx, connKey{}, tc)
			}
			return ctx
		},
	}
}

// connKey keys a request's trackedConn in its context.
type connKey struct{}

// Wrap is the Guard's request middleware (Server installs it): the
// credential check before the body, the body deadline, and the phase
// kept for shedding.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.serve(next, w, r) })
}

func (g *Guard) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	tc, _ := r.Context().Value(connKey{}).(*trackedConn)
	gw := &writer{ResponseWriter: w, rc: http.NewResponseController(w), tc: tc}
	defer gw.finish()
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		_ = gw.rc.SetReadDeadline(time.Now().Add(g.cfg.BodyTimeout))
		// A shallow copy: the server keeps its own view of the body.
		r = r.WithContext(r.Context())
		r.Body = &body{ReadCloser: r.Body, w: gw, g: g}
	} else {
		gw.bodyEnd()
	}
	switch p := r.URL.Path; {
	case g.probes[p]:
	case g.public[p]:
		if !g.enterUnauth() {
			g.cut.WithLabelValues(cutOverLimit).Inc()
			gw.Header().Set("Connection", "close")
			gw.Header().Set("Retry-After", "1")
			http.Error(gw, "too many requests without a credential in flight", http.StatusServiceUnavailable)
			return
		}
		defer g.unauth.Add(-1)
	default:
		var err error = errNoAuthenticator
		if g.opts.Authenticate != nil {
			err = g.opts.Authenticate(r)
		}
		if err == nil {
			break
		}
		if !g.enterUnauth() {
			g.cut.WithLabelValues(cutOverLimit).Inc()
			panic(http.ErrAbortHandler) // dropped: closed unanswered, unlogged
		}
		defer g.unauth.Add(-1)
		g.cut.WithLabelValues(cutUnauthenticated).Inc()
		gw.Header().Set("Connection", "close")
		if g.opts.Refuse != nil {
			g.opts.Refuse(gw, r, err)
		} else {
			http.Error(gw, err.Error(), http.StatusUnauthorized)
		}
		return
	}
	next.ServeHTTP(gw, r)
}

var errNoAuthenticator = errors.New("httpguard: a credential is required")

// enterUnauth counts a request without a credential in, false (not
// counted) past MaxUnauthenticated.
func (g *Guard) enterUnauth() bool {
	if g.unauth.Add(1) > int64(g.cfg.MaxUnauthenticated) {
		g.unauth.Add(-1)
		return false
	}
	return true
}

// writer sees the answer begin: an answer that begins before the body was
// read to its end closes the connection and cuts the body, so the server
// never drains a body nobody reads. It keeps the connection's phase.
type writer struct {
	http.ResponseWriter
	rc *http.ResponseController
	tc *trackedConn

	// mu guards the fields below (the body may be read on another
	// goroutine than the one that writes).
	mu       sync.Mutex
	bodyDone bool // the body was read to its end, or there is none
	started  bool // the answer began
	begun    bool // tc.begin was called
}

// bodyEnd records the body read to its end: its deadline is lifted (it
// must not bound the answer, nor the server's background read that
// notices a client going away) and the connection is serving.
func (w *writer) bodyEnd() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.bodyDone {
		return
	}
	w.bodyDone = true
	if !w.started {
		_ = w.rc.SetReadDeadline(time.Time{})
	}
	w.beginLocked()
}

func (w *writer) beginLocked() {
	if !w.begun {
		w.begun = true
		w.tc.begin()
	}
}

// start runs before the answer's first byte.
func (w *writer) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return
	}
	w.started = true
	if !w.bodyDone {
		w.Header().Set("Connection", "close")
		_ = w.rc.SetReadDeadline(time.Now())
	}
	w.beginLocked()
}

// finish runs when the handler returns.
func (w *writer) finish() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.begun {
		w.tc.end()
	}
}

func (w *writer) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.start()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *writer) Write(b []byte) (int, error) {
	w.start()
	return w.ResponseWriter.Write(b)
}

// FlushError flushes through http.ResponseController.
func (w *writer) FlushError() error {
	w.start()
	return w.rc.Flush()
}

// Flush implements http.Flusher.
func (w *writer) Flush() { _ = w.FlushError() }

// Unwrap lets http.ResponseController reach the server's writer.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// body is a request body under the Guard: its end lifts the body
// deadline, and a deadline that passes is counted.
type body struct {
	io.ReadCloser
	w        *writer
	g        *Guard
	timedOut bool
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.w.bodyEnd()
	case err != nil && !b.timedOut && errors.Is(err, os.ErrDeadlineExceeded):
		b.timedOut = true
		b.w.mu.Lock()
		started := b.w.started // then the Guard cut the body itself
		b.w.mu.Unlock()
		if !started {
			b.g.cut.WithLabelValues(cutBodyTimeout).Inc()
		}
	}
	return n, err
}

// Bearer returns the token of an "Authorization: Bearer <token>" header
// (the scheme in any case, the token trimmed), "" when there is none.
func Bearer(r *http.Request) string {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}
