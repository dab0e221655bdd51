package blackhole

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestAcceptsAndNeverAnswers: a dial succeeds, a write is taken, and a
// read gets nothing until its deadline; after Close the connection ends.
func TestAcceptsAndNeverAnswers(t *testing.T) {
	l := Start(t)
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatalf("write: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 16)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read = %d, %v; want nothing until the deadline", n, err)
	}
	for l.Accepted() != 1 {
		time.Sleep(time.Millisecond)
	}
	l.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 16)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read after Close = %v, want the connection closed", err)
	}
	l.Close() // idempotent
}
