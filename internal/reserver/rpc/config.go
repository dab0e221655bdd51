package rpc

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// Config is the reserver's authentication configuration: bearer tokens and
// client-certificate identities. The zero value configures neither: the
// server then serves loopback peers only.
type Config struct {
	// Logger receives one warning per refused caller, method and code per
	// minute (peer address, who it was taken for, why; never a token).
	// Nil discards them.
	Logger *slog.Logger
	// Token is the shared admin token (env LEASEHOLD_TOKEN). It may do
	// everything, including the admin methods: give it to the reserver and
	// the operator's tools, not to routers. Optional.
	Token string
	// AdminTokens may do everything, like Token. Optional.
	AdminTokens []string
	// RouterRoleTokens have the router role under any router name, so that
	// identical replicas (a Kubernetes Deployment) can share one: they may
	// read and act for holder ids derived from the holder key each call
	// presents (package holderkey), never call an admin method. Optional.
	RouterRoleTokens []string
	// RouterTokens maps a router name to its own token, which may act only
	// for holder ids "NAME/..." derived from the holder key the call
	// presents. Load them with LoadRouterTokens. Optional.
	RouterTokens map[string]string
	// AuditTokens may only read (Pools, List, Stats). Optional.
	AuditTokens []string

	// ClientCerts says that the server's transport credentials verify
	// client certificates against a client CA (reserver
	// --tls-client-ca-file): a caller that sends no bearer token is then
	// identified by its verified certificate (see the package doc), and the
	// loopback-only rule no longer applies. The Server does not set up TLS
	// itself: set ClientCerts only together with grpc.Creds whose
	// tls.Config has ClientCAs and ClientAuth RequireAndVerifyClientCert
	// (or VerifyClientCertIfGiven). A certificate the handshake did not
	// verify against ClientCAs is never an identity. Default false.
	ClientCerts bool
	// AdminIdentities are certificate identities (first DNS SAN, else
	// CommonName) with every right, like an admin token. Need ClientCerts.
	// Optional.
	AdminIdentities []string
	// AuditIdentities are certificate identities that may only read
	// (Pools, List, Stats). Need ClientCerts. Optional.
	AuditIdentities []string
}

// hasTokens reports whether any bearer token is configured.
func (c Config) hasTokens() bool {
	return c.Token != "" || len(c.AdminTokens) > 0 || len(c.RouterRoleTokens) > 0 || len(c.RouterTokens) > 0 || len(c.AuditTokens) > 0
}

// Validate rejects empty tokens, a token given to two principals, router
// names that are not usable holder-id prefixes, and certificate identities
// that are empty, listed twice or given without ClientCerts. Errors name
// the field, never the token.
func (c Config) Validate() error {
	seen := map[string]string{} // token -> where it was configured
	add := func(where, tok string) error {
		if tok == "" {
			return fmt.Errorf("rpc config: %s is empty", where)
		}
		if strings.TrimSpace(tok) != tok || strings.ContainsAny(tok, " \t\r\n") {
			return fmt.Errorf("rpc config: %s contains whitespace", where)
		}
		if prev, ok := seen[tok]; ok {
			return fmt.Errorf("rpc config: %s is the same token as %s; every principal needs its own", where, prev)
		}
		seen[tok] = where
		return nil
	}
	if c.Token != "" {
		if err := add("token (LEASEHOLD_TOKEN)", c.Token); err != nil {
			return err
		}
	}
	for i, t := range c.AdminTokens {
		if err := add(fmt.Sprintf("admin_tokens[%d]", i), t); err != nil {
			return err
		}
	}
	for i, t := range c.RouterRoleTokens {
		if err := add(fmt.Sprintf("router_role_tokens[%d]", i), t); err != nil {
			return err
		}
	}
	for name, t := range c.RouterTokens {
		if err := checkRouterName(name); err != nil {
			return err
		}
		if err := add(fmt.Sprintf("router_tokens[%s]", name), t); err != nil {
			return err
		}
	}
	for i, t := range c.AuditTokens {
		if err := add(fmt.Sprintf("audit_tokens[%d]", i), t); err != nil {
			return err
		}
	}
	return c.validateIdentities()
}

// validateIdentities checks the admin and audit certificate identities.
// They are names, not secrets, so errors quote them.
func (c Config) validateIdentities() error {
	if !c.ClientCerts && len(c.AdminIdentities)+len(c.AuditIdentities) > 0 {
		return errors.New("rpc config: admin_identities and audit_identities name client certificates, but client certificates are not verified (set a client CA)")
	}
	seen := map[string]string{} // identity -> where it was listed
	for _, l := range []struct {
		field string
		ids   []string
	}{{"admin_identities", c.AdminIdentities}, {"audit_identities", c.AuditIdentities}} {
		for i, id := range l.ids {
			where := fmt.Sprintf("%s[%d]", l.field, i)
			if id == "" {
				return fmt.Errorf("rpc config: %s is empty", where)
			}
			for j := 0; j < len(id); j++ {
				if b := id[j]; b < 0x21 || b == 0x7f {
					return fmt.Errorf("rpc config: %s = %q contains a space or control character", where, id)
				}
			}
			if prev, ok := seen[id]; ok {
				return fmt.Errorf("rpc config: %s = %q is already listed as %s; an identity has one role", where, id, prev)
			}
			seen[id] = where
		}
	}
	return nil
}

func checkRouterName(name string) error {
	if name == "" {
		return errors.New("rpc config: router_tokens has an empty router name")
	}
	if strings.Contains(name, "/") {
		return fmt.Errorf("rpc config: router name %q contains '/', which separates a router's holder ids", name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x21 || c == 0x7f {
			return fmt.Errorf("rpc config: router name %q contains a space or control character", name)
		}
	}
	return nil
}

// LoadRouterTokens reads per-router tokens from a file: one "NAME: TOKEN"
// line per router (a YAML mapping of plain strings); blank lines and lines
// starting with '#' are ignored. Errors name the file and line, never the
// token.
func LoadRouterTokens(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("router tokens: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, tok, ok := strings.Cut(line, ":")
		name, tok = strings.TrimSpace(name), unquote(strings.TrimSpace(tok))
		if !ok || name == "" || tok == "" {
			return nil, fmt.Errorf("router tokens %s:%d: want \"NAME: TOKEN\"", path, n)
		}
		if err := checkRouterName(name); err != nil {
			return nil, fmt.Errorf("router tokens %s:%d: %w", path, n, err)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("router tokens %s:%d: router %q listed twice", path, n, name)
		}
		out[name] = tok
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("router tokens %s: %w", path, err)
	}
	return out, nil
}

// unquote strips one pair of matching YAML quotes.
func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}
