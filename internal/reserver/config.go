package reserver

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/audit"
	"github.com/leasehold/leasehold/internal/flagenv"
	"github.com/leasehold/leasehold/internal/httpguard"
	"github.com/leasehold/leasehold/internal/reserver/rpc"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// EnvPrefix prefixes the environment variable of every flag: --grpc-listen
// is also LEASEHOLD_GRPC_LISTEN. A flag given on the command line wins.
const EnvPrefix = "LEASEHOLD_"

// Secret environment variables. Secrets come from the environment or from
// files, never from a flag alone, and are never logged.
const (
	// EnvToken is the shared admin token: the reserver accepts it with
	// every right, and the command-line clients (reserver audit, reserver
	// drain) and a router send it. Give routers a router-role token instead.
	EnvToken = "LEASEHOLD_TOKEN"
	// EnvAdminTokens, EnvRouterRoleTokens and EnvAuditTokens are
	// comma-separated token lists.
	EnvAdminTokens      = "LEASEHOLD_ADMIN_TOKENS"
	EnvRouterRoleTokens = "LEASEHOLD_ROUTER_ROLE_TOKENS"
	EnvAuditTokens      = "LEASEHOLD_AUDIT_TOKENS"
)

// Config is the reserver process's settings. Register the flags with
// RegisterFlags, apply the environment with ApplyEnv, read secrets with
// LoadSecrets, then Validate.
type Config struct {
	// Ledger is the --ledger URL (default memory://).
	Ledger string
	// FleetFile is the fleet YAML (--config); required.
	FleetFile string
	// GRPCListen and HTTPListen are listen addresses (defaults
	// 127.0.0.1:7400 and 127.0.0.1:7401; port 0 picks a free one).
	GRPCListen string
	HTTPListen string

	// TokenFile, when set, holds the shared token instead of LEASEHOLD_TOKEN.
	TokenFile string
	// RouterRoleTokensFile holds router-role tokens, one per line: the
	// router role under any name, each router confined to the holder ids
	// of its own session by its holder key. They add to
	// LEASEHOLD_ROUTER_ROLE_TOKENS. Optional.
	RouterRoleTokensFile string
	// RouterTokensFile holds per-router tokens, "NAME: TOKEN" per line.
	RouterTokensFile string
	// AdminTokensFile and AuditTokensFile hold one token per line; they add
	// to LEASEHOLD_ADMIN_TOKENS and LEASEHOLD_AUDIT_TOKENS.
	AdminTokensFile string
	AuditTokensFile string

	// TLSCertFile and TLSKeyFile serve gRPC over TLS (both or neither);
	// TLSClientCAFile additionally requires client certificates signed by
	// it (mTLS), and a verified certificate then authenticates a gRPC caller
	// that sends no token: its first DNS SAN, else its CommonName, is the
	// router of that name unless listed in AdminIdentities or
	// AuditIdentities. HTTPTLS serves HTTP with the same certificate (HTTP
	// does not ask for client certificates; the audit takes tokens).
	TLSCertFile     string
	TLSKeyFile      string
	TLSClientCAFile string
	HTTPTLS         bool
	// AdminIdentities and AuditIdentities are client-certificate
	// identities with admin rights or read-only rights
	// (--admin-identities, --audit-identities, comma-separated; env
	// LEASEHOLD_ADMIN_IDENTITIES, LEASEHOLD_AUDIT_IDENTITIES). They need
	// TLSClientCAFile. Optional; they are names, not secrets.
	AdminIdentities []string
	AuditIdentities []string

	// ReconcileInterval is the pause between telemetry rounds (default 2s).
	ReconcileInterval time.Duration
	// ScrapeTimeout bounds one engine scrape (default 2s).
	ScrapeTimeout time.Duration
	// ReapplyInterval is how often pools are checked for a new epoch or a
	// wiped store, and unconfigured pools retried (default 5s).
	ReapplyInterval time.Duration
	// SweepInterval is how often every pool is swept; 0 disables it and
	// leaves sweeping to the ledger's calls (default 1s).
	SweepInterval time.Duration
	// ShutdownTimeout bounds the graceful stop of gRPC and HTTP (default 10s).
	ShutdownTimeout time.Duration
	// StartupTimeout bounds the first application of the fleet at Start
	// (configure every pool, one telemetry round when capacities must be
	// discovered, configure again), on top of the bound on each ledger
	// call (fleetapply.CallTimeout). When it passes the reserver serves
	// anyway: /readyz answers 503 while the ledger does not, and pools not
	// configured are retried every ReapplyInterval (default 15s).
	StartupTimeout time.Duration
	// PageRefresh is the audit page's auto-refresh period (default 5s).
	PageRefresh time.Duration
	// LeakAfter is audit.Options.LeakAfter (default 2m).
	LeakAfter time.Duration
	// LogLevel is debug, info, warn or error (default info).
	LogLevel string
	// HTTP bounds the HTTP side's clients (--http-*; internal/httpguard).
	HTTP httpguard.Config
	// GRPC bounds the gRPC side's clients (--grpc-max-recv-bytes,
	// --grpc-max-streams, --grpc-idle-timeout, --grpc-handshake-timeout;
	// rpc.Limits).
	GRPC rpc.Limits

	// Secrets, from LoadSecrets.
	Token            string
	AdminTokens      []string
	RouterRoleTokens []string
	AuditTokens      []string
	// RouterTokens maps router names to their tokens.
	RouterTokens map[string]string
}

// Defaults returns a Config with every default set.
func Defaults() Config {
	return Config{
		Ledger:            "memory://",
		GRPCListen:        "127.0.0.1:7400",
		HTTPListen:        "127.0.0.1:7401",
		ReconcileInterval: telemetry.DefaultInterval,
		ScrapeTimeout:     telemetry.DefaultScrapeTimeout,
		ReapplyInterval:   5 * time.Second,
		SweepInterval:     time.Second,
		ShutdownTimeout:   10 * time.Second,
		StartupTimeout:    15 * time.Second,
		PageRefresh:       5 * time.Second,
		LeakAfter:         audit.DefaultLeakAfter,
		LogLevel:          "info",
		HTTP:              httpguard.Defaults(),
		GRPC:              rpc.DefaultLimits(),
	}
}

// RegisterFlags registers c's flags on fs, with c's values as defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Ledger, "ledger", c.Ledger, "ledger URL: memory://, redis://host:port/db, etcd://host:port, grpc://host:port")
	fs.StringVar(&c.FleetFile, "config", c.FleetFile, "fleet file (YAML); required")
	fs.StringVar(&c.GRPCListen, "grpc-listen", c.GRPCListen, "gRPC ledger service listen address")
	fs.StringVar(&c.HTTPListen, "http-listen", c.HTTPListen, "HTTP listen address (/metrics, /healthz, /readyz, /v1/audit, /)")
	fs.StringVar(&c.TokenFile, "token-file", c.TokenFile, "file holding the shared token (else env "+EnvToken+")")
	fs.StringVar(&c.RouterRoleTokensFile, "router-role-tokens-file", c.RouterRoleTokensFile, "router-role tokens, one per line: any router name, confined to its own session's holders (also env "+EnvRouterRoleTokens+", comma-separated)")
	fs.StringVar(&c.RouterTokensFile, "router-tokens-file", c.RouterTokensFile, `per-router tokens, one "NAME: TOKEN" per line`)
	fs.StringVar(&c.AdminTokensFile, "admin-tokens-file", c.AdminTokensFile, "admin tokens, one per line (also env "+EnvAdminTokens+", comma-separated)")
	fs.StringVar(&c.AuditTokensFile, "audit-tokens-file", c.AuditTokensFile, "read-only audit tokens, one per line (also env "+EnvAuditTokens+", comma-separated)")
	fs.StringVar(&c.TLSCertFile, "tls-cert-file", c.TLSCertFile, "PEM certificate: serve gRPC over TLS")
	fs.StringVar(&c.TLSKeyFile, "tls-key-file", c.TLSKeyFile, "PEM key of --tls-cert-file")
	fs.StringVar(&c.TLSClientCAFile, "tls-client-ca-file", c.TLSClientCAFile, "PEM CAs: require gRPC client certificates they sign (mTLS); a verified certificate authenticates a caller without a token (first DNS SAN, else CN: a router name unless in --admin-identities/--audit-identities)")
	fs.BoolVar(&c.HTTPTLS, "http-tls", c.HTTPTLS, "serve HTTP over TLS with --tls-cert-file too")
	fs.Var(listFlag{&c.AdminIdentities}, "admin-identities", "client-certificate identities (first DNS SAN, else CN) with admin rights, comma-separated; needs --tls-client-ca-file")
	fs.Var(listFlag{&c.AuditIdentities}, "audit-identities", "client-certificate identities that may only read, comma-separated; needs --tls-client-ca-file")
	fs.DurationVar(&c.ReconcileInterval, "reconcile-interval", c.ReconcileInterval, "pause between engine telemetry rounds")
	fs.DurationVar(&c.ScrapeTimeout, "scrape-timeout", c.ScrapeTimeout, "timeout of one engine metrics scrape")
	fs.DurationVar(&c.ReapplyInterval, "reapply-interval", c.ReapplyInterval, "how often pools are checked for a new epoch and unconfigured pools retried")
	fs.DurationVar(&c.SweepInterval, "sweep-interval", c.SweepInterval, "how often every pool is swept (0: only by ledger calls)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "bound on the graceful stop of gRPC and HTTP")
	fs.DurationVar(&c.StartupTimeout, "startup-timeout", c.StartupTimeout, "bound on the first fleet application at start; then it serves, unready while the ledger does not answer, and retries")
	fs.DurationVar(&c.PageRefresh, "page-refresh", c.PageRefresh, "auto-refresh period of the audit page")
	fs.DurationVar(&c.LeakAfter, "leak-after", c.LeakAfter, "audit: leases this old must show in the engine's reported usage, else leak_suspected")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	c.HTTP.RegisterFlags(fs)
	c.GRPC.RegisterFlags(fs)
}

// EnvName returns the environment variable of a flag.
func EnvName(flagName string) string { return flagenv.Name(EnvPrefix, flagName) }

// ApplyEnv sets every flag of fs not given on the command line from its
// environment variable (EnvName), if set. Call it after fs.Parse.
func ApplyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	return flagenv.Apply(fs, EnvPrefix, lookup)
}

// LoadSecrets reads the tokens from the environment and the token files.
// Errors name the variable or file, never a token.
func (c *Config) LoadSecrets(lookup func(string) (string, bool)) error {
	c.Token, _ = lookup(EnvToken)
	if c.TokenFile != "" {
		toks, err := readTokens(c.TokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		if len(toks) != 1 {
			return fmt.Errorf("--token-file %s: want exactly one token, found %d", c.TokenFile, len(toks))
		}
		if c.Token != "" && c.Token != toks[0] {
			return fmt.Errorf("--token-file %s and %s are both set and differ; set one", c.TokenFile, EnvToken)
		}
		c.Token = toks[0]
	}
	c.AdminTokens, c.AuditTokens = splitList(lookup, EnvAdminTokens), splitList(lookup, EnvAuditTokens)
	c.RouterRoleTokens = splitList(lookup, EnvRouterRoleTokens)
	for _, f := range []struct {
		flag, path string
		dst        *[]string
	}{
		{"--admin-tokens-file", c.AdminTokensFile, &c.AdminTokens},
		{"--router-role-tokens-file", c.RouterRoleTokensFile, &c.RouterRoleTokens},
		{"--audit-tokens-file", c.AuditTokensFile, &c.AuditTokens},
	} {
		if f.path == "" {
			continue
		}
		toks, err := readTokens(f.path)
		if err != nil {
			return fmt.Errorf("%s: %w", f.flag, err)
		}
		*f.dst = append(*f.dst, toks...)
	}
	if c.RouterTokensFile != "" {
		rt, err := rpc.LoadRouterTokens(c.RouterTokensFile)
		if err != nil {
			return fmt.Errorf("--router-tokens-file: %w", err)
		}
		c.RouterTokens = rt
	}
	return nil
}

func splitList(lookup func(string) (string, bool), env string) []string {
	v, _ := lookup(env)
	return splitComma(v)
}

// splitComma splits a comma-separated list, dropping blanks.
func splitComma(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// listFlag is a comma-separated list flag; setting it replaces the list.
type listFlag struct{ dst *[]string }

func (f listFlag) String() string {
	if f.dst == nil {
		return ""
	}
	return strings.Join(*f.dst, ",")
}

func (f listFlag) Set(v string) error {
	*f.dst = splitComma(v)
	return nil
}

// readTokens reads one token per line, skipping blank and '#' lines.
func readTokens(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return out, nil
}

// RPCConfig returns the authentication configuration of the gRPC service:
// the tokens, and certificate identities when --tls-client-ca-file makes
// the transport verify client certificates.
func (c *Config) RPCConfig() rpc.Config {
	return rpc.Config{
		Token: c.Token, AdminTokens: c.AdminTokens, RouterRoleTokens: c.RouterRoleTokens, RouterTokens: c.RouterTokens, AuditTokens: c.AuditTokens,
		ClientCerts: c.TLSClientCAFile != "", AdminIdentities: c.AdminIdentities, AuditIdentities: c.AuditIdentities,
	}
}

// Validate rejects settings the reserver cannot run with, naming the flag
// and what is allowed.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.FleetFile == "" {
		bad("--config: the fleet file is required (or env %s)", EnvName("config"))
	}
	if c.Ledger == "" {
		bad("--ledger: must not be empty (memory://, redis://host:port/db, etcd://host:port, grpc://host:port)")
	}
	if c.GRPCListen == "" || c.HTTPListen == "" {
		bad("--grpc-listen and --http-listen: must not be empty")
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		bad("--tls-cert-file and --tls-key-file: set both or neither")
	}
	if c.TLSClientCAFile != "" && c.TLSCertFile == "" {
		bad("--tls-client-ca-file: needs --tls-cert-file and --tls-key-file")
	}
	if c.HTTPTLS && c.TLSCertFile == "" {
		bad("--http-tls: needs --tls-cert-file and --tls-key-file")
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
		min  time.Duration
	}{
		{"--reconcile-interval", c.ReconcileInterval, 10 * time.Millisecond},
		{"--scrape-timeout", c.ScrapeTimeout, time.Millisecond},
		{"--reapply-interval", c.ReapplyInterval, 10 * time.Millisecond},
		{"--shutdown-timeout", c.ShutdownTimeout, 0},
		{"--startup-timeout", c.StartupTimeout, 0},
		{"--page-refresh", c.PageRefresh, time.Second},
		{"--leak-after", c.LeakAfter, time.Second},
	} {
		if d.v < d.min || (d.min == 0 && d.v <= 0) {
			bad("%s = %s: must be at least %s", d.flag, d.v, max(d.min, time.Nanosecond))
		}
	}
	if c.SweepInterval < 0 {
		bad("--sweep-interval = %s: must be >= 0 (0 disables)", c.SweepInterval)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("--log-level = %q: want debug, info, warn or error", c.LogLevel)
	}
	errs = append(errs, c.HTTP.Validate(), c.GRPC.Validate())
	rc := c.RPCConfig()
	if !rc.ClientCerts && len(rc.AdminIdentities)+len(rc.AuditIdentities) > 0 {
		bad("--admin-identities and --audit-identities: name client certificates, so they need --tls-client-ca-file")
		rc.AdminIdentities, rc.AuditIdentities = nil, nil // reported above
	}
	if err := rc.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
