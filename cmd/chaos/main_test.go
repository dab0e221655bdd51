package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCLI(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: x\nsurprise: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"list", []string{"list"}, 0, "quickstart", ""},
		{"list names engine-failure", []string{"list"}, 0, "engine-failure       one engine killed, one hung, one answering 500s", ""},
		{"list names spike", []string{"list"}, 0, "spike                a 10× step in arrivals", ""},
		{"no args", nil, 2, "", "usage: chaos"},
		{"unknown scenario", []string{"nope"}, 2, "", "neither a file nor a built-in scenario"},
		{"unknown field", []string{bad}, 2, "", "field surprise not found"},
		{"replay without dir", []string{"replay"}, 2, "", "want one RUN_DIR"},
		{"replay of nothing", []string{"replay", t.TempDir()}, 1, "", "scenario.yaml"},
		{"bad flag", []string{"--ledger", "zookeeper", "quickstart"}, 2, "", "topology.ledger"},
		{"etcd without an endpoint", []string{"--ledger", "etcd", "quickstart"}, 2, "", "--ledger etcd needs --etcd host:port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), tc.args, &out, &errb)
			if code != tc.code || !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("chaos %v = %d\nstdout %q\nstderr %q\nwant %d, stdout containing %q, stderr containing %q",
					tc.args, code, out.String(), errb.String(), tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}

// TestQuickstartWithoutATerminal: the quickstart's progress written to a
// pipe or a file (here a buffer) is one line per phase (each router count
// and admission mode), with no carriage-return frames of a bar.
func TestQuickstartWithoutATerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the short quickstart (real processes)")
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--short", "--no-chart", "--runs-dir", t.TempDir(), "quickstart"}, &out, &errb)
	if code != 0 {
		t.Fatalf("chaos --short quickstart = %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	if strings.Contains(errb.String(), "\r") {
		t.Errorf("stderr has carriage returns (a progress bar's frames):\n%q", errb.String())
	}
	var phases []string
	for _, line := range strings.Split(errb.String(), "\n") {
		if strings.Contains(line, " requests in ") {
			phases = append(phases, line)
		}
	}
	// The short quickstart: routers 1 and 4, each with local and ledger admission.
	if len(phases) != 4 {
		t.Errorf("%d progress lines, want one per phase (4):\n%s", len(phases), errb.String())
	}
}
