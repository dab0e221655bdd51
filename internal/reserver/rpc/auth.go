package rpc

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/holderkey"
	"github.com/leasehold/leasehold/internal/ledger/remote/wire"
)

// role is what a token or certificate identity may do.
type role int

const (
	roleAudit  role = iota + 1 // read only
	roleRouter                 // its own holders, and read
	roleAdmin                  // everything
)

// access is what a method needs.
type access int

const (
	accessRead   access = iota // Pools, List, Stats
	accessHolder               // KeepAlive, Acquire, Renew, Resize, Grow, Release, Reassert
	accessAdmin                // Configure, SetDraining, Observe, Sweep
)

// principal is an authenticated caller.
type principal struct {
	role role
	// router is a named router's name (per-router token, certificate
	// identity); "" for a router token, which may use any name.
	router string
}

// credential is one configured token, kept only as its SHA-256 digest so
// every comparison has the same length and takes the same time.
type credential struct {
	digest [sha256.Size]byte
	who    principal
}

// authenticator checks bearer tokens against the configured credentials
// and maps verified client certificates to principals. It is immutable
// after newAuthenticator, so handlers share it without locking.
type authenticator struct {
	creds []credential // bearer tokens
	// clientCerts: the transport verifies client certificates, and a
	// verified one identifies a caller that sends no token.
	clientCerts bool
	// certRoles maps admin and audit certificate identities to their role;
	// any other verified identity is a router.
	certRoles map[string]role
}

func newAuthenticator(c Config) *authenticator {
	a := &authenticator{clientCerts: c.ClientCerts, certRoles: map[string]role{}}
	for _, id := range c.AdminIdentities {
		a.certRoles[id] = roleAdmin
	}
	for _, id := range c.AuditIdentities {
		a.certRoles[id] = roleAudit
	}
	add := func(tok string, p principal) {
		if tok != "" {
			a.creds = append(a.creds, credential{digest: sha256.Sum256([]byte(tok)), who: p})
		}
	}
	add(c.Token, principal{role: roleAdmin})
	for _, t := range c.AdminTokens {
		add(t, principal{role: roleAdmin})
	}
	for name, t := range c.RouterTokens {
		add(t, principal{role: roleRouter, router: name})
	}
	for _, t := range c.RouterRoleTokens {
		add(t, principal{role: roleRouter})
	}
	for _, t := range c.AuditTokens {
		add(t, principal{role: roleAudit})
	}
	return a
}

// loopbackOnly reports whether neither tokens nor client certificates are
// configured, so that only loopback peers are served.
func (a *authenticator) loopbackOnly() bool { return len(a.creds) == 0 && !a.clientCerts }

// authenticate returns the caller, or the status refusing it. In order:
// with no credentials configured, a loopback peer is admin and any other
// peer is refused; an authorization header is checked as a bearer token
// (explicit, so it wins over a certificate, and a bad one is refused even
// when a good certificate came with it); else a verified client
// certificate names the caller; else the call is Unauthenticated.
func (a *authenticator) authenticate(ctx context.Context) (principal, *status.Status) {
	if a.loopbackOnly() {
		p, _ := peer.FromContext(ctx)
		if p != nil && isLoopback(p.Addr) {
			return principal{role: roleAdmin}, nil
		}
		from := "an unknown peer"
		if p != nil && p.Addr != nil {
			from = p.Addr.String()
		}
		return principal{}, wire.AuthStatus(wire.ReasonLoopbackOnly, fmt.Sprintf(
			"reserver: no token and no client CA is configured (set LEASEHOLD_TOKEN on the reserver and its routers, or --tls-client-ca-file for mTLS), so it serves loopback clients only; refusing %s", from))
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if vals := md.Get("authorization"); len(vals) > 0 {
		return a.token(vals)
	}
	if a.clientCerts {
		if id, ok := verifiedIdentity(ctx); ok {
			return a.certPrincipal(id)
		}
		return principal{}, wire.AuthStatus(wire.ReasonUnauthenticated,
			`reserver: no credentials: send metadata "authorization: Bearer <token>" or a client certificate signed by the reserver's client CA`)
	}
	return principal{}, wire.AuthStatus(wire.ReasonUnauthenticated,
		`reserver: missing bearer token: send metadata "authorization: Bearer <token>"`)
}

// token checks the values of the authorization metadata.
func (a *authenticator) token(vals []string) (principal, *status.Status) {
	tok, ok := bearer(vals)
	if !ok {
		return principal{}, wire.AuthStatus(wire.ReasonUnauthenticated,
			`reserver: malformed authorization: send exactly one "authorization: Bearer <token>"`)
	}
	d := sha256.Sum256([]byte(tok))
	found, who := 0, principal{}
	for _, c := range a.creds { // no early exit: the time does not depend on which token matched
		m := subtle.ConstantTimeCompare(d[:], c.digest[:])
		if m == 1 {
			who = c.who
		}
		found |= m
	}
	if found == 0 {
		return principal{}, wire.AuthStatus(wire.ReasonUnauthenticated, "reserver: unknown bearer token")
	}
	return who, nil
}

// certPrincipal maps a verified certificate identity to its principal: an
// admin or audit identity, else the router of that name.
func (a *authenticator) certPrincipal(id string) (principal, *status.Status) {
	if id == "" {
		return principal{}, wire.AuthStatus(wire.ReasonUnauthenticated,
			"reserver: the client certificate names no identity (no DNS SAN and no CommonName)")
	}
	if r, ok := a.certRoles[id]; ok {
		return principal{role: r}, nil
	}
	if err := checkRouterName(id); err != nil {
		return principal{}, wire.AuthStatus(wire.ReasonForbidden, fmt.Sprintf(
			"reserver: client certificate identity %q is not an admin or audit identity and cannot be a router name: %v", id, err))
	}
	return principal{role: roleRouter, router: id}, nil
}

// verifiedIdentity returns the identity of the peer's client certificate —
// its first DNS SAN, else its CommonName — when the TLS handshake verified
// it against the client CA (VerifiedChains non-empty). A certificate that
// was presented but not verified is no identity.
func verifiedIdentity(ctx context.Context) (string, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return "", false
	}
	var info credentials.TLSInfo
	switch ai := p.AuthInfo.(type) {
	case credentials.TLSInfo:
		info = ai
	case *credentials.TLSInfo:
		if ai == nil {
			return "", false
		}
		info = *ai
	default:
		return "", false
	}
	chains := info.State.VerifiedChains
	if len(chains) == 0 || len(chains[0]) == 0 || chains[0][0] == nil {
		return "", false
	}
	leaf := chains[0][0]
	if len(leaf.DNSNames) > 0 {
		return leaf.DNSNames[0], true
	}
	return leaf.Subject.CommonName, true
}

// bearer returns the token of the authorization metadata values.
func bearer(vals []string) (string, bool) {
	if len(vals) != 1 {
		return "", false
	}
	scheme, tok, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// isLoopback reports whether addr is a loopback TCP address or a Unix socket.
func isLoopback(addr net.Addr) bool {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	case nil:
		return false
	}
	ap, err := netip.ParseAddrPort(addr.String())
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// authorize checks that p may make a call needing acc; holder is the holder
// id the call acts for (accessHolder only). A router must also prove that
// holder is its session's own: ctx carries the holder key it was derived
// from (routerHolder).
func authorize(ctx context.Context, p principal, method string, acc access, holder ledger.HolderID) *status.Status {
	switch {
	case p.role == roleAdmin:
		return nil
	case acc == accessRead:
		return nil
	case acc == accessHolder && p.role == roleRouter:
		return routerHolder(ctx, p, method, holder)
	case acc == accessHolder:
		return wire.AuthStatus(wire.ReasonForbidden, fmt.Sprintf("reserver: %s: an audit token or identity may only read (Pools, List, Stats)", method))
	default:
		return wire.AuthStatus(wire.ReasonForbidden, fmt.Sprintf("reserver: %s needs the shared (LEASEHOLD_TOKEN) or an admin token, or an admin certificate identity", method))
	}
}

// routerHolder checks that router p may act for holder: the call presents
// a holder key (metadata holderkey.MetadataKey), holder is "NAME/SUFFIX"
// with SUFFIX derived from that key (holderkey.Verify: constant-time),
// and, for a named router, NAME is its name. The key is a secret of the
// router's session and holder ids are public, so a router credential,
// even one shared by many routers, reaches only its own session's leases.
// Messages quote the holder id, never the key.
func routerHolder(ctx context.Context, p principal, method string, holder ledger.HolderID) *status.Status {
	who := "a router token"
	if p.router != "" {
		who = fmt.Sprintf("router %q", p.router)
	}
	refuse := func(format string, args ...any) *status.Status {
		return wire.AuthStatus(wire.ReasonForbidden, fmt.Sprintf("reserver: %s: %s ", method, who)+fmt.Sprintf(format, args...))
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(holderkey.MetadataKey)
	if len(vals) == 0 {
		return refuse("sent no holder key (metadata %q): a router may act only for the holder ids of its own session, derived from the key it sends (the grpc:// ledger backend sends it)", holderkey.MetadataKey)
	}
	if len(vals) != 1 {
		return refuse("sent %d holder keys (metadata %q); send exactly one", len(vals), holderkey.MetadataKey)
	}
	key, err := holderkey.Parse(vals[0])
	if err != nil {
		return refuse("sent a malformed holder key: %v", err)
	}
	name, err := holderkey.Verify(holder, key)
	if err != nil {
		return refuse("may act only for holder ids derived from the holder key it sends, and holder %q is not (another session's holder, or not NAME/<key tag>...)", holder)
	}
	if p.router != "" && name != p.router {
		return refuse("may act only for holder ids %q, not %q", p.router+"/<key tag>...", holder)
	}
	return nil
}
