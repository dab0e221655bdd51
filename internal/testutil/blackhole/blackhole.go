// Package blackhole is a TCP peer that accepts connections and never
// answers: a hung store or reserver, for tests of what a client does when
// the dial succeeds and no reply ever comes (a closed port, by contrast,
// refuses at once). It owns its listener and the connections it accepted,
// and closes them all when the test ends.
package blackhole

import (
	"net"
	"sync"
	"testing"
)

// Listener is a started black hole.
type Listener struct {
	ln net.Listener
	// mu guards conns, every accepted connection, kept open (unread) until
	// Close.
	mu    sync.Mutex
	conns []net.Conn
	doneC chan struct{} // closed when the accept loop returned
}

// Start listens on a free loopback port and accepts until the test ends.
func Start(t testing.TB) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("blackhole: %v", err)
	}
	l := &Listener{ln: ln, doneC: make(chan struct{})}
	go l.accept()
	t.Cleanup(l.Close)
	return l
}

func (l *Listener) accept() {
	defer close(l.doneC)
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
}

// Addr is the host:port it listens on.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// Accepted reports how many connections it has accepted so far.
func (l *Listener) Accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// Close stops accepting and closes every accepted connection; it is
// idempotent.
func (l *Listener) Close() {
	_ = l.ln.Close()
	<-l.doneC
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
}
