// Package ledgerurl picks a ledger backend from a --ledger URL, once, for
// the commands: memory://, redis://host:port/db (rediss:// for TLS;
// ?wait_replicas=N[&wait_timeout=D] acknowledges changes only once N
// replicas have them), etcd://host:port[,host:port][/prefix],
// grpc://host:port (a reserver). It owns no state of its own.
package ledgerurl

import (
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/etcd"
	"github.com/leasehold/leasehold/internal/ledger/memory"
	"github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/ledger/remote"
)

// Schemes lists the URL schemes Open accepts, for flag help and errors.
var Schemes = []string{"memory://", "redis://", "rediss://", "etcd://", "grpc://"}

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
	case "redis", "rediss":
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
