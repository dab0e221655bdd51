package httpguard

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// Defaults of Config.
const (
	DefaultReadHeaderTimeout  = 10 * time.Second
	DefaultBodyTimeout        = 60 * time.Second
	DefaultWriteTimeout       = 60 * time.Second
	DefaultIdleTimeout        = 90 * time.Second
	DefaultMaxUnauthenticated = 128
)

// Bounds of the automatic connection limit (Config.ConnLimit).
const (
	// ReservedFDs are the file descriptors left to the rest of the process
	// (listeners, the ledger, engines' metrics, log files) before client
	// connections are counted.
	ReservedFDs = 64
	// MaxAutoConns caps the automatic limit when RLIMIT_NOFILE is large or
	// unknown.
	MaxAutoConns = 16384
	// minAutoConns is the least automatic limit, however small the
	// descriptor limit.
	minAutoConns = 8
	// maxConns bounds an explicit --http-max-conns.
	maxConns = 1 << 20
	// minTimeout is the least timeout Validate accepts.
	minTimeout = 10 * time.Millisecond
)

// Config is a server's bounds on its clients. The flags are
// --http-<name>, so also LEASEHOLD_HTTP_<NAME> in the environment. Every
// field is optional: Defaults sets them all.
type Config struct {
	// ReadHeaderTimeout bounds reading a request's headers, from its first
	// byte (from accept for a connection's first request, the TLS
	// handshake included) (--http-read-header-timeout; default 10s).
	ReadHeaderTimeout time.Duration
	// BodyTimeout bounds reading a request's body, from the end of its
	// headers to the body's end (--http-body-timeout; default 60s). Raise
	// it for large bodies over slow links: the body must arrive whole
	// within it.
	BodyTimeout time.Duration
	// WriteTimeout bounds each write to a client: a client that reads
	// nothing for this long is cut (--http-write-timeout; default 60s). It
	// does not bound a whole answer: a stream that is read goes on.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no request for this
	// long (--http-idle-timeout; default 90s, above the 60s idle timeout
	// of common proxies and load balancers, so that one in front never
	// reuses a connection being closed).
	IdleTimeout time.Duration
	// MaxConns bounds the open client connections
	// (--http-max-conns; default 0: derived from RLIMIT_NOFILE, see
	// ConnLimit). At the limit a new connection sheds the one that has
	// made no progress for the longest among those idle or still sending
	// a request.
	MaxConns int
	// MaxUnauthenticated bounds the requests in flight without a
	// credential: public paths (/metrics) and refusals; probes are exempt
	// (--http-max-unauthenticated; default 128).
	MaxUnauthenticated int
}

// Defaults returns a Config with every default set.
func Defaults() Config {
	return Config{
		ReadHeaderTimeout:  DefaultReadHeaderTimeout,
		BodyTimeout:        DefaultBodyTimeout,
		WriteTimeout:       DefaultWriteTimeout,
		IdleTimeout:        DefaultIdleTimeout,
		MaxUnauthenticated: DefaultMaxUnauthenticated,
	}
}

// RegisterFlags registers c's flags on fs, with c's values as defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.ReadHeaderTimeout, "http-read-header-timeout", c.ReadHeaderTimeout, "HTTP: bound on reading a request's headers (and the TLS handshake)")
	fs.DurationVar(&c.BodyTimeout, "http-body-timeout", c.BodyTimeout, "HTTP: bound on reading a request's whole body, from the end of its headers")
	fs.DurationVar(&c.WriteTimeout, "http-write-timeout", c.WriteTimeout, "HTTP: a client that reads nothing of an answer for this long is cut (streams that are read are not bounded)")
	fs.DurationVar(&c.IdleTimeout, "http-idle-timeout", c.IdleTimeout, "HTTP: close a keep-alive connection idle this long (keep it above a proxy's in front)")
	fs.IntVar(&c.MaxConns, "http-max-conns", c.MaxConns, "HTTP: most open client connections; at the limit the idle or slowest-sending one is shed (0: (RLIMIT_NOFILE-64)/2, at most 16384)")
	fs.IntVar(&c.MaxUnauthenticated, "http-max-unauthenticated", c.MaxUnauthenticated, "HTTP: most requests in flight without a credential (/metrics, refusals; probes exempt)")
}

// Validate rejects bounds the server cannot run with, naming the flag and
// what is allowed.
func (c *Config) Validate() error {
	var errs []error
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--http-read-header-timeout", c.ReadHeaderTimeout},
		{"--http-body-timeout", c.BodyTimeout},
		{"--http-write-timeout", c.WriteTimeout},
		{"--http-idle-timeout", c.IdleTimeout},
	} {
		if d.v < minTimeout {
			errs = append(errs, fmt.Errorf("%s = %s: must be at least %s (there is no unbounded setting)", d.flag, d.v, minTimeout))
		}
	}
	if c.MaxConns < 0 || c.MaxConns > maxConns {
		errs = append(errs, fmt.Errorf("--http-max-conns = %d: want 0 (derived from RLIMIT_NOFILE) or 1..%d", c.MaxConns, maxConns))
	}
	if c.MaxUnauthenticated < 1 || c.MaxUnauthenticated > maxConns {
		errs = append(errs, fmt.Errorf("--http-max-unauthenticated = %d: want 1..%d", c.MaxUnauthenticated, maxConns))
	}
	return errors.Join(errs...)
}

// ConnLimit is the connection limit in force: MaxConns when set, else
// (nofile - ReservedFDs) / 2, at least 8 and at most MaxAutoConns, where
// nofile is the soft RLIMIT_NOFILE (0 or beyond MaxAutoConns when
// unknown or unlimited): half the descriptors left after ReservedFDs,
// because a proxied request holds an upstream connection besides its
// client's. auto says the limit was derived.
func (c *Config) ConnLimit(nofile uint64) (limit int, auto bool) {
	if c.MaxConns > 0 {
		return c.MaxConns, false
	}
	if nofile == 0 || nofile > 2*MaxAutoConns+ReservedFDs {
		return MaxAutoConns, true
	}
	if nofile <= ReservedFDs+2*minAutoConns {
		return minAutoConns, true
	}
	return int(nofile-ReservedFDs) / 2, true
}
