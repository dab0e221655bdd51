package httpguard

// Connection tracking: the listener admits every accepted connection into
// the tracker, shedding one when the limit is reached; the server's
// ConnState hook and the request middleware keep each connection's phase,
// which says whether it may be shed and since when it made no progress.

import (
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons of leasehold_http_connections_shed_total.
const (
	shedIdle    = "idle"    // new, or keep-alive between requests
	shedReading = "reading" // a request's headers or body still arriving
	shedRefused = "refused" // the new connection: every open one was being answered
)

// writeChunk is the most written under one write deadline.
const writeChunk = 64 << 10

// tracker owns the set of open connections and sheds at its limit.
type tracker struct {
	limit        int
	writeTimeout time.Duration
	shed         *prometheus.CounterVec // reason

	// mu guards conns and the fields of every trackedConn marked so.
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

func newTracker(limit int, writeTimeout time.Duration, shed *prometheus.CounterVec) *tracker {
	return &tracker{limit: limit, writeTimeout: writeTimeout, shed: shed, conns: map[*trackedConn]struct{}{}}
}

// trackedConn is an accepted connection: every Write makes progress
// within the write timeout or fails, and the tracker knows its phase.
type trackedConn struct {
	net.Conn
	t *tracker

	// Guarded by t.mu:
	state http.ConnState // the last state the server reported
	// serving counts answers under way on the connection: requests whose
	// body was read to its end (or that have none) or whose answer
	// began. A connection serving something is never shed.
	serving int
	since   time.Time // last progress: accepted, a state change, an answer done
	gone    bool      // no longer tracked: closed, hijacked or shed
}

// admit tracks c, shedding a connection first when the limit is reached.
// It returns nil when c itself was closed because nothing could be shed.
func (t *tracker) admit(c net.Conn) *trackedConn {
	tc := &trackedConn{Conn: c, t: t, state: http.StateNew, since: time.Now()}
	t.mu.Lock()
	var victim *trackedConn
	reason := shedIdle
	if len(t.conns) >= t.limit {
		if victim = t.stalestLocked(); victim == nil {
			t.mu.Unlock()
			t.shed.WithLabelValues(shedRefused).Inc() // counted before the client can see it
			_ = c.Close()
			return nil
		}
		if victim.state == http.StateActive {
			reason = shedReading
		}
		victim.untrackLocked()
	}
	t.conns[tc] = struct{}{}
	t.mu.Unlock()
	if victim != nil {
		t.shed.WithLabelValues(reason).Inc()
		_ = victim.Conn.Close()
	}
	return tc
}

// stalestLocked is the sheddable connection that made no progress for the
// longest, nil if every one is serving.
func (t *tracker) stalestLocked() *trackedConn {
	var v *trackedConn
	for c := range t.conns {
		if c.serving == 0 && (v == nil || c.since.Before(v.since)) {
			v = c
		}
	}
	return v
}

func (tc *trackedConn) untrackLocked() {
	if !tc.gone {
		tc.gone = true
		delete(tc.t.conns, tc)
	}
}

// open is the number of connections tracked.
func (t *tracker) open() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// connState is the http.Server ConnState hook.
func (t *tracker) connState(c net.Conn, s http.ConnState) {
	tc := unwrap(c)
	if tc == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch s {
	case http.StateClosed, http.StateHijacked:
		tc.untrackLocked()
	default:
		tc.state, tc.since = s, time.Now()
	}
}

// begin and end bracket an answer under way; nil (a request not served
// through a Guard's listener) is a no-op.
func (tc *trackedConn) begin() {
	if tc == nil {
		return
	}
	tc.t.mu.Lock()
	tc.serving++
	tc.t.mu.Unlock()
}

func (tc *trackedConn) end() {
	if tc == nil {
		return
	}
	tc.t.mu.Lock()
	if tc.serving--; tc.serving == 0 {
		tc.since = time.Now()
	}
	tc.t.mu.Unlock()
}

// Write writes b in pieces of at most 64 KiB, each under a fresh write
// deadline: a peer that stops reading fails the write after the write
// timeout, one that keeps reading never does.
func (tc *trackedConn) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return tc.Conn.Write(b)
	}
	n := 0
	for n < len(b) {
		if err := tc.Conn.SetWriteDeadline(time.Now().Add(tc.t.writeTimeout)); err != nil {
			return n, err
		}
		m, err := tc.Conn.Write(b[n:min(len(b), n+writeChunk)])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Close untracks and closes the connection.
func (tc *trackedConn) Close() error {
	tc.t.mu.Lock()
	tc.untrackLocked()
	tc.t.mu.Unlock()
	return tc.Conn.Close()
}

// CloseWrite half-closes a TCP connection, so that net/http's lingering
// close (a FIN, then a pause before the RST) still works through the
// wrapper.
func (tc *trackedConn) CloseWrite() error {
	if cw, ok := tc.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// unwrap finds the trackedConn under c (a TLS connection wraps it).
func unwrap(c net.Conn) *trackedConn {
	for c != nil {
		switch v := c.(type) {
		case *trackedConn:
			return v
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// listener admits every accepted connection into its tracker; a
// connection refused at the limit is closed and the next one accepted,
// so Accept never waits on the limit.
type listener struct {
	net.Listener
	t *tracker
}

func (l listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc := l.t.admit(c); tc != nil {
			return tc, nil
		}
	}
}
