package chaos

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/benchkit"
)

// tablesEnv picks the report's tables (comma-separated: goodput,
// headroom, first-use, spike; default all).
const tablesEnv = "LEASEHOLD_BENCH_TABLES"

// BenchmarkReport is the goodput benchmark (make bench): GoodputVariants
// and FirstUseVariants, printed as markdown tables, and the spike
// scenario with its baselines (seed 002's table). The goodput window
// after its warmup is 15 phases (30 s at the default BENCH_PHASE of 2s).
// Run directories stay under DefaultRunsDir.
func BenchmarkReport(b *testing.B) {
	if testing.Short() {
		b.Skip("report benchmark: skipped in -short")
	}
	ctx := context.Background()
	d := benchkit.Phase()
	bins, err := Build(ctx, filepath.Join(b.TempDir(), "bin"))
	if err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(DefaultRunsDir(), 0o755); err != nil {
		b.Fatal(err)
	}
	runs, err := os.MkdirTemp(DefaultRunsDir(), "bench-")
	if err != nil {
		b.Fatal(err)
	}
	only := func(table string) bool {
		v := os.Getenv(tablesEnv)
		return v == "" || slices.Contains(strings.Split(v, ","), table)
	}
	out := &strings.Builder{}
	fmt.Fprintf(out, "run directories: %s\n", runs)
	for range b.N {
		if only("goodput") {
			table(ctx, b, out, GoodputVariants(5*d, 15*d), filepath.Join(runs, "goodput"), bins, PathDirect,
				fmt.Sprintf("Goodput: 3 engines (16 slots, 16,384 KV tokens, lognormal outputs median 80 σ 1.1, context 4,096, speed 2), "+
					"open-loop streamed chat, 128-512 prompt tokens, max_tokens 2,048 on half; %s warmup, %s measured; 1× is %d requests/s",
					5*d, 15*d, GoodputRate))
		}
		if only("headroom") {
			table(ctx, b, out, HeadroomVariants(5*d, 15*d, []float64{0, 0.05, 0.1, 0.2}), filepath.Join(runs, "headroom"), bins, PathDirect,
				fmt.Sprintf("Growth headroom: the goodput workload at 3× (%d requests/s), half non-streamed, engines of 16 slots and 8,192 KV tokens (KV binds); %s warmup, %s measured",
					3*GoodputRate, 5*d, 15*d))
		}
		if only("first-use") {
			table(ctx, b, out, FirstUseVariants(d, 15*d/2), filepath.Join(runs, "first-use"), bins, "straight to the engine",
				fmt.Sprintf("First use: 1 engine (64 slots, 16,384 KV tokens, uniform outputs mean 128, context 4,096, speed 10), "+
					"1 router on the embedded ledger, 48 closed-loop clients, non-streamed chat; %s warmup, %s measured", d, 15*d/2))
		}
		if only("spike") {
			spikeTable(ctx, b, out, filepath.Join(runs, "spike"), bins)
		}
	}
	fmt.Print(out.String())
}

// spikeTable runs the spike scenario with its baselines (seed 002's table)
// and writes the table and the SLO run's verdicts.
func spikeTable(ctx context.Context, b *testing.B, out io.Writer, dir string, bins Binaries) {
	sc, err := Load("spike")
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	res, err := Run(ctx, sc, Options{Binaries: bins, RunDir: dir, NoChart: true})
	if err != nil {
		b.Fatal(err)
	}
	w := sc.Workload
	fmt.Fprintf(out, "\nSpike: %d engines (%d slots, %d KV tokens, speed %g), %d routers on %s; open loop %g requests/s, ×%g from %s for %s, %s in all; "+
		"streamed chat, half interactive (ttft_slo in the last row), half batch; a client gives up without a first token after %s (%.0fs)\n\n",
		sc.Topology.Engines[0].Count, sc.Topology.Engines[0].Slots, sc.Topology.Engines[0].KVTokens, sc.Topology.Engines[0].Speed,
		sc.Topology.Routers, sc.Topology.Ledger, w.Rate, w.Spike.Factor, w.Spike.At, w.Spike.For, w.Duration, w.FirstTokenTimeout,
		time.Since(start).Seconds())
	WriteSpike(out, res.Spike)
	for _, c := range res.Checks {
		fmt.Fprintf(out, "\n%s %s: %s %s", passWord(c.Pass), c.Check, c.Figure, c.Detail)
	}
	fmt.Fprintln(out)
}

// table runs vs and writes their table under title.
func table(ctx context.Context, b *testing.B, out io.Writer, vs []Variant, dir string, bins Binaries, base, title string) {
	start := time.Now()
	rows, err := RunVariants(ctx, vs, dir, Options{Binaries: bins})
	if err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(out, "\n%s (%.0fs)\n\n", title, time.Since(start).Seconds())
	WriteGoodput(out, rows, base)
}
