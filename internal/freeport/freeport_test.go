package freeport

import (
	"net"
	"testing"
)

// Ports handed out are distinct, free, never 6379, even when none of them
// is bound in between (as when processes start after all are picked).
func TestPortsAreDistinctAndFree(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] || p == 6379 {
			t.Fatalf("port %d handed out twice, or 6379", p)
		}
		seen[p] = true
	}
	addr, err := Addr()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("Addr %s is not free: %v", addr, err)
	}
	ln.Close()
}
