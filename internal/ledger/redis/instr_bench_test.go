package redis

// BenchmarkScriptInstructions counts the instructions Redis executes per
// call of the hot functions, against the empty function in the same run,
// with redis-server running under Valgrind's callgrind. A second floor,
// lh_calibration_acquire_calls (report_bench_test.go), makes the Redis
// calls an acquire's grant makes with none of the admission rule. Unlike the server
// time in BenchmarkReport's script-time table (INFO commandstats, which on
// a shared two-core machine moves by a quarter between runs), the count is
// the same, within a fraction of a percent, in every run on one Redis
// build: it shows what a change to the Lua costs or saves. It is not a
// time: a cache miss costs more than an instruction, and the empty
// function's share of misses is larger. Run it alone (valgrind is not in
// make bench):
//
//	apt-get install -y valgrind
//	go test -run '^$' -bench '^BenchmarkScriptInstructions$' -benchtime 1x ./internal/ledger/redis/
//
// With LEASEHOLD_CALLGRIND_DIR set, callgrind's dumps are written there and
// kept (one file per phase, desc "dump phaseN": phase0 the empty function,
// then acquire's calls alone, acquire, resize, grow, release's calls
// alone, release, acquire again and the bare release), for
// callgrind_annotate to show
// where a function's instructions go.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/benchkit"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

func BenchmarkScriptInstructions(b *testing.B) {
	if testing.Short() {
		b.Skip("instruction benchmark: skipped in -short")
	}
	var tools []string
	for _, t := range []string{"valgrind", "callgrind_control", "callgrind_annotate"} {
		p, err := exec.LookPath(t)
		if err != nil {
			b.Skipf("%s not found: apt-get install -y valgrind", t)
		}
		tools = append(tools, p)
	}
	valgrind, control, annotate := tools[0], tools[1], tools[2]
	dir := os.Getenv("LEASEHOLD_CALLGRIND_DIR")
	if dir == "" {
		dir = b.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	srv := redisserver.StartUnder(b, valgrind, "--tool=callgrind", "--callgrind-out-file="+filepath.Join(dir, "cg.out"))
	pid := strconv.Itoa(srv.Pid())
	ctx := context.Background()
	// Under valgrind every call is some fifty times slower than usual.
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	defer client.Close()
	// dump writes callgrind's counts since the last dump to a file of their
	// own, marked with phase.
	dump := func(phase string) {
		if out, err := exec.Command(control, "-d", phase, pid).CombinedOutput(); err != nil {
			b.Fatalf("callgrind_control -d %s: %v: %s", phase, err, out)
		}
	}

	e := &benchEnv{b: b, ctx: ctx, srv: srv, client: client}
	e.fresh(16)
	e.preload(2000)
	e.observeAll()
	empty, calls, releaseCalls := e.calibration()
	led := e.led
	// Warm up: the options parsed, the memos filled, as in a running pool.
	for i := 0; i < 100; i++ {
		if err := empty(i); err != nil {
			b.Fatalf("empty function: %v", err)
		}
		if err := calls(i, "warm"); err != nil {
			b.Fatalf("acquire's calls alone: %v", err)
		}
		if err := releaseCalls(i, "warm"); err != nil {
			b.Fatalf("release's calls alone: %v", err)
		}
		g, err := led.Acquire(ctx, benchkit.BenchRequest(e.pool, i%16, i, "warm"))
		if err != nil {
			b.Fatalf("acquire: %v", err)
		}
		if _, err := led.Release(ctx, g.Lease.Ref(), routerUsage); err != nil {
			b.Fatalf("release: %v", err)
		}
	}
	dump("warm")
	const n = 500
	var leases []ledger.Lease
	phases := []struct {
		name string
		op   func(i int) error
	}{
		{"(empty function)", empty},
		{acquireCallsRow, func(i int) error { return calls(i, "in") }},
		{"acquire", func(i int) error {
			g, err := led.Acquire(ctx, benchkit.BenchRequest(e.pool, i%16, i, "in"))
			leases = append(leases, g.Lease)
			return err
		}},
		{"resize", func(i int) error {
			_, err := led.Resize(ctx, leases[i].Ref(), leases[i].KVTokens-1)
			return err
		}},
		{"grow", func(i int) error {
			_, err := led.Grow(ctx, leases[i].Ref(), leases[i].KVTokens)
			return err
		}},
		{releaseCallsRow, func(i int) error { return releaseCalls(i, "in") }},
		{"release", func(i int) error {
			_, err := led.Release(ctx, leases[i].Ref(), routerUsage)
			return err
		}},
		{"acquire (again)", func(i int) error {
			g, err := led.Acquire(ctx, benchkit.BenchRequest(e.pool, i%16, i, "in2"))
			leases[i] = g.Lease
			return err
		}},
		{"release (bare: no outcome, unfinished)", func(i int) error {
			_, err := led.Release(ctx, leases[i].Ref(), ledger.Usage{PromptTokens: 10, CompletionTokens: 10})
			return err
		}},
	}
	for j, p := range phases {
		for i := 0; i < n; i++ {
			if err := p.op(i); err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
		}
		dump("phase" + strconv.Itoa(j))
	}
	per := make([]float64, len(phases))
	for j := range phases {
		ir, err := fcallInstructions(annotate, dir, "phase"+strconv.Itoa(j))
		if err != nil {
			b.Fatal(err)
		}
		per[j] = float64(ir) / n
	}
	out := &strings.Builder{}
	fmt.Fprintf(out, "\n| function | calls | instructions per call (FCALL, inclusive) | vs empty function |\n|---|---:|---:|---:|\n")
	for j, p := range phases {
		fmt.Fprintf(out, "| %s | %d | %.0f | %.2f× |\n", p.name, n, per[j], per[j]/per[0])
	}
	fmt.Fprintf(out, "\nCounted by callgrind (Valgrind) in redis-server %s, on a pool holding 2,000 leases whose engines have been observed; repeated runs of one build agree within a fraction of a percent (dict hash seeds differ per process).\n",
		redisVersion(ctx, client))
	fmt.Print(out.String())
}

// fcallInstructions returns the instructions callgrind counted in
// fcallCommand and everything it called, in the dump marked phase.
func fcallInstructions(annotate, dir, phase string) (int64, error) {
	files, _ := filepath.Glob(filepath.Join(dir, "cg.out.*"))
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			return 0, err
		}
		if !bytes.Contains(body, []byte("\ndesc: Trigger: Client Request: "+phase+"\n")) &&
			!bytes.Contains(body, []byte("\ndesc: Trigger: dump "+phase+"\n")) {
			continue
		}
		out, err := exec.Command(annotate, "--inclusive=yes", "--threshold=100", f).Output()
		if err != nil {
			return 0, fmt.Errorf("callgrind_annotate %s: %w", f, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if !strings.Contains(line, ":fcallCommand ") {
				continue
			}
			n, err := strconv.ParseInt(strings.ReplaceAll(strings.Fields(line)[0], ",", ""), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("callgrind_annotate %s: %q: %w", f, line, err)
			}
			return n, nil
		}
		return 0, fmt.Errorf("callgrind_annotate %s: no fcallCommand line", f)
	}
	return 0, fmt.Errorf("no callgrind dump for %s in %s (%d files)", phase, dir, len(files))
}
