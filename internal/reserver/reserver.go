package reserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/leasehold/leasehold/internal/audit"
	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/httpguard"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/ledgerurl"
	"github.com/leasehold/leasehold/internal/ledger/remote"
	"github.com/leasehold/leasehold/internal/reserver/rpc"
)

// Reserver is one reserver process: its ledger, the gRPC ledger service,
// the HTTP endpoints, the telemetry reconciler and the fleet applier.
// New prepares everything and listens; Start serves; Shutdown stops in
// order. Reload re-reads the fleet file.
type Reserver struct {
	cfg      Config
	log      *slog.Logger
	ledger   ledger.Ledger
	metrics  *metrics
	sessions *audit.Sessions
	grpc     *grpc.Server
	http     *http.Server
	grpcLis  net.Listener
	httpLis  net.Listener
	httpAuth *httpAuth
	httpTLS  bool
	fleetSt  *fleetState

	ready atomic.Bool
	// errC receives a server's unexpected exit.
	errC chan error

	// lifeMu guards started and stopped.
	lifeMu  sync.Mutex
	started bool
	stopped bool
	stopC   chan struct{}
	// loopsWG waits for the reconcile and maintenance loops; serveWG for
	// the gRPC and HTTP serve goroutines.
	loopsWG sync.WaitGroup
	serveWG sync.WaitGroup
}

// New validates cfg, loads the fleet file, opens the ledger and listens on
// both addresses. It serves nothing until Start. On error everything it
// opened is closed again.
func New(cfg Config, log *slog.Logger) (_ *Reserver, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fl, err := fleet.Load(cfg.FleetFile)
	if err != nil {
		return nil, err
	}
	var closers []func()
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()
	l, err := ledgerurl.Open(cfg.Ledger, ledgerurl.Options{
		Options: fl.Lease.LedgerOptions(),
		Remote:  remote.Options{Token: cfg.Token},
	})
	if err != nil {
		return nil, fmt.Errorf("--ledger: %w", err)
	}
	closers = append(closers, func() { _ = l.Close() })

	r := &Reserver{
		cfg: cfg, log: log, ledger: l,
		sessions: audit.NewSessions(0),
		httpAuth: newHTTPAuth(cfg.RPCConfig()),
		errC:     make(chan error, 2),
		stopC:    make(chan struct{}),
	}
	r.metrics = newMetrics(l, log)
	r.fleetSt, err = newFleetState(r, fl)
	if err != nil {
		return nil, err
	}
	r.metrics.reg.MustRegister(newAuditCollector(r.buildReport, log))

	opts := append(cfg.GRPC.ServerOptions(), grpc.ChainUnaryInterceptor(r.metrics.unary(r.sessions)))
	var tlsCfg *tls.Config
	if cfg.TLSCertFile != "" {
		if tlsCfg, err = serverTLS(cfg); err != nil {
			return nil, err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	rc := cfg.RPCConfig()
	rc.Logger = log
	if r.grpc, err = rpc.NewGRPCServer(l, rc, opts...); err != nil {
		return nil, err
	}
	if r.grpcLis, err = net.Listen("tcp", cfg.GRPCListen); err != nil {
		return nil, fmt.Errorf("--grpc-listen: %w", err)
	}
	closers = append(closers, func() { _ = r.grpcLis.Close() })
	if r.httpLis, err = net.Listen("tcp", cfg.HTTPListen); err != nil {
		return nil, fmt.Errorf("--http-listen: %w", err)
	}
	closers = append(closers, func() { _ = r.httpLis.Close() })
	// Tokens are checked on the headers, before any body (internal/httpguard).
	g := httpguard.New(cfg.HTTP, httpguard.Options{Probes: []string{"/healthz", "/readyz"}, Public: []string{"/metrics"},
		Authenticate: r.httpAuth.check, Refuse: r.httpAuth.refuse, Logger: log, Registerer: r.metrics.reg})
	r.httpLis = g.Listener(r.httpLis)
	r.http = g.Server(r.handler(), slog.NewLogLogger(log.Handler(), slog.LevelWarn))
	if cfg.HTTPTLS {
		h := tlsCfg.Clone()
		h.ClientAuth, h.ClientCAs = tls.NoClientCert, nil // browsers and the CLI authenticate with tokens
		r.http.TLSConfig = h
		r.httpTLS = true
	}
	return r, nil
}

func serverTLS(cfg Config) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file/--tls-key-file: %w", err)
	}
	t := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if cfg.TLSClientCAFile != "" {
		pool, err := loadCAs("--tls-client-ca-file", cfg.TLSClientCAFile)
		if err != nil {
			return nil, err
		}
		t.ClientCAs, t.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return t, nil
}

// loadCAs reads the PEM certificates of path, named by flag in errors, into
// a pool.
func loadCAs(flag, path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s: no PEM certificate found", flag, path)
	}
	return pool, nil
}

// GRPCAddr and HTTPAddr are the addresses actually listened on.
func (r *Reserver) GRPCAddr() string { return r.grpcLis.Addr().String() }

// HTTPAddr is the HTTP listen address.
func (r *Reserver) HTTPAddr() string { return r.httpLis.Addr().String() }

// Ledger returns the reserver's ledger (not to be closed by the caller).
func (r *Reserver) Ledger() ledger.Ledger { return r.ledger }

// Err receives an error when a server stops unexpectedly.
func (r *Reserver) Err() <-chan error { return r.errC }

// Start applies the fleet (running one telemetry round first when some
// engine's capacity must be discovered), serves gRPC and HTTP, starts the
// reconcile and maintenance loops and marks the reserver ready. The first
// application is bounded by --startup-timeout (each ledger call by its
// own deadline); pools that cannot be configured by then are retried by
// the maintenance loop. When ctx ends first (a signal) Start returns its
// error without serving; call Shutdown then.
func (r *Reserver) Start(ctx context.Context) error {
	r.lifeMu.Lock()
	defer r.lifeMu.Unlock()
	if r.started || r.stopped {
		return errors.New("reserver: Start called twice or after Shutdown")
	}
	r.started = true

	sctx, cancel := context.WithTimeout(ctx, r.cfg.StartupTimeout)
	r.fleetSt.startup(sctx)
	timedOut := sctx.Err() != nil
	cancel()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("reserver: start interrupted before serving: %w", err)
	}
	if timedOut {
		r.log.Warn("first fleet application did not finish within --startup-timeout; serving, and retrying pools not configured every --reapply-interval",
			"startup_timeout", r.cfg.StartupTimeout, "pending", len(r.fleetSt.pendingPools()))
	}

	r.serveWG.Add(2)
	go func() {
		defer r.serveWG.Done()
		if err := r.grpc.Serve(r.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			r.errC <- fmt.Errorf("grpc: %w", err)
		}
	}()
	go func() {
		defer r.serveWG.Done()
		var err error
		if r.httpTLS {
			err = r.http.ServeTLS(r.httpLis, "", "")
		} else {
			err = r.http.Serve(r.httpLis)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.errC <- fmt.Errorf("http: %w", err)
		}
	}()
	r.fleetSt.startLoops(&r.loopsWG, r.stopC)
	r.ready.Store(true)
	r.log.Info("reserver serving", "grpc", r.GRPCAddr(), "http", r.HTTPAddr(), "ledger", redactURL(r.cfg.Ledger),
		"fleet", r.cfg.FleetFile, "auth", r.authMode())
	return nil
}

// authMode describes how gRPC callers are authenticated, for the log.
func (r *Reserver) authMode() string {
	tokens, certs := !r.httpAuth.loopbackOnly(), r.cfg.TLSClientCAFile != ""
	switch {
	case tokens && certs:
		return "bearer tokens, else verified client certificates"
	case certs:
		return "verified client certificates (no token: the HTTP audit serves loopback clients only)"
	case tokens:
		return "bearer tokens"
	default:
		return "no token or client CA configured: loopback clients only"
	}
}

// Reload re-reads and validates the fleet file and re-applies it. A bad
// file is logged and returned, and the old fleet stays in force. Leases
// survive: Configure is idempotent.
func (r *Reserver) Reload(ctx context.Context) error {
	fl, err := fleet.Load(r.cfg.FleetFile)
	if err != nil {
		r.metrics.reloads.WithLabelValues("error").Inc()
		r.log.Error("fleet reload failed; keeping the previous fleet", "err", err)
		return err
	}
	r.metrics.reloads.WithLabelValues("ok").Inc()
	r.fleetSt.replace(ctx, fl)
	r.log.Info("fleet reloaded", "fleet", r.cfg.FleetFile, "pools", len(fl.Pools))
	return nil
}

// Shutdown marks the reserver unready, stops gRPC gracefully (forcibly
// when ctx ends), stops the reconciler and maintenance loops, shuts HTTP
// down and closes the ledger. It is safe to call once, with or without
// Start.
func (r *Reserver) Shutdown(ctx context.Context) error {
	r.lifeMu.Lock()
	if r.stopped {
		r.lifeMu.Unlock()
		return nil
	}
	r.stopped = true
	r.lifeMu.Unlock()

	r.ready.Store(false)
	stoppedC := make(chan struct{})
	go func() {
		r.grpc.GracefulStop()
		close(stoppedC)
	}()
	select {
	case <-stoppedC:
	case <-ctx.Done():
		r.grpc.Stop()
		<-stoppedC
	}
	close(r.stopC)
	r.loopsWG.Wait()
	var errs []error
	if err := r.http.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		_ = r.http.Close()
	}
	_ = r.grpcLis.Close() // when never served
	_ = r.httpLis.Close()
	r.serveWG.Wait()
	if err := r.ledger.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close ledger: %w", err))
	}
	return errors.Join(errs...)
}

// redactURL hides a password in a ledger URL.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.User == nil {
		return raw
	}
	return u.Redacted()
}
