package reserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/audit"
	"github.com/leasehold/leasehold/internal/portprobe"
)

// ParseServeFlags parses the serving flags and environment into a Config
// with its secrets loaded, and validates it.
func ParseServeFlags(args []string, lookup func(string) (string, bool), stderr io.Writer) (Config, error) {
	cfg := Defaults()
	fs := flag.NewFlagSet("reserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: reserver --config FLEET.yaml [flags]\n       reserver audit --server ADDR [--json] [--pool P] [--engine E] [--holder H] [--tenant T]\n       reserver drain --server ADDR --pool P --engine E [--undrain]\n\nEvery flag can also be set as %s<FLAG_NAME> (e.g. %s). The shared token comes from %s or --token-file.\n\n",
			EnvPrefix, EnvName("grpc-listen"), EnvToken)
		fs.PrintDefaults()
	}
	cfg.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := ApplyEnv(fs, lookup); err != nil {
		return Config{}, err
	}
	if err := cfg.LoadSecrets(lookup); err != nil {
		return Config{}, err
	}
	return cfg, cfg.Validate()
}

// auditCLI is the `reserver audit` settings.
type auditCLI struct {
	server                       string
	json                         bool
	pool, engine, holder, tenant string
	tokenFile, caFile            string
	timeout                      time.Duration
}

// RunAudit is `reserver audit`: it fetches GET /v1/audit from a reserver's
// HTTP address and prints it as tables, or as JSON with --json. The token
// comes from LEASEHOLD_TOKEN or --token-file. It returns the exit code:
// 0 on success, 1 when the audit could not be fetched, 2 on bad usage.
func RunAudit(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	var c auditCLI
	fs := flag.NewFlagSet("reserver audit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.server, "server", Defaults().HTTPListen, "the reserver's HTTP address, its --http-listen (host:port, or an http(s):// URL); not its gRPC address")
	fs.BoolVar(&c.json, "json", false, "print the report as JSON")
	fs.StringVar(&c.pool, "pool", "", "only this pool")
	fs.StringVar(&c.engine, "engine", "", "only this engine")
	fs.StringVar(&c.holder, "holder", "", "only leases of this holder")
	fs.StringVar(&c.tenant, "tenant", "", "only leases of this tenant")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding the token (else env "+EnvToken+")")
	fs.StringVar(&c.caFile, "ca-file", "", "PEM CAs verifying an https:// reserver")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "request timeout")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := ApplyEnv(fs, lookup); err != nil {
		fmt.Fprintln(stderr, "reserver audit:", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "reserver audit: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	body, err := c.fetch(ctx, lookup)
	if err != nil {
		fmt.Fprintln(stderr, "reserver audit:", err)
		return 1
	}
	if c.json {
		var buf bytes.Buffer
		if err := json.Indent(&buf, body, "", "  "); err != nil {
			fmt.Fprintln(stderr, "reserver audit: malformed response:", err)
			return 1
		}
		buf.WriteByte('\n')
		_, _ = stdout.Write(buf.Bytes())
		return 0
	}
	var rep audit.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		fmt.Fprintln(stderr, "reserver audit: malformed response:", err)
		return 1
	}
	if err := audit.WriteTable(stdout, rep); err != nil {
		fmt.Fprintln(stderr, "reserver audit:", err)
		return 1
	}
	return 0
}

// cliToken is the token a command-line client sends: the one in
// tokenFile (--token-file) when set, else LEASEHOLD_TOKEN (maybe empty).
func cliToken(lookup func(string) (string, bool), tokenFile string) (string, error) {
	if tokenFile == "" {
		token, _ := lookup(EnvToken)
		return token, nil
	}
	toks, err := readTokens(tokenFile)
	if err != nil || len(toks) != 1 {
		return "", fmt.Errorf("--token-file %s: want one token (%v)", tokenFile, err)
	}
	return toks[0], nil
}

func (c *auditCLI) fetch(ctx context.Context, lookup func(string) (string, bool)) ([]byte, error) {
	token, err := cliToken(lookup, c.tokenFile)
	if err != nil {
		return nil, err
	}
	base := c.server
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(strings.TrimSuffix(base, "/") + "/v1/audit")
	if err != nil {
		return nil, fmt.Errorf("--server %q: %w", c.server, err)
	}
	q := url.Values{}
	for k, v := range map[string]string{"pool": c.pool, "engine": c.engine, "holder": c.holder, "tenant": c.tenant} {
		if v != "" {
			q.Set(k, v)
		}
	}
	u.RawQuery = q.Encode()
	client := &http.Client{Timeout: c.timeout}
	if c.caFile != "" {
		pool, err := loadCAs("--ca-file", c.caFile)
		if err != nil {
			return nil, err
		}
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		if portprobe.Probe(ctx, u.Host) == portprobe.GRPC {
			return nil, fmt.Errorf("%s is a gRPC address (the reserver's --grpc-listen): reserver audit --server takes the reserver's HTTP address, its --http-listen (default %s)", u.Host, Defaults().HTTPListen)
		}
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", u.Redacted(), err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		if resp.StatusCode == http.StatusUnauthorized && token == "" {
			msg += " (set " + EnvToken + " or --token-file)"
		}
		return nil, errors.New(resp.Status + ": " + msg)
	}
	return body, nil
}
