package rpc

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Keepalive enforcement. A client that pings more often than
// KeepaliveMinTime is sent GOAWAY (too_many_pings) and cut: the remote
// client pings every remote.KeepaliveTime, which must stay at least this
// (a test checks it). The server pings a connection silent for
// keepaliveTime and closes it when the ping is not answered within
// keepaliveTimeout: a peer gone without a FIN does not hold it forever.
const (
	KeepaliveMinTime = 10 * time.Second
	keepaliveTime    = time.Minute
	keepaliveTimeout = 20 * time.Second
)

// Defaults of Limits.
const (
	DefaultMaxRecvBytes     = 4 << 20
	DefaultMaxStreams       = 1024
	DefaultIdleTimeout      = 5 * time.Minute
	DefaultHandshakeTimeout = 10 * time.Second
)

// Limits bound what one gRPC client can hold of the server. The flags are
// --grpc-<name>, so also LEASEHOLD_GRPC_<NAME>. Every field is optional:
// DefaultLimits sets them all.
type Limits struct {
	// MaxRecvBytes bounds one request message (--grpc-max-recv-bytes;
	// default 4 MiB). A larger one is refused ResourceExhausted before it
	// is decoded.
	MaxRecvBytes int
	// MaxStreams bounds the calls in flight on one connection
	// (--grpc-max-streams; default 1024); a client's further calls wait
	// for one to end.
	MaxStreams int
	// IdleTimeout closes a connection with no call in flight for this long
	// (--grpc-idle-timeout; default 5m): GOAWAY, and a client reconnects
	// on its next call.
	IdleTimeout time.Duration
	// HandshakeTimeout bounds a new connection's TLS handshake and
	// HTTP/2 preface (--grpc-handshake-timeout; default 10s).
	HandshakeTimeout time.Duration
}

// DefaultLimits returns Limits with every default set.
func DefaultLimits() Limits {
	return Limits{MaxRecvBytes: DefaultMaxRecvBytes, MaxStreams: DefaultMaxStreams,
		IdleTimeout: DefaultIdleTimeout, HandshakeTimeout: DefaultHandshakeTimeout}
}

// RegisterFlags registers l's flags on fs, with l's values as defaults.
func (l *Limits) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&l.MaxRecvBytes, "grpc-max-recv-bytes", l.MaxRecvBytes, "gRPC: largest request message accepted (larger: ResourceExhausted)")
	fs.IntVar(&l.MaxStreams, "grpc-max-streams", l.MaxStreams, "gRPC: most calls in flight on one connection")
	fs.DurationVar(&l.IdleTimeout, "grpc-idle-timeout", l.IdleTimeout, "gRPC: close a connection with no call in flight this long (clients reconnect)")
	fs.DurationVar(&l.HandshakeTimeout, "grpc-handshake-timeout", l.HandshakeTimeout, "gRPC: bound on a new connection's TLS handshake and HTTP/2 preface")
}

// Validate rejects limits the server cannot run with, naming the flag.
func (l Limits) Validate() error {
	var errs []error
	if l.MaxRecvBytes < 1024 || l.MaxRecvBytes > 1<<30 {
		errs = append(errs, fmt.Errorf("--grpc-max-recv-bytes = %d: want 1024..%d", l.MaxRecvBytes, 1<<30))
	}
	if l.MaxStreams < 1 || l.MaxStreams > 1<<20 {
		errs = append(errs, fmt.Errorf("--grpc-max-streams = %d: want 1..%d", l.MaxStreams, 1<<20))
	}
	if l.IdleTimeout < time.Second {
		errs = append(errs, fmt.Errorf("--grpc-idle-timeout = %s: must be at least 1s", l.IdleTimeout))
	}
	if l.HandshakeTimeout < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("--grpc-handshake-timeout = %s: must be at least 10ms", l.HandshakeTimeout))
	}
	return errors.Join(errs...)
}

// ServerOptions are l as grpc.ServerOptions, keepalive enforcement
// included. NewGRPCServer applies DefaultLimits' before the caller's
// options, so a caller's later ServerOptions win.
func (l Limits) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(l.MaxRecvBytes),
		grpc.MaxConcurrentStreams(uint32(l.MaxStreams)),
		grpc.ConnectionTimeout(l.HandshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: l.IdleTimeout, Time: keepaliveTime, Timeout: keepaliveTimeout}),
	}
}
