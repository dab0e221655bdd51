// Command router is a Leasehold router replica: an OpenAI-compatible proxy
// that leases KV-token and slot capacity from the shared ledger before it
// dispatches each request to a GPU engine. The wiring lives in
// internal/route; this file parses, starts, waits for a signal and shuts
// down in order.
//
//	router --ledger URL --config FLEET.yaml --listen ADDR --id NAME [--admission=ledger|local]
//	       [--block-lease-kv N --block-lease-slots N] [--prompt-tokens=estimate|tokenize] [--failover-attempts N]
//	       [--ledger-ca-file FILE] [--ledger-cert-file FILE --ledger-key-file FILE]
//
// --block-lease-kv/--block-lease-slots (both 0, off, by default) size the
// block leases small requests are admitted against locally.
//
// --prompt-tokens estimate|tokenize (LEASEHOLD_PROMPT_TOKENS; default
// estimate) is how a text prompt is counted before its lease: estimated
// from its bytes with a ratio calibrated from engines' reported usage, or
// counted exactly by an engine of the pool with vLLM's POST /tokenize
// (bounded by --tokenize-timeout, default 2s), falling back to the
// estimate, counted in leasehold_router_tokenize_errors_total, when that
// fails.
//
// --failover-attempts N (LEASEHOLD_FAILOVER_ATTEMPTS; default 3, 1 turns
// it off) bounds a request's dispatches: one that fails before any byte
// reached the client (refused, reset, engine 500/502/503/504, no response
// byte within the pool's first_byte_timeout) goes to another engine, all
// within --upstream-timeout (default 10m) from the first dispatch.
//
// --max-model-len (default 8192) is the context length of a pool whose
// fleet entry gives no max_model_len until its engines report theirs (GET
// /v1/models; TGI: GET /info); it bounds max_tokens and is what a request
// without max_tokens reserves per sequence.
//
// Every flag can also be set from the environment: --queue-depth is
// LEASEHOLD_QUEUE_DEPTH (router --help says so). LEASEHOLD_TOKEN, or the
// one line of --token-file, is the bearer token sent to a reserver
// (grpc:// ledgers): the router token the reserver accepts in
// LEASEHOLD_ROUTER_ROLE_TOKENS, never its admin token. The router also
// draws a holder key at start, derives its holder ids from it and sends it
// with every holder call, so the reserver lets it touch only its own
// session's leases (internal/ledger/holderkey).
//
// A grpc:// ledger is plaintext unless one of these is set (they are
// refused with any other scheme):
//
//	--ledger-tls                TLS, verifying the reserver against the system roots
//	--ledger-ca-file FILE       PEM CAs that sign the reserver's certificate (implies TLS)
//	--ledger-cert-file FILE     PEM client certificate for mTLS (implies TLS) ...
//	--ledger-key-file FILE      ... and its key: both or neither
//	--ledger-server-name NAME   name checked in the reserver's certificate (default: the --ledger host)
//
// The files are read at startup: one that is missing or does not parse is
// an error naming its flag (exit status 2). With a client certificate and
// no LEASEHOLD_TOKEN the certificate is the router's identity at a
// reserver with --tls-client-ca-file: its first DNS SAN (else CN) must be
// --id. A token that is sent decides instead.
//
// --http-read-header-timeout, --http-body-timeout, --http-write-timeout,
// --http-idle-timeout, --http-max-conns and --http-max-unauthenticated
// bound the proxy's clients (internal/httpguard): the API key is checked
// on the headers, before the body; a stalled client is cut without
// bounding a stream that is read; at --http-max-conns (default
// (RLIMIT_NOFILE-64)/2, logged at start) a new connection sheds the
// stalest idle or still-sending one instead of waiting.
//
// --debug-listen ADDR (off by default) serves Go's profiler, /debug/pprof/,
// on its own listener, stopped after the router at shutdown: bind it to
// loopback.
//
// --ledger memory:// is refused (exit status 2): that ledger would be this
// router's own, and each router on one would admit the whole fleet. Only
// --test-memory-ledger (LEASEHOLD_TEST_MEMORY_LEDGER) allows it, for a test
// with one router, and the router then logs a warning.
//
// Signals: SIGTERM or SIGINT shut down in order (unready, stop accepting,
// drain, release, end the sessions), at any point, the ledger reachable or
// not: every ledger call has its own deadline. SIGHUP reloads the fleet
// file's tenants, API keys and priority_policy for the requests that start
// after it (leasehold_router_fleet_reloads_total); a file that does not
// load or validate is logged and the previous fleet kept. Changes to
// pools, priorities, default_priority or lease are logged as needing a
// restart, and not applied.
//
// Garbage collection: unless GOGC is set, the router runs with GOGC=400
// (routerGCPercent) rather than Go's 100. Each request allocates a few
// hundred short-lived objects and keeps almost none, so collecting at 100%
// heap growth spent ~10-20% of the router's CPU in the collector; at 400%
// the heap can grow to about five times what is live (a few MB live at
// hundreds of streams). GOGC and GOMEMLIMIT still apply as Go documents.
//
// --clock-offset DURATION (LEASEHOLD_CLOCK_OFFSET) is a fault-injection and
// testing knob, default 0: it skews the router's wall clock (the lease
// manager's included) by DURATION, e.g. 30s or -30s, keeping the monotonic
// clock for intervals. The chaos clock_offset fault uses it to show that
// skew between routers has no effect: the ledger decides by its own clock.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/ledgerurl"
	"github.com/leasehold/leasehold/internal/route"
)

func main() { os.Exit(run()) }

// routerGCPercent is the router's GOGC when the environment sets none.
const routerGCPercent = 400

func run() int {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(routerGCPercent)
	}
	cfg, err := route.ParseFlags(os.Args[1:], os.LookupEnv, os.Stderr)
	if err != nil {
		return cli.ParseFailed(os.Stderr, "router", err)
	}
	log := cli.Logger(os.Stderr, cfg.LogLevel).With("router", cfg.ID)
	// Subscribed first, so that no signal is missed; SIGHUP reloads the
	// fleet file's tenancy (reload), and kills the router no more.
	sigC := make(chan os.Signal, 4)
	signal.Notify(sigC, syscall.SIGTERM, os.Interrupt, syscall.SIGHUP)
	defer signal.Stop(sigC)

	f, err := fleet.Load(cfg.FleetFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "router: --config:", err)
		return 2
	}
	var l ledger.Ledger
	if cfg.Admission == route.AdmissionLedger {
		token, err := ledgerToken(cfg.TokenFile, os.LookupEnv)
		if err != nil {
			fmt.Fprintln(os.Stderr, "router:", err)
			return 2
		}
		l, err = ledgerurl.Open(cfg.Ledger, ledgerurl.Options{Options: f.Lease.LedgerOptions(), Remote: ledgerClient(&cfg, token).RemoteOptions()})
		if err != nil {
			fmt.Fprintln(os.Stderr, "router:", ledgerurl.FlagError(err))
			return 2
		}
		defer l.Close()
		if cfg.TestMemoryLedger && strings.HasPrefix(cfg.Ledger, "memory://") {
			log.Warn("--test-memory-ledger: THIS ROUTER'S LEDGER IS ITS OWN (memory://). Any other router admits the same engines " +
				"again, over capacity. For a test with one router only; use a reserver (grpc://), redis:// or etcd:// otherwise.")
		}
	}

	r, err := route.New(cfg, route.Options{Fleet: f, Ledger: l, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		return 2
	}
	if cfg.DebugListen != "" {
		dbg := serveDebug(cfg.DebugListen, log)
		defer func() {
			// Stopped after the router, bounded like its shutdown.
			dctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
			defer cancel()
			_ = dbg.Shutdown(dctx)
			<-dbg.doneC
		}()
	}
	ctx := context.Background()
	if err := r.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		return 1
	}
	code := 0
wait:
	for {
		select {
		case sig := <-sigC:
			if sig == syscall.SIGHUP {
				reload(log, r)
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

// reload applies the fleet file's tenants, keys and priority_policy
// (route.Router.Reload); a file that does not load or apply is logged and
// the running fleet kept.
func reload(log *slog.Logger, r *route.Router) {
	kept, err := r.Reload()
	if err != nil {
		log.Error("fleet reload failed; keeping the previous fleet", "err", err)
		return
	}
	log.Info("fleet reloaded: tenants, API keys and priority_policy applied")
	if len(kept) > 0 {
		log.Warn("fleet reload: these sections changed but apply only at start; restart the router (one at a time) for them", "kept", kept)
	}
}

// debugServer is the --debug-listen profiler; run owns it and stops it
// with the router.
type debugServer struct {
	*http.Server
	doneC chan struct{} // closed once Serve returned
}

// serveDebug serves net/http/pprof on addr until Shutdown. A failure to
// listen is logged, not fatal: the profiler is optional.
func serveDebug(addr string, log *slog.Logger) debugServer {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	d := debugServer{Server: &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}, doneC: make(chan struct{})}
	log.Info("profiler serving", "addr", addr)
	go func() {
		defer close(d.doneC)
		if err := d.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("--debug-listen", "err", err)
		}
	}()
	return d
}

// ledgerToken is the bearer token sent to a grpc:// ledger: the one line
// of file (--token-file) when set, else LEASEHOLD_TOKEN (maybe empty); both
// set must agree. An error names the flag.
func ledgerToken(file string, lookup func(string) (string, bool)) (string, error) {
	env, _ := lookup(route.EnvPrefix + "TOKEN")
	if file == "" {
		return env, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	var toks []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			toks = append(toks, line)
		}
	}
	switch {
	case len(toks) != 1:
		return "", fmt.Errorf("--token-file %s: want exactly one token, found %d", file, len(toks))
	case env != "" && env != toks[0]:
		return "", fmt.Errorf("--token-file %s and %sTOKEN are both set and differ; set one", file, route.EnvPrefix)
	}
	return toks[0], nil
}

// ledgerClient is the router's --ledger-* client flags, with token as the
// bearer token (LEASEHOLD_TOKEN; empty sends none, and a client certificate
// then identifies the router).
func ledgerClient(c *route.Config, token string) ledgerurl.Client {
	return ledgerurl.Client{
		Token: token, TLS: c.LedgerTLS, CAFile: c.LedgerCAFile,
		CertFile: c.LedgerCertFile, KeyFile: c.LedgerKeyFile, ServerName: c.LedgerServerName,
	}
}
