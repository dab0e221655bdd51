package chaos

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer echoes every line back until closed.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader, msg string, timeout time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

func TestProxyModes(t *testing.T) {
	p, err := NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "pass", time.Second); err != nil || got != "pass\n" {
		t.Fatalf("pass: %q, %v", got, err)
	}

	p.Set(ModeLatency, 150*time.Millisecond)
	start := time.Now()
	if got, err := roundTrip(c, r, "slow", 2*time.Second); err != nil || got != "slow\n" {
		t.Fatalf("latency: %q, %v", got, err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("latency round trip took %s, want >= 150ms", d)
	}

	p.Set(ModeDrop, 0)
	if _, err := roundTrip(c, r, "held", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("drop: err = %v, want a timeout", err)
	}
	p.Set("pass", 0)
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after drop heals, held bytes: %q, %v", got, err)
	}

	p.Set(ModeReset, 0)
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("reset: the open connection still reads")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		_ = c2.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = io.WriteString(c2, "x\n")
		if _, rerr := bufio.NewReader(c2).ReadString('\n'); rerr == nil {
			t.Error("reset: a new connection still works")
		}
		c2.Close()
	}
	p.Set("pass", 0)
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, bufio.NewReader(c3), "back", time.Second); err != nil || got != "back\n" {
		t.Fatalf("after reset heals: %q, %v", got, err)
	}
}
