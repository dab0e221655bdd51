// Command enginesim is a simulated GPU inference engine: an
// OpenAI-compatible server with a vLLM-like KV-cache model, /metrics in
// vLLM, SGLang or TGI format, and ground truth on /admin/stats. See
// internal/enginesim.
//
//	enginesim --listen ADDR --kv-tokens N --slots N [--format vllm|sglang|tgi]
//	          [--output-tokens N] [--output-dist uniform|lognormal] [--output-sigma S]
//
// Every flag can also be set from the environment: --kv-tokens is
// ENGINESIM_KV_TOKENS.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/internal/enginesim"
)

const shutdownGrace = 10 * time.Second

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "enginesim:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("enginesim", flag.ContinueOnError)
	var cfg enginesim.Config
	cfg.Register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := enginesim.ApplyEnv(fs, os.Getenv); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	eng, err := enginesim.New(cfg)
	if err != nil {
		return err
	}
	defer eng.Close()

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	srv := &http.Server{Handler: eng.Handler(), ReadHeaderTimeout: 10 * time.Second}
	c := eng.Config()
	slog.Info("enginesim serving", "addr", ln.Addr().String(), "model", c.Model, "format", c.Format,
		"kv_tokens", c.KVTokens/int64(c.BlockSize)*int64(c.BlockSize), "block_size", c.BlockSize, "slots", c.Slots,
		"max_model_len", c.MaxModelLen, "speed", c.Speed,
		"output_tokens", c.OutputTokens, "output_dist", c.OutputDist)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// Stop accepting, let answers in flight finish for a while, then end
	// the engine (cutting what is left) and close the connections.
	slog.Info("enginesim shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	err = srv.Shutdown(sctx)
	eng.Close()
	if err != nil {
		_ = srv.Close()
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
