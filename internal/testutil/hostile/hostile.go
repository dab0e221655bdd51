// Package hostile is the red team's slow and idle HTTP clients, for tests
// of servers that must keep answering while they hold connections:
// Start opens n raw TCP connections that each play one Kind, and Stop
// reports, per connection, whether and when the server closed it and what
// it answered.
package hostile

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// Kind is one hostile client's behaviour.
type Kind int

const (
	// TrickleBody sends a POST's headers (with Header: none, or a
	// credential), announcing a 100,000-byte body, then the body one byte
	// every 100ms.
	TrickleBody Kind = iota
	// TrickleHeaders sends a request's headers one byte every 100ms and
	// never ends them (slowloris).
	TrickleHeaders
	// IdleKeepAlive sends one GET of Path (a probe), reads the answer and
	// then holds the kept-alive connection without a word.
	IdleKeepAlive
	// ShortBody sends a POST with Header (a credential) announcing a
	// 1,000-byte body and sends 9 bytes of it: a Content-Length longer
	// than the body.
	ShortBody
)

// Attack is what the connections do.
type Attack struct {
	Kind Kind
	// Path is the request's path.
	Path string
	// Header is added verbatim to the request's headers, e.g.
	// "Authorization: Bearer sk-1\r\n" (ShortBody).
	Header string
}

// Conn is one hostile connection's outcome.
type Conn struct {
	// DialErr is why the connection could not be opened.
	DialErr error
	// ClosedBy says the server closed the connection (EOF or reset) before
	// Stop; ClosedAfter is then how long after the hostile request began.
	ClosedBy    bool
	ClosedAfter time.Duration
	// Status is the status code of the first answer, 0 if none.
	Status int
}

// Run is an attack under way: Start it, Stop it.
type Run struct {
	stopC chan struct{}
	wg    sync.WaitGroup

	mu    sync.Mutex // guards conns and open
	conns []Conn
	open  int
}

// Start opens n connections to addr concurrently, each playing a, and
// returns once every one is open (or failed to open) and has sent its
// first bytes.
func Start(addr string, n int, a Attack) *Run {
	r := &Run{stopC: make(chan struct{}), conns: make([]Conn, n)}
	var started sync.WaitGroup
	started.Add(n)
	r.wg.Add(n)
	for i := range n {
		go func() {
			defer r.wg.Done()
			r.play(i, addr, a, started.Done)
		}()
	}
	started.Wait()
	return r
}

// Open is how many connections the server has not closed yet.
func (r *Run) Open() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.open
}

// Wait waits up to d for the server to close every connection and
// reports whether it did.
func (r *Run) Wait(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for r.Open() > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// Stop closes the connections still open and returns every connection's
// outcome.
func (r *Run) Stop() []Conn {
	close(r.stopC)
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Conn(nil), r.conns...)
}

func (r *Run) play(i int, addr string, a Attack, started func()) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		r.mu.Lock()
		r.conns[i].DialErr = err
		r.mu.Unlock()
		started()
		return
	}
	defer c.Close()
	r.mu.Lock()
	r.open++
	r.mu.Unlock()
	begin := time.Now()
	first, rest := a.request()
	_, werr := c.Write(first)
	started()

	// The reader sees the answer and the close.
	readC := make(chan struct{})
	var status int
	go func() {
		defer close(readC)
		status = readStatus(c)
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for werr == nil && len(rest) > 0 {
		select {
		case <-readC:
			werr = io.EOF
		case <-r.stopC:
			werr = io.EOF
		case <-tick.C:
			_, werr = c.Write(rest[:1])
			rest = rest[1:]
		}
	}
	closedBy := false
	select {
	case <-readC:
		closedBy = true
	case <-r.stopC:
		_ = c.Close()
		<-readC
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.open--
	r.conns[i] = Conn{ClosedBy: closedBy, ClosedAfter: time.Since(begin), Status: status}
}

// request is what a sends at once, and what it then trickles.
func (a Attack) request() (first, trickle []byte) {
	switch a.Kind {
	case TrickleBody:
		return []byte("POST " + a.Path + " HTTP/1.1\r\nHost: leasehold\r\nContent-Type: application/json\r\n" + a.Header + "Content-Length: 100000\r\n\r\n"),
			bytes.Repeat([]byte(" "), 100000)
	case TrickleHeaders:
		return []byte("POST " + a.Path + " HTTP/1.1\r\nHost: leasehold\r\n"), bytes.Repeat([]byte("X-Slow: yes\r\n"), 10000)
	case IdleKeepAlive:
		return []byte("GET " + a.Path + " HTTP/1.1\r\nHost: leasehold\r\n" + a.Header + "\r\n"), nil
	case ShortBody:
		return []byte("POST " + a.Path + " HTTP/1.1\r\nHost: leasehold\r\nContent-Type: application/json\r\n" + a.Header + "Content-Length: 1000\r\n\r\n{\"model\":"), nil
	}
	panic(fmt.Sprintf("hostile: unknown kind %d", a.Kind))
}

// readStatus reads c until it is closed and returns the first answer's
// status code (0 if none came).
func readStatus(c net.Conn) int {
	var head [12]byte // "HTTP/1.1 401"
	n, _ := io.ReadFull(c, head[:])
	_, _ = io.Copy(io.Discard, c)
	if n < len(head) {
		return 0
	}
	code, err := strconv.Atoi(string(head[9:12]))
	if err != nil {
		return 0
	}
	return code
}
