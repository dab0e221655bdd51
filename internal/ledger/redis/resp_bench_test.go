package redis

// A load generator that costs its master as little as the server's own
// benchmark tool does: one connection per caller, commands encoded by hand
// into one buffer, written with one syscall and read back in order. The
// cluster benchmark uses it to find what three masters hold against one
// on a machine whose two cores the masters and the generator share: go-redis
// pipelines cost ~19 µs of generator CPU per grant, a large part of a core
// the masters need.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
)

// respConn is one generator connection. Not safe for concurrent use: each
// caller owns one.
type respConn struct {
	c   net.Conn
	r   *bufio.Reader
	buf []byte
}

func dialRESP(addr string) (*respConn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &respConn{c: c, r: bufio.NewReaderSize(c, 64<<10)}, nil
}

func (rc *respConn) Close() error { return rc.c.Close() }

// add appends one command to the buffer. Arguments are strings, []byte
// or ints (the types the ledger's argv builders produce).
func (rc *respConn) add(head []any, args ...any) error {
	b := rc.buf
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(head)+len(args)), 10)
	b = append(b, '\r', '\n')
	var err error
	for _, list := range [2][]any{head, args} {
		for _, a := range list {
			if b, err = appendBulk(b, a); err != nil {
				return err
			}
		}
	}
	rc.buf = b
	return nil
}

func appendBulk(b []byte, a any) ([]byte, error) {
	var s string
	switch x := a.(type) {
	case string:
		s = x
	case []byte:
		s = string(x)
	case int:
		var tmp [20]byte
		s = string(strconv.AppendInt(tmp[:0], int64(x), 10))
	case int64:
		var tmp [20]byte
		s = string(strconv.AppendInt(tmp[:0], x, 10))
	default:
		return b, fmt.Errorf("resp: argument of type %T", a)
	}
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n'), nil
}

// flush writes every added command.
func (rc *respConn) flush() error {
	_, err := rc.c.Write(rc.buf)
	rc.buf = rc.buf[:0]
	return err
}

// exchange writes every added command and reads n script replies back,
// each checked by decodeReply and handed to each (which may add the next
// round's commands: they go out at the next exchange).
func (rc *respConn) exchange(n int, each func(reply) error) error {
	if err := rc.flush(); err != nil {
		return err
	}
	for range n {
		v, err := rc.read()
		if err != nil {
			return err
		}
		r, err := decodeReply(v)
		if err != nil {
			return err
		}
		if err := each(r); err != nil {
			return err
		}
	}
	return nil
}

// errReply is a RESP error reply ("-ERR ...").
type errReply string

func (e errReply) Error() string { return string(e) }

// read returns the next reply as the script decoders expect it: strings,
// int64s, nil and []any; an error reply is returned as an errReply error.
func (rc *respConn) read() (any, error) {
	line, err := rc.r.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("resp: malformed line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return string(body), nil
	case '-':
		return nil, errReply(body)
	case ':':
		return strconv.ParseInt(string(body), 10, 64)
	case '$':
		n, err := strconv.Atoi(string(body))
		if err != nil || n < -1 {
			return nil, fmt.Errorf("resp: bad bulk length %q", body)
		}
		if n == -1 {
			return nil, nil
		}
		if p, err := rc.r.Peek(n + 2); err == nil {
			v := string(p[:n])
			_, _ = rc.r.Discard(n + 2)
			return v, nil
		}
		p := make([]byte, n+2)
		if _, err := io.ReadFull(rc.r, p); err != nil {
			return nil, err
		}
		return string(p[:n]), nil
	case '*':
		n, err := strconv.Atoi(string(body))
		if err != nil || n < -1 {
			return nil, fmt.Errorf("resp: bad array length %q", body)
		}
		if n == -1 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			v, err := rc.read()
			var e errReply
			if err != nil && !errors.As(err, &e) {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("resp: unknown reply type %q", kind)
}
