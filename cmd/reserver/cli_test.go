package main_test

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"
)

// TestCLIServerTakesItsOwnPort: `reserver audit --server` takes the HTTP
// address and `reserver drain --server` the gRPC one (or grpc://ADDR);
// given the other port, each fails (exit 1) with one sentence naming that
// port's flag and the flag whose address to give instead, not an HTTP/2
// framing error.
func TestCLIServerTakesItsOwnPort(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(path, []byte(fleetYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr := freeport.AddrT(t), freeport.AddrT(t)
	env := append(os.Environ(), "LEASEHOLD_TOKEN=tok-admin")
	srv := exec.Command(binary(), "--config", path, "--grpc-listen", grpcAddr, "--http-listen", httpAddr)
	srv.Env = env
	var stderr bytes.Buffer
	srv.Stderr = &stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	client := &http.Client{Timeout: 2 * time.Second}
	waitFor(t, func() bool {
		resp, err := client.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, "ready; stderr: %s", &stderr)

	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		want, lack []string // in the output; not in it
	}{
		{"audit on the HTTP port", []string{"audit", "--server", httpAddr}, 0, []string{"gpu-0"}, nil},
		{"audit on the gRPC port", []string{"audit", "--server", grpcAddr}, 1,
			[]string{grpcAddr + " is a gRPC address (the reserver's --grpc-listen): reserver audit --server takes the reserver's HTTP address, its --http-listen (default 127.0.0.1:7401)"},
			[]string{"malformed", `\x00`}},
		{"drain on the gRPC port", []string{"drain", "--server", grpcAddr, "--pool", "llama", "--engine", "gpu-0"}, 0, []string{"engine gpu-0: draining"}, nil},
		{"undrain on a grpc:// URL", []string{"drain", "--server", "grpc://" + grpcAddr, "--pool", "llama", "--engine", "gpu-0", "--undrain"}, 0, []string{"not draining"}, nil},
		{"drain on the HTTP port", []string{"drain", "--server", httpAddr, "--pool", "llama", "--engine", "gpu-0"}, 1,
			[]string{httpAddr + " is an HTTP address (the reserver's --http-listen): reserver drain --server takes the reserver's gRPC address, its --grpc-listen (default 127.0.0.1:7400)"},
			[]string{"frame too large"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(binary(), tc.args...)
			cmd.Env = env
			out, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != tc.code {
				t.Errorf("exit %d, want %d; output:\n%s", code, tc.code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, l := range tc.lack {
				if strings.Contains(string(out), l) {
					t.Errorf("output has %q:\n%s", l, out)
				}
			}
			if tc.code != 0 && strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
				t.Errorf("want one line, got:\n%s", out)
			}
		})
	}
}
