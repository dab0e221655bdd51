package cli_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/leasehold/leasehold/internal/cli"
)

func ExampleParseFailed() {
	fmt.Println(cli.ParseFailed(os.Stdout, "router", flag.ErrHelp))
	fmt.Println(cli.ParseFailed(os.Stdout, "router", fmt.Errorf("parse: %w", flag.ErrHelp)))
	fmt.Println(cli.ParseFailed(os.Stdout, "router", errors.New("--queue-depth: bad")))
	// Output:
	// 0
	// 0
	// router: --queue-depth: bad
	// 2
}

func ExampleLogger() {
	ctx := context.Background()
	for _, level := range []string{"debug", "info", "warn", "error", "bogus"} {
		log := cli.Logger(os.Stderr, level) // only asked, never written to
		fmt.Println(level, log.Enabled(ctx, slog.LevelDebug), log.Enabled(ctx, slog.LevelInfo),
			log.Enabled(ctx, slog.LevelWarn), log.Enabled(ctx, slog.LevelError))
	}
	// Output:
	// debug true true true true
	// info false true true true
	// warn false false true true
	// error false false false true
	// bogus false true true true
}

// server fails its shutdown when err is set.
type server struct{ err error }

func (s server) Shutdown(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		return errors.New("no deadline")
	}
	return s.err
}

func ExampleStop() {
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: noTime}))
	fmt.Println(cli.Stop(log, server{}, time.Second, 0))
	fmt.Println(cli.Stop(log, server{errors.New("drain: deadline exceeded")}, time.Second, 0))
	// Output:
	// level=INFO msg=stopped
	// 0
	// level=ERROR msg=shutdown err="drain: deadline exceeded"
	// level=INFO msg=stopped
	// 1
}
