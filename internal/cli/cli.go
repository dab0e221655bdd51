// Package cli is the opening and the close every Leasehold server binary
// shares: how a failed flag parse ends the process, the logger its
// validated --log-level asks for, and the bounded shutdown at the end.
// Each cmd/* main stays thin: parse, log, wire, wait, stop.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// ParseFailed is the exit status of a failed flag parse: 0 for --help (the
// flag package has printed the usage), else 2 after writing "name: err" to
// stderr.
func ParseFailed(stderr io.Writer, name string, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return 2
}

// Logger is a text logger on w at level: debug, info, warn or error, the
// values a Config's Validate accepts; any other value logs at info.
func Logger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// Stop shuts s down under a context of its own bounded by timeout (the
// signal that ended the wait has cancelled nothing it needs) and logs
// "stopped". It returns code, or 1 when the shutdown failed.
func Stop(log *slog.Logger, s interface{ Shutdown(context.Context) error }, timeout time.Duration, code int) int {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		log.Error("shutdown", "err", err)
		code = 1
	}
	log.Info("stopped")
	return code
}
