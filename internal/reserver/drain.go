package reserver

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/remote"
	"github.com/leasehold/leasehold/internal/portprobe"
)

// drainCLI is the `reserver drain` settings.
type drainCLI struct {
	server, pool, engine string
	undrain              bool
	tokenFile            string
	tls                  remote.Options
	timeout              time.Duration
}

// RunDrain is `reserver drain`: it drains an engine through a reserver's
// gRPC ledger service (no new grants on it; its leases end as their
// requests complete), or undrains it with --undrain, then prints the
// engine's state. The drain is the ledger's, so every router sees it at
// its next Acquire, and it survives fleet-file reloads. It needs an admin
// principal: the shared LEASEHOLD_TOKEN, an admin token (--token-file), or
// an admin certificate identity (--cert-file, --key-file). It returns the
// exit code: 0 on success, 1 when the call failed, 2 on bad usage.
func RunDrain(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	var c drainCLI
	fs := flag.NewFlagSet("reserver drain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: reserver drain --server ADDR --pool P --engine E [--undrain]\n\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&c.server, "server", Defaults().GRPCListen, "the reserver's gRPC address, its --grpc-listen (host:port or grpc://host:port); not its HTTP address")
	fs.StringVar(&c.pool, "pool", "", "the engine's pool (required)")
	fs.StringVar(&c.engine, "engine", "", "the engine to drain (required)")
	fs.BoolVar(&c.undrain, "undrain", false, "undrain the engine instead: it takes new grants again")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding an admin token (else env "+EnvToken+")")
	fs.BoolVar(&c.tls.TLS, "tls", false, "connect over TLS, verifying the reserver against the system roots (implied by the file flags)")
	fs.StringVar(&c.tls.CAFile, "ca-file", "", "PEM CAs that sign the reserver's certificate")
	fs.StringVar(&c.tls.CertFile, "cert-file", "", "PEM client certificate (an --admin-identities identity), with --key-file")
	fs.StringVar(&c.tls.KeyFile, "key-file", "", "PEM key of --cert-file")
	fs.StringVar(&c.tls.ServerName, "server-name", "", "name checked in the reserver's certificate (default: the host of --server)")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on the whole command")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := ApplyEnv(fs, lookup); err != nil {
		fmt.Fprintln(stderr, "reserver drain:", err)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "reserver drain: unexpected argument %q\n", fs.Arg(0))
		return 2
	case c.pool == "" || c.engine == "":
		fmt.Fprintln(stderr, "reserver drain: --pool and --engine are required")
		return 2
	}
	if err := c.run(ctx, lookup, stdout); err != nil {
		fmt.Fprintln(stderr, "reserver drain:", err)
		return 1
	}
	return 0
}

func (c *drainCLI) run(ctx context.Context, lookup func(string) (string, bool), stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	opts := c.tls
	var err error
	if opts.Token, err = cliToken(lookup, c.tokenFile); err != nil {
		return err
	}
	addr := strings.TrimPrefix(c.server, "grpc://")
	l, err := remote.Dial("grpc://"+addr, opts)
	if err != nil {
		return err
	}
	defer l.Close()
	pool, engine := ledger.PoolID(c.pool), ledger.EngineID(c.engine)
	if err := l.SetDraining(ctx, pool, engine, !c.undrain); err != nil {
		switch {
		case errors.Is(err, remote.ErrUnauthenticated) && opts.Token == "":
			err = fmt.Errorf("%w (set %s or --token-file)", err, EnvToken)
		case errors.Is(err, ledger.ErrUnknownEngine):
			err = fmt.Errorf("%w (an engine whose kv_tokens the fleet file omits is in the ledger only once its metrics were first read)", err)
		case portprobe.Probe(ctx, addr) == portprobe.HTTP1:
			err = fmt.Errorf("%s is an HTTP address (the reserver's --http-listen): reserver drain --server takes the reserver's gRPC address, its --grpc-listen (default %s)", addr, Defaults().GRPCListen)
		}
		return err
	}
	st, err := l.Stats(ctx, pool)
	if err != nil {
		return fmt.Errorf("set, but reading the engine back failed: %w", err)
	}
	for _, e := range st.Engines {
		if e.Spec.ID != engine {
			continue
		}
		state := "draining: no new grants"
		if !e.Draining {
			state = "not draining: takes new grants"
		}
		_, err := fmt.Fprintf(stdout, "pool %s engine %s: %s; %d leases hold %d KV tokens and %d slots\n",
			pool, engine, state, e.Leases, e.ReservedKV, e.ReservedSlots)
		return err
	}
	return fmt.Errorf("set, but engine %s is not in pool %s's stats", engine, pool)
}
