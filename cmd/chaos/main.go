// Command chaos runs Leasehold chaos scenarios against real processes on
// loopback (see package chaos) and prints their verdicts.
//
//	chaos [--short] [--json] [--ledger memory|redis|etcd] [--etcd HOST:PORT] [--duration D] [--seed N] SCENARIO...
//	chaos replay [--json] RUN_DIR
//	chaos list
//
// SCENARIO is a built-in name (chaos list), a YAML file, or "all". The exit
// status is 0 when every check passed, 1 when one failed, 2 on bad usage.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/chaos"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: chaos [flags] SCENARIO...|all   chaos replay [flags] RUN_DIR   chaos list")
		fs.PrintDefaults()
	}
	var (
		opts       chaos.Options
		jsonOut    bool
		noProgress bool
	)
	fs.BoolVar(&opts.Short, "short", false, "run the scenarios' short CI variants")
	fs.BoolVar(&jsonOut, "json", false, "print the results as JSON (for CI) instead of tables")
	fs.StringVar(&opts.Ledger, "ledger", "", "override topology.ledger: memory, redis, etcd or redis-sentinel")
	fs.StringVar(&opts.Etcd, "etcd", "", "host:port of a running etcd, for --ledger etcd (each run uses a key prefix of its own)")
	fs.DurationVar(&opts.Duration, "duration", 0, "override workload.duration")
	fs.Uint64Var(&opts.Seed, "seed", 0, "override workload.seed")
	fs.StringVar(&opts.RunsDir, "runs-dir", chaos.DefaultRunsDir(), "where run directories are written")
	fs.BoolVar(&noProgress, "no-progress", false, "no progress bar")
	fs.BoolVar(&opts.NoChart, "no-chart", false, "skip the usage chart")
	// Flags may come before and after the positional arguments.
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) == 0 {
		fs.Usage()
		return 2
	}
	if !jsonOut && !noProgress {
		opts.Progress = stderr
	}
	switch pos[0] {
	case "list":
		for _, n := range chaos.Names() {
			sc, err := chaos.Load(n)
			if err != nil {
				fmt.Fprintf(stdout, "%-20s (invalid: %v)\n", n, err)
				continue
			}
			fmt.Fprintf(stdout, "%-20s %s\n", n, sc.Description)
		}
		return 0
	case "replay":
		if len(pos) != 2 {
			fmt.Fprintln(stderr, "chaos replay: want one RUN_DIR")
			return 2
		}
		res, err := chaos.Replay(ctx, pos[1], opts)
		if err != nil {
			fmt.Fprintln(stderr, "chaos:", err)
			return 1
		}
		return report(stdout, []*chaos.Result{res}, jsonOut, pos[1])
	}
	if opts.Ledger == chaos.LedgerEtcd && opts.Etcd == "" {
		fmt.Fprintln(stderr, "chaos: --ledger etcd needs --etcd host:port (a running etcd; each run uses a key prefix of its own)")
		return 2
	}
	names := pos
	if len(pos) == 1 && pos[0] == "all" {
		names = chaos.Names()
	}
	var scs []*chaos.Scenario
	for _, n := range names {
		sc, err := chaos.Load(n)
		if err == nil {
			_, err = chaos.Prepare(sc, opts) // the overrides must make sense before anything runs
		}
		if err != nil {
			fmt.Fprintln(stderr, "chaos:", err)
			return 2
		}
		scs = append(scs, sc)
	}
	// Build once for every scenario.
	binDir, err := os.MkdirTemp("", "chaos-bin-")
	if err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
		return 1
	}
	defer os.RemoveAll(binDir)
	if !jsonOut {
		fmt.Fprintln(stderr, "building reserver, enginesim and router ...")
	}
	opts.Binaries, err = chaos.Build(ctx, binDir)
	if err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
		return 1
	}
	var results []*chaos.Result
	failed := false
	for _, sc := range scs {
		o := opts
		res, err := chaos.Run(ctx, sc, o)
		if err != nil {
			fmt.Fprintf(stderr, "chaos: %s: %v\n", sc.Name, err)
			res = &chaos.Result{Scenario: sc.Name, Error: err.Error(), Started: time.Now()}
			results = append(results, res)
			failed = true
			continue
		}
		results = append(results, res)
		if !res.Pass {
			failed = true
		}
		if !jsonOut {
			chaos.WriteTable(stdout, res)
		}
	}
	if jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(results)
	}
	if failed {
		return 1
	}
	return 0
}

func report(stdout io.Writer, results []*chaos.Result, jsonOut bool, recorded string) int {
	if jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(results)
	} else {
		for _, r := range results {
			chaos.WriteTable(stdout, r)
		}
		if b, err := os.ReadFile(filepath.Join(recorded, "result.json")); err == nil {
			var before chaos.Result
			if json.Unmarshal(b, &before) == nil && len(results) == 1 {
				fmt.Fprintf(stdout, "recorded run: %s; replay: %s\n", passWord(before.Pass), passWord(results[0].Pass))
				for i, c := range results[0].Checks {
					if i < len(before.Checks) && before.Checks[i].Check == c.Check && before.Checks[i].Pass != c.Pass {
						fmt.Fprintf(stdout, "  %s changed: recorded %s (%s), replay %s (%s)\n", c.Check,
							passWord(before.Checks[i].Pass), before.Checks[i].Figure, passWord(c.Pass), c.Figure)
					}
				}
			}
		}
	}
	for _, r := range results {
		if !r.Pass {
			return 1
		}
	}
	return 0
}

func passWord(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}
