// Package freeport hands out loopback ports for processes that will bind
// them later: the chaos runner's topologies and the tests' servers.
//
// A port is found by listening on 127.0.0.1:0 and closing the listener, so
// until its process binds it the kernel may offer the same port again. Two
// processes given one port make one server answer for both: a second
// enginesim fails to bind, the first answers its health check, and the
// ledger counts twice the capacity that engine has. So no port is handed
// out twice in one process, and never 6379 (a Redis the machine may run).
package freeport

import (
	"errors"
	"net"
	"strconv"
	"sync"
)

var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{6379: true}}

// Port returns a loopback port nothing listens on now that this process
// has not handed out before.
func Port() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 64 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := ln.Addr().(*net.TCPAddr).Port
		if err := ln.Close(); err != nil {
			return 0, err
		}
		if !handedOut.ports[p] {
			handedOut.ports[p] = true
			return p, nil
		}
	}
	return 0, errors.New("freeport: no loopback port that was not handed out before")
}

// Addr is Port as "127.0.0.1:port".
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

// TB is the part of testing.TB that AddrT uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// AddrT is Addr for a test: it fails the test when no port can be had.
func AddrT(t TB) string {
	t.Helper()
	addr, err := Addr()
	if err != nil {
		t.Fatalf("freeport: find a free loopback port: %v", err)
	}
	return addr
}
