package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRunRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kv-tokens", "4", "--listen", "127.0.0.1:0"}, "--kv-tokens"},
		{[]string{"--format", "triton"}, "triton"},
		{[]string{"--output-dist", "zipf"}, "want uniform or lognormal"},
		{[]string{"--output-sigma", "-1", "--listen", "127.0.0.1:0"}, "--output-sigma"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--listen", "256.0.0.1:1"}, "listen on"},
	} {
		if err := run(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}
