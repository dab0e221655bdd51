// Command reserver is Leasehold's reservation service: the gRPC ledger API
// in front of a ledger backend, the engine telemetry reconciler, the fleet
// applier, and the audit (HTTP JSON, a human page, metrics). `reserver
// audit` is its command-line audit client. The wiring lives in
// internal/reserver; this file parses, starts, waits for signals and shuts
// down in order.
//
//	reserver --ledger URL --config FLEET.yaml --grpc-listen ADDR --http-listen ADDR
//	reserver audit --server ADDR [--json] [--pool P] [--engine E] [--holder H] [--tenant T]
//	reserver drain --server ADDR --pool P --engine E [--undrain]
//
// --http-read-header-timeout, --http-body-timeout, --http-write-timeout,
// --http-idle-timeout, --http-max-conns (default from RLIMIT_NOFILE) and
// --http-max-unauthenticated bound the HTTP side's clients;
// --grpc-max-recv-bytes, --grpc-max-streams, --grpc-idle-timeout and
// --grpc-handshake-timeout the gRPC side's (docs/operations.md, "Limits on
// clients").
//
// Signals: SIGTERM or SIGINT shut down in order at any point, a start or a
// reload that waits on the ledger included (each of its ledger calls ends
// with the cancel or its own deadline); SIGHUP reloads the fleet file.
// --startup-timeout (default 15s) bounds the first fleet application: then
// the reserver serves, unready while its ledger does not answer, and
// retries.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/reserver"
)

func main() {
	if len(os.Args) > 1 {
		if run, ok := map[string]func(context.Context, []string, func(string) (string, bool), io.Writer, io.Writer) int{
			"audit": reserver.RunAudit, "drain": reserver.RunDrain,
		}[os.Args[1]]; ok {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			code := run(ctx, os.Args[2:], os.LookupEnv, os.Stdout, os.Stderr)
			stop()
			os.Exit(code)
		}
	}
	os.Exit(serve())
}

func serve() int {
	cfg, err := reserver.ParseServeFlags(os.Args[1:], os.LookupEnv, os.Stderr)
	if err != nil {
		return cli.ParseFailed(os.Stderr, "reserver", err)
	}
	log := cli.Logger(os.Stderr, cfg.LogLevel)

	// Subscribe before starting so no signal is missed.
	sigC := make(chan os.Signal, 4)
	signal.Notify(sigC, syscall.SIGHUP, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigC)

	r, err := reserver.New(cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reserver:", err)
		return 1
	}
	// Start applies the fleet before serving and a reload applies it
	// again, both waiting on the ledger (each call bounded, the start by
	// --startup-timeout too), so they run beside this loop, one at a time:
	// SIGTERM or SIGINT cancels the one in progress and shuts down at
	// once, and a SIGHUP meanwhile reloads after it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	doneC := make(chan error, 1)
	run := func(job func(context.Context) error) { go func() { doneC <- job(ctx) }() }
	run(r.Start)
	code, starting, busy, again := 0, true, true, false
wait:
	for {
		select {
		case err := <-doneC:
			busy = false
			if starting {
				starting = false
				if err != nil {
					fmt.Fprintln(os.Stderr, "reserver:", err)
					code = 1
					break wait
				}
			}
			if again {
				again, busy = false, true
				run(r.Reload) // logged; the old fleet stays on error
			}
		case sig := <-sigC:
			if sig != syscall.SIGHUP {
				log.Info("shutting down", "signal", sig.String())
				break wait
			}
			if busy {
				log.Info("SIGHUP: the fleet file is reloaded once the start or the reload in progress is done")
				again = true
			} else {
				busy = true
				run(r.Reload) // logged; the old fleet stays on error
			}
		case err := <-r.Err():
			log.Error("server failed; shutting down", "err", err)
			code = 1
			break wait
		}
	}
	cancel()
	if busy {
		<-doneC // prompt: each ledger call honours the cancel or its own deadline
	}
	return cli.Stop(log, r, cfg.ShutdownTimeout, code)
}
