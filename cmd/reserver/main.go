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
	ctx := context.Background()
	if err := r.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "reserver:", err)
		_ = r.Shutdown(ctx)
		return 1
	}
	code := 0
wait:
	for {
		select {
		case sig := <-sigC:
			if sig == syscall.SIGHUP {
				_ = r.Reload(ctx) // logged; the old fleet stays on error
				continue
			}
			log.Info("shutting down", "signal", sig.String())
			break wait
		case err := <-r.Err():
			log.Error("server failed; shutting down", "err", err)
			code = 1
			break wait
		}
	}
	return cli.Stop(log, r, cfg.ShutdownTimeout, code)
}
