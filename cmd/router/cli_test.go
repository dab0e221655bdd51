package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/freeport"
)

// TestHelpNamesTheEnvironment: router --help says that every flag can be
// set as LEASEHOLD_<FLAG_NAME> and where the ledger token comes from, as
// reserver --help does, and lists --token-file.
func TestHelpNamesTheEnvironment(t *testing.T) {
	out, err := exec.Command(filepath.Join(binDir, "router"), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("router --help: %v\n%s", err, out)
	}
	for _, want := range []string{"LEASEHOLD_<FLAG_NAME> (--queue-depth as LEASEHOLD_QUEUE_DEPTH)", "LEASEHOLD_TOKEN or --token-file", "-token-file"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("router --help lacks %q:\n%s", want, out)
		}
	}
}

// tokenFleet is a one-engine fleet for the router's token tests.
const tokenFleet = `pools:
  - name: m
    engines:
      - {id: gpu-0, url: "http://127.0.0.1:1", kv_tokens: 10000, slots: 8, stale_after: 0s}
tenants:
  - {name: acme, api_keys: ["sk-acme"], kv_share: 1}
lease:
  recovery_window: 0s
`

// TestTokenFile: the router reads the token it sends a reserver from
// --token-file (one line; LEASEHOLD_TOKEN otherwise), and becomes ready
// on a reserver that accepts only that router token; a file that is
// missing, holds two tokens or disagrees with LEASEHOLD_TOKEN, or a
// --token-file beside a ledger that is not grpc://, or --ledger memory://,
// is refused at start with exit status 2, naming the flag.
func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fleetPath, tokPath := write("fleet.yaml", tokenFleet), write("router.token", "# the router token\ntok-router\n")
	router := filepath.Join(binDir, "router")
	base := []string{"--config", fleetPath, "--id", "r1", "--listen", "127.0.0.1:0"}
	for _, tc := range []struct {
		name string
		args []string
		env  string
		want string
	}{
		{"missing file", []string{"--ledger", "grpc://127.0.0.1:1", "--token-file", filepath.Join(dir, "nope")}, "", "--token-file: open"},
		{"two tokens", []string{"--ledger", "grpc://127.0.0.1:1", "--token-file", write("two", "a\nb\n")}, "", "want exactly one token, found 2"},
		{"differs from the environment", []string{"--ledger", "grpc://127.0.0.1:1", "--token-file", tokPath}, "LEASEHOLD_TOKEN=other", "both set and differ"},
		{"not a reserver", []string{"--ledger", "redis://127.0.0.1:1/0", "--token-file", tokPath}, "", "--token-file: applies to a grpc:// --ledger (a reserver) only"},
		{"memory ledger", []string{"--ledger", "memory://"}, "", `--ledger = "memory://": refused`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(router, append(append([]string(nil), base...), tc.args...)...)
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "LEASEHOLD_") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			if tc.env != "" {
				cmd.Env = append(cmd.Env, tc.env)
			}
			out, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), tc.want) {
				t.Errorf("exit %d, output:\n%s\nwant exit 2 naming %q", code, out, tc.want)
			}
		})
	}

	grpcAddr := freeport.AddrT(t)
	startProc(t, "reserver", []string{"export LEASEHOLD_ROUTER_ROLE_TOKENS=tok-router LEASEHOLD_TOKEN=tok-admin"}, filepath.Join(binDir, "reserver"),
		"--config", fleetPath, "--grpc-listen", grpcAddr, "--http-listen", freeport.AddrT(t))
	r := startProc(t, "router", nil, router, "--ledger", "grpc://"+grpcAddr, "--config", fleetPath, "--id", "r1",
		"--listen", freeport.AddrT(t), "--token-file", tokPath)
	waitHTTP(t, fmt.Sprintf("http://%s/readyz", r.addr))
}
