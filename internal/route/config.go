package route

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/estimate"
	"github.com/leasehold/leasehold/internal/flagenv"
	"github.com/leasehold/leasehold/internal/httpguard"
	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
)

// EnvPrefix prefixes the environment variable of every flag: --queue-depth
// is also LEASEHOLD_QUEUE_DEPTH. A flag given on the command line wins.
const EnvPrefix = "LEASEHOLD_"

// maxClockOffset bounds --clock-offset.
const maxClockOffset = 24 * time.Hour

// maxFailoverAttempts bounds --failover-attempts.
const maxFailoverAttempts = 16

// Admission modes.
const (
	// AdmissionLedger leases every request from the shared ledger (the
	// default and the point of Leasehold).
	AdmissionLedger = "ledger"
	// AdmissionLocal is the BASELINE of today's routers, kept for
	// comparison only: admit against a scraped engine-metrics snapshot plus
	// this router's own additions. N routers over-admit up to N times.
	AdmissionLocal = "local"
)

// Prompt token counting (--prompt-tokens).
const (
	// PromptEstimate estimates a text prompt's tokens from its bytes, with
	// a ratio calibrated from the engines' reported usage (the default).
	PromptEstimate = "estimate"
	// PromptTokenize asks an engine of the pool for the exact count (vLLM's
	// POST /tokenize) before leasing, falling back to the estimate when the
	// call fails or times out.
	PromptTokenize = "tokenize"
)

// Config is the router process's settings. Register the flags with
// RegisterFlags, apply the environment with ApplyEnv, then Validate.
type Config struct {
	// Ledger is the --ledger URL (required in ledger admission).
	Ledger string
	// TestMemoryLedger allows a memory:// Ledger, this router's own: tests only (--test-memory-ledger).
	TestMemoryLedger bool
	// LedgerTLS connects to a grpc:// ledger (a reserver) over TLS,
	// verifying its certificate against the system roots unless
	// LedgerCAFile is set (--ledger-tls; default false, plaintext). The
	// file flags below imply it. Like every Ledger* field below, it
	// applies to grpc:// ledgers only; with another scheme it is an error.
	LedgerTLS bool
	// LedgerCAFile is a PEM file of the CAs that sign the reserver's
	// certificate (--ledger-ca-file; optional). Read at startup.
	LedgerCAFile string
	// LedgerCertFile and LedgerKeyFile are this router's PEM client
	// certificate and key for mTLS (--ledger-cert-file, --ledger-key-file;
	// both or neither, read at startup). Without LEASEHOLD_TOKEN the
	// certificate is the router's identity at the reserver: its first DNS
	// SAN (else CN) must equal ID, or the reserver refuses this router's
	// holders and it never becomes ready. A token that is sent decides
	// instead.
	LedgerCertFile, LedgerKeyFile string
	// LedgerServerName overrides the name checked in the reserver's
	// certificate (--ledger-server-name; default the host of the --ledger
	// URL).
	LedgerServerName string
	// TokenFile holds the bearer token sent to a grpc:// ledger, one line
	// (--token-file; optional, read at startup by cmd/router): else
	// LEASEHOLD_TOKEN; both set must agree.
	TokenFile string
	// FleetFile is the fleet YAML (--config); required.
	FleetFile string
	// Listen is the HTTP listen address (default 127.0.0.1:8080; port 0
	// picks a free one).
	Listen string
	// ID names this router (--id); holder ids are "<ID>/<random>".
	// Required.
	ID string
	// Admission is "ledger" (default) or "local" (baseline, see
	// AdmissionLocal).
	Admission string

	// Overcommit is the retired --overcommit flag: set, Validate refuses
	// it and names what replaced it (pools[].reserve: elastic).
	Overcommit bool
	// ReserveQuantile is the completion-length quantile a lease in a warm
	// elastic pool reserves before it grows, in (0, 1) (default 0.5).
	ReserveQuantile float64
	// LearnWindow is how far back the learned completion lengths reach
	// (default 10m; internal/estimate, learned.go).
	LearnWindow time.Duration
	// PromptMargin is how many mean absolute deviations above the
	// calibrated prompt-token ratio the estimate is taken (default 2).
	PromptMargin float64
	// PromptTokens is how a text prompt's tokens are counted: "estimate"
	// (default) or "tokenize" (see PromptTokenize).
	PromptTokens string
	// TokenizeTimeout bounds one /tokenize call with --prompt-tokens
	// tokenize (default 2s); when it passes the estimate is used.
	TokenizeTimeout time.Duration

	// MaxBodyBytes bounds a request body (default 4 MiB).
	MaxBodyBytes int64
	// MaxModelLen is the engines' context length in tokens (the most
	// prompt + output of one sequence) for a pool whose fleet entry gives
	// no max_model_len and whose engines have not reported theirs, and for
	// engines of a pool that have not reported yet (default 8192). See
	// estimate.ContextLens.
	MaxModelLen int64
	// MaxN bounds a request's n (default 128).
	MaxN int
	// AffinityBytes is how many leading prompt bytes pick the preferred
	// engine by rendezvous hashing (default 256; 0 disables affinity).
	AffinityBytes int
	// AffinityBonus is added to the preferred engine's free-capacity
	// score, a fraction in [0, 1] (default 0.15).
	AffinityBonus float64

	// QueueDepth bounds the requests waiting for capacity per pool
	// (default 64; 0 rejects at once).
	QueueDepth int
	// QueueTimeout bounds a request's wait for capacity (default 5s).
	QueueTimeout time.Duration
	// QueueQuota also queues tenant-quota rejections (default false: they
	// are answered 429 at once).
	QueueQuota bool

	// AbortGrace is how long a lease outlives a cut upstream request
	// (client gone, fenced, timeout) before it is released, so the engine
	// has noticed the closed connection and aborted before the capacity
	// is granted again (default 250ms).
	AbortGrace time.Duration
	// UpstreamTimeout bounds a request's upstream exchanges from its first
	// dispatch, failovers and streaming included (default 10m).
	UpstreamTimeout time.Duration
	// FailoverAttempts bounds a request's dispatches: one that fails before
	// any byte reached the client goes on to another engine, at most this
	// many in all (internal/failover; default 3, 1 turns failover off).
	FailoverAttempts int
	// ScrapeInterval is the local admission's metrics scrape interval
	// (default 1s).
	ScrapeInterval time.Duration
	// ShutdownTimeout bounds draining in-flight requests, and the
	// releases cut requests leave behind, on shutdown (default 30s).
	ShutdownTimeout time.Duration
	// ReadyTimeout is how long after start the pools may stay
	// unconfigured in the ledger (unreachable, no engine capacity known)
	// before the router logs an error; it keeps serving, unready, and
	// retrying with backoff (default 30s).
	ReadyTimeout time.Duration
	// ViewInterval is how often the ledger's per-engine totals are polled
	// (internal/fleetview): ranking then sees every router's leases, and queued
	// requests are woken when another router releases (default 250ms; 0
	// turns polling off: ranking sees this router's leases only and
	// waiters retry on the ledger's hint).
	ViewInterval time.Duration
	// BlockLeaseKV and BlockLeaseSlots are the size of a block lease
	// (lease.BlockConfig): small requests are admitted locally against
	// blocks of an engine's capacity held per engine, tenant and priority.
	// Both 0 (the default) turn blocks off; otherwise both must be
	// positive.
	BlockLeaseKV, BlockLeaseSlots int64
	// BlockLeaseIdle is how long a block with no request on it is kept
	// before it goes back to the ledger (default 5s).
	BlockLeaseIdle time.Duration
	// LogLevel is debug, info, warn or error (default info).
	LogLevel string
	// DebugListen, when set, serves Go's profiler (net/http/pprof) on this
	// address, apart from the proxy's listener (default off). Bind it to
	// loopback: profiles reveal internals.
	DebugListen string

	// HTTP bounds the proxy's clients (--http-*; internal/httpguard).
	HTTP httpguard.Config

	// ClockOffset skews the router's wall clock by this much (default 0).
	// A fault-injection and testing knob only: the chaos clock_offset fault
	// sets it (LEASEHOLD_CLOCK_OFFSET) to show that clock skew between
	// routers has no effect. Intervals keep the monotonic clock; see
	// skewclock.Offset.
	ClockOffset time.Duration
}

// Defaults returns a Config with every default set.
func Defaults() Config {
	return Config{
		Listen:          "127.0.0.1:8080",
		Admission:       AdmissionLedger,
		ReserveQuantile: 0.5,
		LearnWindow:     estimate.DefaultLearnedWindow,
		PromptMargin:    2,
		PromptTokens:    PromptEstimate,
		TokenizeTimeout: 2 * time.Second,
		MaxBodyBytes:    4 << 20,
		MaxModelLen:     8192,
		MaxN:            128,
		AffinityBytes:   256,
		AffinityBonus:   0.15,
		QueueDepth:      64,
		QueueTimeout:    5 * time.Second,
		AbortGrace:      250 * time.Millisecond,
		UpstreamTimeout: 10 * time.Minute,
		ScrapeInterval:  time.Second,
		ShutdownTimeout: 30 * time.Second,
		ReadyTimeout:    30 * time.Second,
		ViewInterval:    250 * time.Millisecond,
		BlockLeaseIdle:  lease.DefaultBlockIdle,
		LogLevel:        "info",
		HTTP:            httpguard.Defaults(),

		FailoverAttempts: 3,
	}
}

// RegisterFlags registers c's flags on fs, with c's values as defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Ledger, "ledger", c.Ledger, "ledger URL: grpc://host:port (a reserver), redis://host:port/db, etcd://host:port (memory:// only with --test-memory-ledger)")
	fs.BoolVar(&c.TestMemoryLedger, "test-memory-ledger", c.TestMemoryLedger, "tests only: allow --ledger memory://, a ledger of this router's own that no other router sees")
	fs.BoolVar(&c.LedgerTLS, "ledger-tls", c.LedgerTLS, "grpc:// ledger: connect over TLS, verifying the reserver against the system roots (implied by the other --ledger-*-file flags)")
	fs.StringVar(&c.LedgerCAFile, "ledger-ca-file", c.LedgerCAFile, "grpc:// ledger: PEM CAs that sign the reserver's certificate (implies TLS)")
	fs.StringVar(&c.LedgerCertFile, "ledger-cert-file", c.LedgerCertFile, "grpc:// ledger: PEM client certificate for mTLS, with --ledger-key-file; without LEASEHOLD_TOKEN its first DNS SAN (else CN) is this router's identity and must equal --id")
	fs.StringVar(&c.LedgerKeyFile, "ledger-key-file", c.LedgerKeyFile, "grpc:// ledger: PEM key of --ledger-cert-file")
	fs.StringVar(&c.LedgerServerName, "ledger-server-name", c.LedgerServerName, "grpc:// ledger: name checked in the reserver's certificate (default: the --ledger host)")
	fs.StringVar(&c.TokenFile, "token-file", c.TokenFile, "grpc:// ledger: file holding the router token sent to the reserver (else env LEASEHOLD_TOKEN)")
	fs.StringVar(&c.FleetFile, "config", c.FleetFile, "fleet file (YAML); required")
	fs.StringVar(&c.Listen, "listen", c.Listen, "HTTP listen address")
	fs.StringVar(&c.ID, "id", c.ID, "router name (holder ids are NAME/<key tag>.<random>); required")
	fs.StringVar(&c.Admission, "admission", c.Admission, "ledger, or local: the over-admitting BASELINE of today's routers, for comparison only")
	fs.BoolVar(&c.Overcommit, "overcommit", c.Overcommit, "retired: elastic pools (the fleet file's pools[].reserve, the default) reserve the learned completion length and grow")
	fs.Float64Var(&c.ReserveQuantile, "reserve-quantile", c.ReserveQuantile, "elastic pools: the completion-length quantile a lease reserves before it grows, in (0, 1)")
	fs.DurationVar(&c.LearnWindow, "learn-window", c.LearnWindow, "elastic pools: how far back the fleet-wide completion lengths are read")
	fs.Float64Var(&c.PromptMargin, "prompt-margin", c.PromptMargin, "prompt estimate: mean absolute deviations added to the calibrated ratio")
	fs.StringVar(&c.PromptTokens, "prompt-tokens", c.PromptTokens, "how text prompts are counted before leasing: estimate (bytes/4 × a calibrated ratio), or tokenize (exact, from an engine's POST /tokenize; the estimate if that fails)")
	fs.DurationVar(&c.TokenizeTimeout, "tokenize-timeout", c.TokenizeTimeout, "--prompt-tokens=tokenize: bound on one /tokenize call, after which the estimate is used")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest request body accepted")
	fs.Int64Var(&c.MaxModelLen, "max-model-len", c.MaxModelLen, "engines' context length in tokens (prompt + output of one sequence) where the fleet file gives no max_model_len and the engines have not reported it")
	fs.IntVar(&c.MaxN, "max-n", c.MaxN, "largest n (choices per request) accepted")
	fs.IntVar(&c.AffinityBytes, "affinity-bytes", c.AffinityBytes, "leading prompt bytes hashed for engine affinity (0 disables)")
	fs.Float64Var(&c.AffinityBonus, "affinity-bonus", c.AffinityBonus, "score bonus of the affinity engine, in [0, 1]")
	fs.IntVar(&c.QueueDepth, "queue-depth", c.QueueDepth, "requests waiting for capacity per pool (0: reject at once)")
	fs.DurationVar(&c.QueueTimeout, "queue-timeout", c.QueueTimeout, "longest wait for capacity")
	fs.BoolVar(&c.QueueQuota, "queue-quota", c.QueueQuota, "also queue tenant-quota rejections")
	fs.DurationVar(&c.AbortGrace, "abort-grace", c.AbortGrace, "how long a cut request's lease is kept so the engine aborts it first")
	fs.DurationVar(&c.UpstreamTimeout, "upstream-timeout", c.UpstreamTimeout, "bound on a request's upstream exchanges from its first dispatch, failovers and streaming included")
	fs.IntVar(&c.FailoverAttempts, "failover-attempts", c.FailoverAttempts, "most dispatches of one request: one that fails before any byte reached the client goes to another engine (1: no failover)")
	fs.DurationVar(&c.ScrapeInterval, "scrape-interval", c.ScrapeInterval, "--admission=local: engine metrics scrape interval")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "bound on draining in-flight requests at shutdown")
	fs.DurationVar(&c.ReadyTimeout, "ready-timeout", c.ReadyTimeout, "how long the pools may stay unconfigured in the ledger before an error is logged (the router keeps retrying, unready)")
	fs.DurationVar(&c.ViewInterval, "view-interval", c.ViewInterval, "how often the ledger's per-engine totals are polled for ranking and to wake queued requests (0: off)")
	fs.Int64Var(&c.BlockLeaseKV, "block-lease-kv", c.BlockLeaseKV, "KV tokens of a block lease that small requests are admitted against locally (0: off; needs --block-lease-slots)")
	fs.Int64Var(&c.BlockLeaseSlots, "block-lease-slots", c.BlockLeaseSlots, "slots of a block lease (0: off; needs --block-lease-kv)")
	fs.DurationVar(&c.BlockLeaseIdle, "block-lease-idle", c.BlockLeaseIdle, "how long an idle block lease is kept before it goes back to the ledger")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.StringVar(&c.DebugListen, "debug-listen", c.DebugListen, "serve Go's profiler (/debug/pprof/) on this address, e.g. 127.0.0.1:6060 (default off)")
	c.HTTP.RegisterFlags(fs)
	fs.DurationVar(&c.ClockOffset, "clock-offset", c.ClockOffset, "fault injection/testing only: skew this router's wall clock by this much (e.g. 30s, -30s); intervals are unaffected")
}

// EnvName returns the environment variable of a flag.
func EnvName(flagName string) string { return flagenv.Name(EnvPrefix, flagName) }

// ApplyEnv sets every flag of fs not given on the command line from its
// environment variable (EnvName), if set. Call it after fs.Parse.
func ApplyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	return flagenv.Apply(fs, EnvPrefix, lookup)
}

// ParseFlags parses args and the environment into a validated Config.
func ParseFlags(args []string, lookup func(string) (string, bool), out interface{ Write([]byte) (int, error) }) (Config, error) {
	c := Defaults()
	fs := flag.NewFlagSet("router", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = flagenv.Usage(fs, "router --ledger URL --config FLEET.yaml --id NAME [--listen ADDR] [flags]", EnvPrefix, "queue-depth",
		"The router token sent to a grpc:// ledger comes from LEASEHOLD_TOKEN or --token-file.")
	c.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := ApplyEnv(fs, lookup); err != nil {
		return c, err
	}
	return c, c.Validate()
}

// Validate rejects settings the router cannot run with, naming the flag and
// what is allowed.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.FleetFile == "" {
		bad("--config: the fleet file is required (or env %s)", EnvName("config"))
	}
	switch c.Admission {
	case AdmissionLedger:
		if c.Ledger == "" {
			bad("--ledger: required with --admission=ledger (grpc://host:port, redis://host:port/db, etcd://host:port)")
		} else if strings.HasPrefix(c.Ledger, "memory://") && !c.TestMemoryLedger {
			bad("--ledger = %q: refused: each router on memory:// keeps a ledger of its own and admits the whole fleet, so routers together over-admit it; use a shared ledger: a reserver (grpc://host:port), redis://host:port/db or etcd://host:port (--test-memory-ledger or %s=true allows it, for a test with one router)", c.Ledger, EnvName("test-memory-ledger"))
		}
	case AdmissionLocal:
	default:
		bad("--admission = %q: want ledger or local", c.Admission)
	}
	c.validateLedgerTLS(bad)
	if c.ID == "" || len(c.ID) > lease.MaxHolderNameLen || strings.ContainsAny(c.ID, " \t\r\n") {
		bad("--id = %q: required, 1..%d bytes, no spaces", c.ID, lease.MaxHolderNameLen)
	}
	if c.Listen == "" {
		bad("--listen: must not be empty")
	}
	if c.Overcommit {
		bad("--overcommit: retired; pools reserve elastic by default (the fleet file's pools[].reserve): a lease reserves the learned completion length and grows with the output, so the ledger still sees what engines hold")
	}
	if !(c.ReserveQuantile > 0 && c.ReserveQuantile < 1) {
		bad("--reserve-quantile = %v: want (0, 1)", c.ReserveQuantile)
	}
	if c.LearnWindow < time.Second {
		bad("--learn-window = %s: want at least 1s", c.LearnWindow)
	}
	if !(c.PromptMargin >= 0 && c.PromptMargin <= 10) {
		bad("--prompt-margin = %v: want 0..10", c.PromptMargin)
	}
	switch c.PromptTokens {
	case PromptEstimate, PromptTokenize:
	default:
		bad("--prompt-tokens = %q: want %s or %s", c.PromptTokens, PromptEstimate, PromptTokenize)
	}
	if c.MaxBodyBytes < 1024 || c.MaxBodyBytes > 1<<30 {
		bad("--max-body-bytes = %d: want 1024..%d", c.MaxBodyBytes, 1<<30)
	}
	if c.MaxModelLen < 16 || c.MaxModelLen > ledger.MaxAmount {
		bad("--max-model-len = %d: want 16..%d", c.MaxModelLen, ledger.MaxAmount)
	}
	if c.MaxN < 1 || c.MaxN > 1024 {
		bad("--max-n = %d: want 1..1024", c.MaxN)
	}
	if c.AffinityBytes < 0 {
		bad("--affinity-bytes = %d: want >= 0", c.AffinityBytes)
	}
	if !(c.AffinityBonus >= 0 && c.AffinityBonus <= 1) {
		bad("--affinity-bonus = %v: want [0, 1]", c.AffinityBonus)
	}
	if c.ViewInterval != 0 && c.ViewInterval < 10*time.Millisecond {
		bad("--view-interval = %s: want 0 (off) or at least 10ms", c.ViewInterval)
	}
	if c.FailoverAttempts < 1 || c.FailoverAttempts > maxFailoverAttempts {
		bad("--failover-attempts = %d: want 1..%d (1: no failover)", c.FailoverAttempts, maxFailoverAttempts)
	}
	if c.QueueDepth < 0 {
		bad("--queue-depth = %d: want >= 0", c.QueueDepth)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
		min  time.Duration
	}{
		{"--queue-timeout", c.QueueTimeout, 0},
		{"--abort-grace", c.AbortGrace, 0},
		{"--upstream-timeout", c.UpstreamTimeout, time.Second},
		{"--scrape-interval", c.ScrapeInterval, 10 * time.Millisecond},
		{"--shutdown-timeout", c.ShutdownTimeout, 0},
		{"--ready-timeout", c.ReadyTimeout, 0},
		{"--block-lease-idle", c.BlockLeaseIdle, 100 * time.Millisecond},
		{"--tokenize-timeout", c.TokenizeTimeout, time.Millisecond},
	} {
		if d.v < d.min {
			bad("%s = %s: must be at least %s", d.flag, d.v, d.min)
		}
	}
	if c.ClockOffset < -maxClockOffset || c.ClockOffset > maxClockOffset {
		bad("--clock-offset = %s: want -%s..%s", c.ClockOffset, maxClockOffset, maxClockOffset)
	}
	if (c.BlockLeaseKV == 0) != (c.BlockLeaseSlots == 0) || c.BlockLeaseKV < 0 || c.BlockLeaseSlots < 0 ||
		c.BlockLeaseKV > ledger.MaxAmount || c.BlockLeaseSlots > ledger.MaxAmount {
		bad("--block-lease-kv = %d, --block-lease-slots = %d: both 0 (off) or both 1..%d", c.BlockLeaseKV, c.BlockLeaseSlots, ledger.MaxAmount)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("--log-level = %q: want debug, info, warn or error", c.LogLevel)
	}
	return errors.Join(append(errs, c.HTTP.Validate())...)
}

// grpcScheme is the --ledger scheme of a reserver (remote.Scheme; route
// names no backend).
const grpcScheme = "grpc"

// validateLedgerTLS reports --ledger-* TLS flags set for a ledger that is
// not grpc://, and a client certificate without its key or a key without
// its certificate. The files are read when the ledger is opened at startup
// (ledgerurl.Open); ledgerurl.FlagError names the flag of one that fails.
func (c *Config) validateLedgerTLS(bad func(format string, args ...any)) {
	scheme, _, _ := strings.Cut(c.Ledger, "://")
	if scheme != grpcScheme {
		for _, f := range []struct {
			flag string
			set  bool
		}{
			{"--ledger-tls", c.LedgerTLS},
			{"--ledger-ca-file", c.LedgerCAFile != ""},
			{"--ledger-cert-file", c.LedgerCertFile != ""},
			{"--ledger-key-file", c.LedgerKeyFile != ""},
			{"--ledger-server-name", c.LedgerServerName != ""},
			{"--token-file", c.TokenFile != ""},
		} {
			if f.set {
				bad("%s: applies to a grpc:// --ledger (a reserver) only, not --ledger = %q", f.flag, c.Ledger)
			}
		}
		return
	}
	if c.LedgerCertFile != "" && c.LedgerKeyFile == "" {
		bad("--ledger-key-file: required with --ledger-cert-file (the client certificate's key)")
	}
	if c.LedgerKeyFile != "" && c.LedgerCertFile == "" {
		bad("--ledger-cert-file: required with --ledger-key-file")
	}
}
