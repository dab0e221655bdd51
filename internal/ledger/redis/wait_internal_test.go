package redis

import (
	"errors"
	"testing"
)

func TestRedirectTarget(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      string
		wantAddr string
		wantAsk  bool
	}{
		{"moved", "MOVED 3143 127.0.0.1:7001", "127.0.0.1:7001", false},
		{"ask", "ASK 3143 127.0.0.1:7002", "127.0.0.1:7002", true},
		{"tryagain", "TRYAGAIN Multiple keys request during rehashing of slot", "", false},
		{"clusterdown", "CLUSTERDOWN The cluster is down", "", false},
		{"moved without an address", "MOVED 3143", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, ask := redirectTarget(errors.New(tc.err))
			if addr != tc.wantAddr || ask != tc.wantAsk {
				t.Errorf("redirectTarget(%q) = %q, %v; want %q, %v", tc.err, addr, ask, tc.wantAddr, tc.wantAsk)
			}
		})
	}
}
