package remote

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/internal/gen/leaseholdv1"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/holderkey"
	"github.com/leasehold/leasehold/internal/ledger/remote/wire"
)

// Errors of the reserver's authentication, matched with errors.Is.
var (
	// ErrUnauthenticated: the reserver did not accept the token (none sent,
	// or unknown).
	ErrUnauthenticated = wire.ErrUnauthenticated
)

// Scheme is the --ledger URL scheme of this backend.
const Scheme = "grpc"

// KeepaliveTime is how often a connection with no traffic is pinged, calls
// in flight or not, so that a reserver gone without a FIN (a partition, a
// dead host) is noticed within KeepaliveTime plus keepaliveTimeout instead
// of at the next call's deadline. The reserver sends GOAWAY
// (too_many_pings) to a client pinging more often than its enforcement
// policy allows (rpc.KeepaliveMinTime, 10s): keep it at least that.
const (
	KeepaliveTime    = 30 * time.Second
	keepaliveTimeout = 10 * time.Second
)

// The Options fields that name files, as FileError.Option reports them.
const (
	OptionCAFile   = "CAFile"
	OptionCertFile = "CertFile"
	OptionKeyFile  = "KeyFile"
)

// FileError is a file named in Options that Dial could not read or parse.
// Callers that took the path from a flag map Option back to that flag.
type FileError struct {
	// Option is the Options field: OptionCAFile, OptionCertFile or
	// OptionKeyFile.
	Option string
	// Path is the file.
	Path string
	// Err is why it was refused.
	Err error
}

func (e *FileError) Error() string { return fmt.Sprintf("remote: %s %s: %v", e.Option, e.Path, e.Err) }

func (e *FileError) Unwrap() error { return e.Err }

// Options configure Dial. The zero value is a plaintext connection without a
// token, which a reserver accepts only from loopback when it has neither
// tokens nor a client CA configured.
type Options struct {
	// Token is the bearer token sent with every call: the shared
	// LEASEHOLD_TOKEN or this router's own token. Empty sends none. A token
	// that is sent decides who the caller is, even with a client
	// certificate.
	Token string
	// TLS enables TLS, verifying the reserver against the system roots
	// unless CAFile is set. Setting CAFile or CertFile implies it.
	TLS bool
	// CAFile is a PEM file of CAs that sign the reserver's certificate.
	CAFile string
	// CertFile and KeyFile are this client's PEM certificate and key, for
	// mTLS; both or neither. A reserver with a client CA takes the
	// verified certificate as the caller's identity when no Token is sent:
	// its first DNS SAN (else CommonName) is the router name, so holder ids
	// must be that name or start with name + "/".
	CertFile, KeyFile string
	// ServerName overrides the name checked in the reserver's certificate;
	// empty means the host of the target.
	ServerName string
	// MaxReconnectDelay caps the backoff between reconnection attempts;
	// 0 means 2s.
	MaxReconnectDelay time.Duration
	// DialOptions are appended to the ones Dial builds (interceptors,
	// keepalive parameters, a custom dialer).
	DialOptions []grpc.DialOption
	// HolderKey is sent with every holder-scoped call (KeepAlive, Acquire,
	// Renew, Resize, Grow, Release, Reassert) as metadata
	// holderkey.MetadataKey: a reserver lets a router credential act only
	// for holder ids derived from it. Zero (the default) means a fresh
	// one, drawn by Dial; Ledger.HolderKey returns it, and a lease.Manager
	// on the Ledger derives its holder ids from it. Never logged.
	HolderKey holderkey.Key
}

// Ledger is a ledger.Ledger served by a remote reserver. It is safe for
// concurrent use; one Ledger multiplexes every call over one connection.
type Ledger struct {
	conn   *grpc.ClientConn
	c      pb.LedgerClient
	key    holderkey.Key
	closed atomic.Bool
}

var (
	_ ledger.Ledger   = (*Ledger)(nil)
	_ holderkey.Keyed = (*Ledger)(nil)
)

// ParseTarget returns host:port from a "grpc://host:port" URL.
func ParseTarget(target string) (string, error) {
	u, err := url.Parse(target)
	if err != nil {
		return "", fmt.Errorf("remote: ledger URL %q: %w", target, err)
	}
	if u.Scheme != Scheme {
		return "", fmt.Errorf("remote: ledger URL %q: scheme %q, want %s://host:port", target, u.Scheme, Scheme)
	}
	if u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", fmt.Errorf("remote: ledger URL %q: want %s://host:port", target, Scheme)
	}
	return u.Host, nil
}

// Dial returns a Ledger for the reserver at target ("grpc://host:port"). It
// does not wait for the connection: the first call makes it, and a reserver
// that is down fails calls, not Dial. Bad options fail here, and so do TLS
// files that cannot be read or parsed (a *FileError).
func Dial(target string, opts Options) (*Ledger, error) {
	addr, err := ParseTarget(target)
	if err != nil {
		return nil, err
	}
	tc, err := transportCredentials(addr, opts)
	if err != nil {
		return nil, err
	}
	maxDelay := opts.MaxReconnectDelay
	if maxDelay <= 0 {
		maxDelay = 2 * time.Second
	}
	bo := backoff.DefaultConfig
	bo.BaseDelay = 50 * time.Millisecond
	bo.MaxDelay = maxDelay
	dopts := []grpc.DialOption{
		grpc.WithTransportCredentials(tc),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 5 * time.Second}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true}),
	}
	if opts.Token != "" {
		dopts = append(dopts, grpc.WithPerRPCCredentials(bearerToken(opts.Token)))
	}
	key := opts.HolderKey
	if key.IsZero() {
		key = holderkey.New()
	}
	dopts = append(dopts, grpc.WithPerRPCCredentials(holderKeyCreds(key.Encode())))
	dopts = append(dopts, opts.DialOptions...)
	conn, err := grpc.NewClient("dns:///"+addr, dopts...)
	if err != nil {
		return nil, fmt.Errorf("remote: dial %s: %w", target, err)
	}
	return &Ledger{conn: conn, c: pb.NewLedgerClient(conn), key: key}, nil
}

// HolderKey returns the key sent with holder-scoped calls
// (Options.HolderKey, or the one Dial drew). Holder ids a router credential
// uses through this Ledger must be derived from it.
func (l *Ledger) HolderKey() holderkey.Key { return l.key }

func transportCredentials(addr string, o Options) (credentials.TransportCredentials, error) {
	if !o.TLS && o.CAFile == "" && o.CertFile == "" && o.KeyFile == "" {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName}
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("remote: target %q: %w", addr, err)
		}
		cfg.ServerName = host
	}
	if o.CAFile != "" {
		data, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, &FileError{Option: OptionCAFile, Path: o.CAFile, Err: err}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			return nil, &FileError{Option: OptionCAFile, Path: o.CAFile, Err: errors.New("no PEM certificate")}
		}
		cfg.RootCAs = pool
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("remote: cert file and key file: set both for mTLS, or neither")
	}
	if o.CertFile != "" {
		cert, err := loadKeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg), nil
}

// loadKeyPair loads the client certificate and its key, blaming the file
// at fault: the certificate file when it holds no parsable certificate,
// else the key file (missing, unparsable, or not the certificate's key).
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, &FileError{Option: OptionCertFile, Path: certFile, Err: err}
	}
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return tls.Certificate{}, &FileError{Option: OptionCertFile, Path: certFile, Err: errors.New("no PEM certificate")}
	}
	if _, err := x509.ParseCertificate(block.Bytes); err != nil {
		return tls.Certificate{}, &FileError{Option: OptionCertFile, Path: certFile, Err: err}
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, &FileError{Option: OptionKeyFile, Path: keyFile, Err: err}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, &FileError{Option: OptionKeyFile, Path: keyFile, Err: err}
	}
	return cert, nil
}

// bearerToken sends "authorization: Bearer <token>" with every call. It
// allows plaintext connections, because a reserver on a trusted network may
// serve without TLS; see the package hazards.
type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (bearerToken) RequireTransportSecurity() bool { return false }

// holderMethods are the holder-scoped methods, the only ones that carry
// the holder key.
var holderMethods = map[string]bool{
	pb.Ledger_KeepAlive_FullMethodName: true, pb.Ledger_Acquire_FullMethodName: true,
	pb.Ledger_Renew_FullMethodName: true, pb.Ledger_Resize_FullMethodName: true,
	pb.Ledger_Grow_FullMethodName: true, pb.Ledger_Release_FullMethodName: true,
	pb.Ledger_Reassert_FullMethodName: true,
}

// holderKeyCreds sends the encoded holder key as metadata
// holderkey.MetadataKey with holder-scoped calls only. As call
// credentials it is added below the interceptors, so a logging
// interceptor in Options.DialOptions never sees it. Plaintext is allowed,
// like bearerToken.
type holderKeyCreds string

func (k holderKeyCreds) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	if ri, ok := credentials.RequestInfoFromContext(ctx); !ok || !holderMethods[ri.Method] {
		return nil, nil
	}
	return map[string]string{holderkey.MetadataKey: string(k)}, nil
}

func (holderKeyCreds) RequireTransportSecurity() bool { return false }

// Close closes the connection. It does not close the reserver's ledger nor
// release any lease.
func (l *Ledger) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	return l.conn.Close()
}

// call is one RPC: refused after Close, its error mapped back to the
// ledger's errors. Errors read "remote <op>: <cause>", the shape of the
// checked stores' ("<backend> <what was in progress>: <cause>").
func call[Resp any](ctx context.Context, l *Ledger, op string, rpc func() (Resp, error)) (Resp, error) {
	var zero Resp
	if l.closed.Load() {
		return zero, fmt.Errorf("remote %s: %w", op, ledger.ErrClosed)
	}
	resp, err := rpc()
	if err == nil {
		return resp, nil
	}
	if l.closed.Load() && status.Code(err) == codes.Canceled && ctx.Err() == nil {
		return zero, fmt.Errorf("remote %s: %w", op, ledger.ErrClosed)
	}
	return zero, fmt.Errorf("remote %s: %w", op, wire.Error(ctx, err))
}

// callDecoded is call followed by decode of the response; a response
// decode refuses is malformed.
func callDecoded[Resp, T any](ctx context.Context, l *Ledger, op string, rpc func() (Resp, error), decode func(Resp) (T, error)) (T, error) {
	var zero T
	resp, err := call(ctx, l, op, rpc)
	if err != nil {
		return zero, err
	}
	out, err := decode(resp)
	if err != nil {
		return zero, malformed(op, err)
	}
	return out, nil
}

// malformed reports a response this client cannot decode: the outcome is
// unknown, like any transport failure.
func malformed(op string, err error) error {
	return fmt.Errorf("remote %s: malformed response from the reserver: %v", op, err)
}

// Configure implements ledger.Ledger.
func (l *Ledger) Configure(ctx context.Context, spec ledger.PoolSpec) (ledger.Epoch, error) {
	resp, err := call(ctx, l, "configure", func() (*pb.ConfigureResponse, error) {
		return l.c.Configure(ctx, &pb.ConfigureRequest{Spec: wire.PoolSpecToPB(spec)})
	})
	if err != nil {
		return ledger.NoEpoch, err
	}
	return ledger.Epoch(resp.GetEpoch()), nil
}

// SetDraining implements ledger.Ledger.
func (l *Ledger) SetDraining(ctx context.Context, pool ledger.PoolID, engine ledger.EngineID, draining bool) error {
	_, err := call(ctx, l, "set draining", func() (*pb.SetDrainingResponse, error) {
		return l.c.SetDraining(ctx, &pb.SetDrainingRequest{Pool: string(pool), Engine: string(engine), Draining: draining})
	})
	return err
}

// KeepAlive implements ledger.Ledger.
func (l *Ledger) KeepAlive(ctx context.Context, pool ledger.PoolID, holder ledger.HolderID, ttl time.Duration) (ledger.Session, error) {
	return callDecoded(ctx, l, "keepalive", func() (*pb.KeepAliveResponse, error) {
		return l.c.KeepAlive(ctx, &pb.KeepAliveRequest{Pool: string(pool), Holder: string(holder), Ttl: wire.Duration(ttl)})
	}, func(resp *pb.KeepAliveResponse) (ledger.Session, error) { return wire.SessionFromPB(resp.GetSession()) })
}

// Acquire implements ledger.Ledger. A refusal is the reserver's
// *ledger.Rejection, wrapped like every other error.
func (l *Ledger) Acquire(ctx context.Context, req ledger.AcquireRequest) (ledger.Grant, error) {
	const op = "acquire"
	resp, err := call(ctx, l, op, func() (*pb.AcquireResponse, error) { return l.c.Acquire(ctx, wire.AcquireToPB(req)) })
	if err != nil {
		return ledger.Grant{}, err
	}
	return grantOrRejection(op, resp.GetGrant(), resp.GetRejection())
}

func grantOrRejection(op string, g *pb.Grant, r *pb.Rejection) (ledger.Grant, error) {
	if g != nil {
		out, err := wire.GrantFromPB(g)
		if err != nil {
			return ledger.Grant{}, malformed(op, err)
		}
		return out, nil
	}
	return ledger.Grant{}, rejection(op, r, "grant")
}

// rejection decodes the rejection of a response that carries neither the
// result (named what) nor one.
func rejection(op string, r *pb.Rejection, what string) error {
	if r == nil {
		return malformed(op, fmt.Errorf("neither %s nor rejection", what))
	}
	rej, err := wire.RejectionFromPB(r)
	if err != nil {
		return malformed(op, err)
	}
	return fmt.Errorf("remote %s: %w", op, rej)
}

// Renew implements ledger.Ledger.
func (l *Ledger) Renew(ctx context.Context, ref ledger.LeaseRef, ttl time.Duration) (ledger.Renewal, error) {
	const op = "renew"
	resp, err := call(ctx, l, op, func() (*pb.RenewResponse, error) {
		return l.c.Renew(ctx, &pb.RenewRequest{Ref: wire.RefToPB(ref), Ttl: wire.Duration(ttl)})
	})
	if err != nil {
		return ledger.Renewal{}, err
	}
	return renewal(op, resp.GetRenewal())
}

func renewal(op string, r *pb.Renewal) (ledger.Renewal, error) {
	rn, err := wire.RenewalFromPB(r)
	if err != nil {
		return ledger.Renewal{}, malformed(op, err)
	}
	return rn, nil
}

// Resize implements ledger.Ledger. A refused growth is the reserver's
// *ledger.Rejection, wrapped like every other error.
func (l *Ledger) Resize(ctx context.Context, ref ledger.LeaseRef, kvTokens int64) (ledger.Renewal, error) {
	const op = "resize"
	resp, err := call(ctx, l, op, func() (*pb.ResizeResponse, error) {
		return l.c.Resize(ctx, &pb.ResizeRequest{Ref: wire.RefToPB(ref), KvTokens: kvTokens})
	})
	if err != nil {
		return ledger.Renewal{}, err
	}
	if resp.GetRenewal() != nil {
		return renewal(op, resp.GetRenewal())
	}
	return ledger.Renewal{}, rejection(op, resp.GetRejection(), "renewal")
}

// Grow implements ledger.Ledger. Growth is never refused for capacity, so
// the response carries only the renewal; errors map as for Resize.
func (l *Ledger) Grow(ctx context.Context, ref ledger.LeaseRef, kvTokens int64) (ledger.Renewal, error) {
	const op = "grow"
	resp, err := call(ctx, l, op, func() (*pb.GrowResponse, error) {
		return l.c.Grow(ctx, &pb.GrowRequest{Ref: wire.RefToPB(ref), KvTokens: kvTokens})
	})
	if err != nil {
		return ledger.Renewal{}, err
	}
	return renewal(op, resp.GetRenewal())
}

// Release implements ledger.Ledger.
func (l *Ledger) Release(ctx context.Context, ref ledger.LeaseRef, usage ledger.Usage) (ledger.Released, error) {
	resp, err := call(ctx, l, "release", func() (*pb.ReleaseResponse, error) {
		return l.c.Release(ctx, &pb.ReleaseRequest{Ref: wire.RefToPB(ref), Usage: wire.UsageToPB(usage)})
	})
	if err != nil {
		return ledger.Released{}, err
	}
	return ledger.Released{Released: resp.GetReleased(), Epoch: ledger.Epoch(resp.GetEpoch())}, nil
}

// Reassert implements ledger.Ledger. A refusal is the reserver's
// *ledger.Rejection, wrapped like every other error.
func (l *Ledger) Reassert(ctx context.Context, lease ledger.Lease, ttl time.Duration) (ledger.Grant, error) {
	const op = "reassert"
	resp, err := call(ctx, l, op, func() (*pb.ReassertResponse, error) {
		return l.c.Reassert(ctx, &pb.ReassertRequest{Lease: wire.LeaseToPB(lease), Ttl: wire.Duration(ttl)})
	})
	if err != nil {
		return ledger.Grant{}, err
	}
	return grantOrRejection(op, resp.GetGrant(), resp.GetRejection())
}

// Observe implements ledger.Ledger.
func (l *Ledger) Observe(ctx context.Context, obs ledger.Observation) (ledger.Observed, error) {
	resp, err := call(ctx, l, "observe", func() (*pb.ObserveResponse, error) {
		return l.c.Observe(ctx, &pb.ObserveRequest{Observation: wire.ObservationToPB(obs)})
	})
	if err != nil {
		return ledger.Observed{}, err
	}
	return ledger.Observed{Applied: resp.GetApplied(), Epoch: ledger.Epoch(resp.GetEpoch())}, nil
}

// Sweep implements ledger.Ledger.
func (l *Ledger) Sweep(ctx context.Context, pool ledger.PoolID, max int) (ledger.Swept, error) {
	resp, err := call(ctx, l, "sweep", func() (*pb.SweepResponse, error) {
		return l.c.Sweep(ctx, &pb.SweepRequest{Pool: string(pool), Max: int64(max)})
	})
	if err != nil {
		return ledger.Swept{}, err
	}
	return ledger.Swept{Expired: int(resp.GetExpired()), Revoked: int(resp.GetRevoked()), Holders: int(resp.GetHolders())}, nil
}

// Pools implements ledger.Ledger.
func (l *Ledger) Pools(ctx context.Context) ([]ledger.PoolID, error) {
	resp, err := call(ctx, l, "list pools", func() (*pb.PoolsResponse, error) { return l.c.Pools(ctx, &pb.PoolsRequest{}) })
	if err != nil {
		return nil, err
	}
	out := make([]ledger.PoolID, len(resp.GetPools()))
	for i, p := range resp.GetPools() {
		out[i] = ledger.PoolID(p)
	}
	return out, nil
}

// List implements ledger.Ledger.
func (l *Ledger) List(ctx context.Context, f ledger.Filter) ([]ledger.Lease, error) {
	return callDecoded(ctx, l, "list leases", func() (*pb.ListResponse, error) { return l.c.List(ctx, wire.FilterToPB(f)) },
		func(resp *pb.ListResponse) ([]ledger.Lease, error) { return wire.LeasesFromPB(resp.GetLeases()) })
}

// Stats implements ledger.Ledger.
func (l *Ledger) Stats(ctx context.Context, pool ledger.PoolID) (ledger.PoolStats, error) {
	return callDecoded(ctx, l, "stats", func() (*pb.StatsResponse, error) { return l.c.Stats(ctx, &pb.StatsRequest{Pool: string(pool)}) },
		func(resp *pb.StatsResponse) (ledger.PoolStats, error) { return wire.PoolStatsFromPB(resp.GetStats()) })
}

var _ ledger.TotalsChecker = (*Ledger)(nil)

// CheckTotals implements ledger.TotalsChecker: the reserver's ledger
// compares its totals with its lease rows in one atomic read.
func (l *Ledger) CheckTotals(ctx context.Context, pool ledger.PoolID) ([]ledger.TotalsMismatch, error) {
	resp, err := call(ctx, l, "check totals", func() (*pb.CheckTotalsResponse, error) {
		return l.c.CheckTotals(ctx, &pb.CheckTotalsRequest{Pool: string(pool)})
	})
	if err != nil {
		return nil, err
	}
	return wire.TotalsMismatchesFromPB(resp.GetMismatches()), nil
}
