package chaos

// The fault proxy: a TCP forwarder on a loopback port in front of one
// target (the ledger, or one engine) for one router. Its mode decides what
// happens to the bytes: pass, drop (bytes are held, connections stay
// open, as a black-holing network does), latency (every chunk waits), reset (open
// connections are reset and new ones closed at once). Mode changes apply to
// connections already open.

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// proxyMode is what a Proxy does to traffic.
type proxyMode struct {
	kind    string // "" (pass), drop, latency, reset
	latency time.Duration
}

// Proxy forwards one loopback listener to one target address.
type Proxy struct {
	ln     net.Listener
	target string
	mode   atomic.Pointer[proxyMode]

	mu    sync.Mutex // guards conns and closed
	conns map[net.Conn]struct{}
	// closed is set by Close; no connection is tracked after it.
	closed bool

	wg sync.WaitGroup // accept loop and pipes
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.mode.Store(&proxyMode{})
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set changes the mode: "" or "pass", drop, latency (with d), reset.
// Reset closes every open connection with RST.
func (p *Proxy) Set(kind string, d time.Duration) {
	if kind == "pass" {
		kind = ""
	}
	p.mode.Store(&proxyMode{kind: kind, latency: d})
	if kind == ModeReset {
		p.mu.Lock()
		for c := range p.conns {
			resetConn(c)
		}
		p.mu.Unlock()
	}
}

// Close stops the proxy, closes every connection and waits for its
// goroutines.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.mode.Load().kind == ModeReset {
			resetConn(in)
			continue
		}
		if !p.track(in) {
			_ = in.Close()
			return
		}
		p.wg.Add(1)
		go p.serve(in)
	}
}

func (p *Proxy) serve(in net.Conn) {
	defer p.wg.Done()
	defer p.untrack(in)
	out, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		resetConn(in)
		return
	}
	if !p.track(out) {
		_ = out.Close()
		return
	}
	defer p.untrack(out)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(out, in) }()
	go func() { defer wg.Done(); p.pipe(in, out) }()
	wg.Wait()
}

// pipe copies src to dst under the current mode. At src's EOF it half-closes
// dst; on any other end it closes both so the other pipe ends too.
func (p *Proxy) pipe(dst, src net.Conn) {
	closeBoth := func() { _ = dst.Close(); _ = src.Close() }
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			m := p.mode.Load()
			for m.kind == ModeDrop && !p.isClosed() {
				// Held, as a black-holed network holds them: TCP
				// delivers them if the partition heals before either
				// side gives up.
				time.Sleep(20 * time.Millisecond)
				m = p.mode.Load()
			}
			switch m.kind {
			case ModeLatency:
				time.Sleep(m.latency)
			case ModeReset:
				resetConn(src)
				resetConn(dst)
				return
			}
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					closeBoth()
					return
				}
			}
		}
		if err != nil {
			if tc, ok := dst.(*net.TCPConn); ok && errors.Is(err, io.EOF) {
				_ = tc.CloseWrite()
				return
			}
			closeBoth()
			return
		}
	}
}

// resetConn closes c with RST instead of FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
