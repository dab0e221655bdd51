package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/freeport"
)

// handRun returns the command lines of the README's "Running the parts by
// hand" block, continuation lines joined, comment lines dropped.
func handRun(t *testing.T) []string {
	t.Helper()
	_, block, ok := strings.Cut(string(readFile(t, filepath.Join("..", "README.md"))), "## Running the parts by hand")
	if ok {
		_, block, ok = strings.Cut(block, "```sh\n")
		block, _, _ = strings.Cut(block, "```")
	}
	if !ok {
		t.Fatal(`README.md: no sh block under "## Running the parts by hand"`)
	}
	var lines []string
	for _, l := range strings.Split(strings.ReplaceAll(block, "\\\n", " "), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines
}

// withoutComment cuts a line's trailing "  # ..." comment.
func withoutComment(l string) string {
	if i := strings.Index(l, " # "); i >= 0 {
		return strings.TrimSpace(l[:i])
	}
	return l
}

// TestREADMEEnginesMatchTheFleet: the README's hand-run section starts one
// enginesim per engine of deploy/fleet.example.yaml, on the port of its
// url, with its slots, its metrics format and, where the fleet file states
// kv_tokens, that KV capacity (else a --kv-tokens its metrics report).
func TestREADMEEnginesMatchTheFleet(t *testing.T) {
	f, err := fleet.Load("fleet.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sims := map[string]map[string]string{} // port -> flag -> value
	for _, l := range handRun(t) {
		fields := strings.Fields(strings.TrimSuffix(withoutComment(l), "&"))
		if len(fields) == 0 || fields[0] != "bin/enginesim" {
			continue
		}
		flags := map[string]string{"format": "vllm"}
		for i := 1; i+1 < len(fields); i += 2 {
			flags[strings.TrimLeft(fields[i], "-")] = fields[i+1]
		}
		_, port, _ := strings.Cut(flags["listen"], ":")
		sims[port] = flags
	}
	engines := 0
	for _, p := range f.Pools {
		for _, e := range p.Engines {
			engines++
			port := e.URL[strings.LastIndex(e.URL, ":")+1:]
			sim := sims[port]
			if sim == nil {
				t.Errorf("%s/%s (%s): no bin/enginesim --listen on port %s in the README", p.Name, e.ID, e.URL, port)
				continue
			}
			want := map[string]string{"slots": strconv.FormatInt(e.Slots, 10), "format": string(e.Format)}
			if e.KVTokens > 0 {
				want["kv-tokens"] = strconv.FormatInt(e.KVTokens, 10)
			} else if sim["kv-tokens"] == "" {
				t.Errorf("%s/%s: its capacity comes from its metrics, but the README's enginesim gives no --kv-tokens", p.Name, e.ID)
			}
			for flag, v := range want {
				if sim[flag] != v {
					t.Errorf("%s/%s: README's enginesim --%s %q, fleet.example.yaml says %q", p.Name, e.ID, flag, sim[flag], v)
				}
			}
		}
	}
	if len(sims) != engines {
		t.Errorf("README starts %d engines, fleet.example.yaml lists %d", len(sims), engines)
	}
}

// TestREADMEHandRun runs the README's hand-run section line by line, as a
// newcomer does after `go build -o bin/ ./cmd/...`, with every loopback
// port moved to a free one (in the lines and in a copy of the fleet file;
// the reserver's default ports by LEASEHOLD_GRPC_LISTEN and
// LEASEHOLD_HTTP_LISTEN): lines ending in & start in the background, the
// others must exit 0. The chat completion answers, and the audit reports
// no anomaly.
func TestREADMEHandRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the README's processes; waits out the fleet's 10 s recovery window")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("the README's lines use curl, which is not installed")
	}
	bin := buildBinaries(t)
	lines := handRun(t)
	ports := map[string]string{}
	portRe := regexp.MustCompile(`127\.0\.0\.1:(\d+)`)
	fleetYAML := string(readFile(t, "fleet.example.yaml"))
	for _, m := range portRe.FindAllStringSubmatch(strings.Join(lines, "\n")+fleetYAML, -1) {
		if ports[m[1]] == "" {
			_, ports[m[1]], _ = strings.Cut(freeport.AddrT(t), ":")
		}
	}
	if ports["7400"] == "" || ports["7401"] == "" {
		t.Fatalf("the README's lines name no 127.0.0.1:7400 and :7401 (the reserver's defaults): %q", lines)
	}
	move := func(s string) string {
		return portRe.ReplaceAllStringFunc(s, func(a string) string { return "127.0.0.1:" + ports[a[len("127.0.0.1:"):]] })
	}
	dir := t.TempDir()
	fleetPath := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleetPath, []byte(move(fleetYAML)), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"LEASEHOLD_GRPC_LISTEN=127.0.0.1:" + ports["7400"], "LEASEHOLD_HTTP_LISTEN=127.0.0.1:" + ports["7401"]}
	var procs []*proc
	for i, l := range lines {
		if strings.HasPrefix(l, "go build ") {
			continue // built above
		}
		cmdline := strings.ReplaceAll(move(l), "deploy/fleet.example.yaml", fleetPath)
		cmdline = strings.ReplaceAll(cmdline, "bin/", bin+"/")
		if bg, ok := strings.CutSuffix(withoutComment(cmdline), "&"); ok {
			procs = append(procs, start(t, fmt.Sprintf("line %d", i+1), "/bin/sh", env, "-c", "exec "+bg))
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", cmdline)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}, env...)
		out, err := cmd.CombinedOutput()
		cancel()
		t.Logf("$ %s\n%s", l, out)
		if err != nil {
			for _, p := range procs {
				t.Logf("--- %s ---\n%s", p.name, p.output())
			}
			t.Fatalf("README line %q: %v\n%s", l, err, out)
		}
		switch {
		case strings.Contains(l, "/v1/chat/completions") && !strings.Contains(string(out), `"object":"chat.completion"`):
			t.Errorf("README's chat completion answered %s", out)
		case strings.Contains(l, "reserver audit") && !strings.Contains(string(out), "ANOMALIES (0)"):
			t.Errorf("README's audit reports anomalies:\n%s", out)
		case strings.Contains(l, "reserver drain") && !strings.Contains(string(out), "engine gpu-0: draining"):
			t.Errorf("README's drain answered %s", out)
		}
	}
}
