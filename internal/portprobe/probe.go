package portprobe

import (
	"bytes"
	"context"
	"io"
	"net"
	"time"
)

// Kind is what an address speaks.
type Kind int

const (
	// Unknown: no answer, a closed connection, or something else.
	Unknown Kind = iota
	// HTTP1 answered with an HTTP/1.x status line.
	HTTP1
	// GRPC answered with an HTTP/2 SETTINGS frame, as a gRPC server does.
	GRPC
)

func (k Kind) String() string {
	switch k {
	case HTTP1:
		return "HTTP/1.1"
	case GRPC:
		return "gRPC (HTTP/2)"
	}
	return "unknown"
}

// maxWait bounds a probe whatever ctx allows.
const maxWait = 2 * time.Second

// frameSettings is HTTP/2's SETTINGS frame type (RFC 9113, 6.5).
const frameSettings = 0x4

// Probe dials addr (host:port), sends one HTTP/1.1 GET /healthz and
// classifies the first bytes of the answer.
func Probe(ctx context.Context, addr string) Kind {
	ctx, cancel := context.WithTimeout(ctx, maxWait)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return Unknown
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\nConnection: close\r\n\r\n"); err != nil {
		return Unknown
	}
	var head [9]byte // an HTTP/2 frame header; "HTTP/1.1 " is as long
	if _, err := io.ReadFull(conn, head[:]); err != nil {
		return Unknown
	}
	switch {
	case bytes.HasPrefix(head[:], []byte("HTTP/1.")):
		return HTTP1
	case head[3] == frameSettings && head[4]&1 == 0 && bytes.Equal(head[5:], []byte{0, 0, 0, 0}):
		return GRPC // a SETTINGS frame (not an ACK) on stream 0
	}
	return Unknown
}
