package reserver

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasehold/leasehold/internal/audit"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/reserver/rpc"
)

// auditTimeout bounds the ledger reads of one audit request.
const auditTimeout = 10 * time.Second

// handler routes the reserver's HTTP endpoints. /metrics, /healthz and
// /readyz are open; /v1/audit and the page need a token (see httpAuth).
func (r *Reserver) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(r.metrics.reg, promhttp.HandlerOpts{
		Registry: r.metrics.reg, ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", r.readyz)
	mux.Handle("GET /v1/audit", r.httpAuth.wrap(http.HandlerFunc(r.auditJSON)))
	mux.Handle("GET /{$}", r.httpAuth.wrap(http.HandlerFunc(r.page)))
	return mux
}

// readyz is 200 while the reserver serves and its ledger answers; pools
// still waiting for configuration, and engines left out of their pool until
// their capacity is known, are listed but do not make it unready (one
// engine without telemetry must not take every pool down).
func (r *Reserver) readyz(w http.ResponseWriter, req *http.Request) {
	if !r.ready.Load() {
		http.Error(w, "not ready: starting or shutting down", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), 2*time.Second)
	defer cancel()
	if _, err := r.ledger.Pools(ctx); err != nil {
		http.Error(w, "not ready: ledger unavailable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
	pending := r.fleetSt.pendingPools()
	names := make([]string, 0, len(pending))
	for p := range pending {
		names = append(names, string(p))
	}
	slices.Sort(names)
	for _, p := range names {
		fmt.Fprintf(w, "pool %s not configured: %s\n", p, pending[ledger.PoolID(p)])
	}
	waiting := r.fleetSt.waitingEngines()
	names = names[:0]
	for p := range waiting {
		names = append(names, string(p))
	}
	slices.Sort(names)
	for _, p := range names {
		for _, e := range waiting[ledger.PoolID(p)] {
			fmt.Fprintf(w, "pool %s engine %s waiting: not configured until its capacity is known: %s\n", p, e.ID, e.Err)
		}
	}
}

// filterFromQuery reads ?pool=&engine=&holder=&tenant=.
func filterFromQuery(req *http.Request) (ledger.Filter, error) {
	q := req.URL.Query()
	for k := range q {
		switch k {
		case "pool", "engine", "holder", "tenant":
		default:
			return ledger.Filter{}, fmt.Errorf("unknown query parameter %q (allowed: pool, engine, holder, tenant)", k)
		}
	}
	f := ledger.Filter{
		Pool: ledger.PoolID(q.Get("pool")), Engine: ledger.EngineID(q.Get("engine")),
		Holder: ledger.HolderID(q.Get("holder")), Tenant: ledger.TenantID(q.Get("tenant")),
	}
	return f, ledger.ValidateFilter(f)
}

// report builds the audit for a request.
func (r *Reserver) report(req *http.Request) (audit.Report, int, error) {
	f, err := filterFromQuery(req)
	if err != nil {
		return audit.Report{}, http.StatusBadRequest, err
	}
	ctx, cancel := context.WithTimeout(req.Context(), auditTimeout)
	defer cancel()
	rep, err := r.buildReport(ctx, f)
	switch {
	case errors.Is(err, ledger.ErrUnknownPool):
		return audit.Report{}, http.StatusNotFound, err
	case err != nil:
		return audit.Report{}, http.StatusServiceUnavailable, err
	}
	return rep, http.StatusOK, nil
}

// buildReport is the audit of what f selects: the audit page, its JSON and
// the leasehold_audit_anomalies gauge all come from here.
func (r *Reserver) buildReport(ctx context.Context, f ledger.Filter) (audit.Report, error) {
	in, err := audit.Collect(ctx, r.ledger, f)
	if err != nil {
		return audit.Report{}, err
	}
	in.Sessions = r.sessions.Snapshot()
	in.Scrapes = r.fleetSt.scrapes()
	return audit.Build(in, f, audit.Options{LeakAfter: r.cfg.LeakAfter}), nil
}

func (r *Reserver) auditJSON(w http.ResponseWriter, req *http.Request) {
	rep, code, err := r.report(req)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"message": err.Error()}})
		return
	}
	_ = json.NewEncoder(w).Encode(rep)
}

// httpAuth checks the audit endpoints' callers: any configured token (the
// shared, an admin, a router-role, a per-router or an audit token; all may
// read) as
// "Authorization: Bearer <token>", or as the password of HTTP Basic auth so
// that a browser can open the page. With no token configured only loopback
// clients are served. Tokens are kept as SHA-256 digests and compared in
// constant time; they are never logged or echoed.
type httpAuth struct {
	digests [][sha256.Size]byte
}

func newHTTPAuth(c rpc.Config) *httpAuth {
	a := &httpAuth{}
	add := func(t string) {
		if t != "" {
			a.digests = append(a.digests, sha256.Sum256([]byte(t)))
		}
	}
	add(c.Token)
	for _, t := range c.AdminTokens {
		add(t)
	}
	for _, t := range c.RouterRoleTokens {
		add(t)
	}
	for _, t := range c.RouterTokens {
		add(t)
	}
	for _, t := range c.AuditTokens {
		add(t)
	}
	return a
}

func (a *httpAuth) loopbackOnly() bool { return len(a.digests) == 0 }

func (a *httpAuth) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if err := a.check(req); err != nil {
			a.refuse(w, req, err)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// authError is a refused audit caller: the status and what it is told.
type authError struct {
	status int
	msg    string
}

func (e *authError) Error() string { return e.msg }

// check authenticates req on its headers alone (an *authError when
// refused): the HTTP guard calls it before any body is read, and wrap
// again in front of the audit endpoints.
func (a *httpAuth) check(req *http.Request) error {
	if a.loopbackOnly() {
		if !loopbackRemote(req.RemoteAddr) {
			return &authError{http.StatusForbidden, "reserver: no token is configured (set LEASEHOLD_TOKEN or audit tokens), so the audit is served to loopback clients only"}
		}
		return nil
	}
	tok, ok := requestToken(req)
	if !ok {
		return &authError{http.StatusUnauthorized, "reserver: missing token: send Authorization: Bearer <token>"}
	}
	if !a.known(tok) {
		return &authError{http.StatusUnauthorized, "reserver: unknown token"}
	}
	return nil
}

// refuse answers a request check refused.
func (a *httpAuth) refuse(w http.ResponseWriter, _ *http.Request, err error) {
	ae := &authError{http.StatusUnauthorized, err.Error()}
	errors.As(err, &ae)
	if ae.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="leasehold", Basic realm="leasehold audit (any user, token as password)"`)
	}
	http.Error(w, ae.msg, ae.status)
}

func (a *httpAuth) known(tok string) bool {
	d := sha256.Sum256([]byte(tok))
	found := 0
	for _, c := range a.digests { // no early exit
		found |= subtle.ConstantTimeCompare(d[:], c[:])
	}
	return found == 1
}

// requestToken returns the bearer token, or the Basic-auth password.
func requestToken(req *http.Request) (string, bool) {
	h := req.Header.Get("Authorization")
	scheme, rest, ok := strings.Cut(h, " ")
	if !ok {
		return "", false
	}
	rest = strings.TrimSpace(rest)
	switch {
	case strings.EqualFold(scheme, "bearer"):
		return rest, rest != ""
	case strings.EqualFold(scheme, "basic"):
		b, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return "", false
		}
		_, pw, ok := strings.Cut(string(b), ":")
		return pw, ok && pw != ""
	}
	return "", false
}

func loopbackRemote(remoteAddr string) bool {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return false
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
