// Package ledgerurl picks a ledger backend from a --ledger URL, once, for
// the commands: memory://, redis://host:port/db (rediss:// for TLS;
// ?wait_replicas=N[&wait_timeout=D] acknowledges changes only once N
// replicas have them), redis+sentinel://host:port[,host:port]/MASTER_NAME
// (the primary the Sentinels name, followed across failovers),
// redis+cluster://host:port[,host:port] (a Redis Cluster; each pool is one
// hash slot), each of those also rediss+ for TLS,
// etcd://host:port[,host:port][/prefix], grpc://host:port (a reserver). It
// owns no state of its own.
package ledgerurl

import (
	"errors"
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/etcd"
	"github.com/leasehold/leasehold/internal/ledger/memory"
	"github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/ledger/remote"
)

// Schemes lists the URL schemes Open accepts, for flag help and errors.
var Schemes = append(append([]string{"memory://"}, redis.Schemes...), "etcd://", "grpc://")

// Options are the settings passed to whichever backend the URL names.
type Options struct {
	ledger.Options
	// Clock is the memory backend's clock; nil means the system clock.
	// Store backends use the store's clock.
	Clock ledger.Clock
	// Remote configures grpc:// (token, TLS); the ledger options do not
	// apply there: the reserver has its own.
	Remote remote.Options
}

// Client is a command's client settings for a grpc:// ledger (a reserver),
// as its --ledger-* flags set them. The zero value is plaintext with no
// token.
type Client struct {
	// Token is the bearer token (LEASEHOLD_TOKEN); empty sends none, and a
	// client certificate then identifies the caller.
	Token string
	// TLS connects over TLS, verifying the reserver against the system
	// roots, or against CAFile when set (--ledger-tls).
	TLS bool
	// CAFile is a PEM file of the CAs that sign the reserver's certificate
	// (--ledger-ca-file); it implies TLS.
	CAFile string
	// CertFile and KeyFile are the PEM client certificate and its key for
	// mTLS (--ledger-cert-file, --ledger-key-file).
	CertFile, KeyFile string
	// ServerName overrides the name checked in the reserver's certificate
	// (--ledger-server-name; default the URL's host).
	ServerName string
}

// RemoteOptions is the one mapping from a command's --ledger-* client
// flags to the remote backend's options.
func (c Client) RemoteOptions() remote.Options {
	return remote.Options{
		Token: c.Token, TLS: c.TLS, CAFile: c.CAFile,
		CertFile: c.CertFile, KeyFile: c.KeyFile, ServerName: c.ServerName,
	}
}

// fileFlags maps remote.FileError options to the flags that set them.
var fileFlags = map[string]string{
	remote.OptionCAFile:   "--ledger-ca-file",
	remote.OptionCertFile: "--ledger-cert-file",
	remote.OptionKeyFile:  "--ledger-key-file",
}

// FlagError names the flag at fault in an error of opening a ledger with a
// Client's options: the --ledger-*-file flag of a TLS file that could not be
// read or parsed, else --ledger.
func FlagError(err error) error {
	var fe *remote.FileError
	if errors.As(err, &fe) {
		if flag, ok := fileFlags[fe.Option]; ok {
			return fmt.Errorf("%s = %q: %w", flag, fe.Path, fe.Err)
		}
	}
	return fmt.Errorf("--ledger: %w", err)
}

// Open returns the ledger rawURL names. The caller closes it.
func Open(rawURL string, opts Options) (ledger.Ledger, error) {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("%w: --ledger %q has no scheme; want one of %s", ledger.ErrInvalidArgument, rawURL, strings.Join(Schemes, ", "))
	}
	switch scheme {
	case "memory":
		if rest := strings.TrimPrefix(rawURL, "memory://"); rest != "" {
			return nil, fmt.Errorf("%w: --ledger %q: memory:// takes no host or path", ledger.ErrInvalidArgument, rawURL)
		}
		return memory.New(opts.Options, opts.Clock), nil
	case redis.SchemeRedis, redis.SchemeRedisTLS, redis.SchemeSentinel, redis.SchemeSentinelTLS,
		redis.SchemeCluster, redis.SchemeClusterTLS:
		l, err := redis.Open(rawURL, redis.Options{Options: opts.Options})
		if err != nil {
			return nil, err
		}
		return l, nil
	case "etcd":
		l, err := etcd.Open(rawURL, etcd.Options{Options: opts.Options})
		if err != nil {
			return nil, err
		}
		return l, nil
	case "grpc":
		l, err := remote.Dial(rawURL, opts.Remote)
		if err != nil {
			return nil, err
		}
		return l, nil
	default:
		return nil, fmt.Errorf("%w: --ledger %q: unknown scheme %q; want one of %s", ledger.ErrInvalidArgument, rawURL, scheme, strings.Join(Schemes, ", "))
	}
}
