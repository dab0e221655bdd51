package rpc

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/reserver/rpc/wire"
)

// role is what a token may do.
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
	accessHolder               // KeepAlive, Acquire, Renew, Resize, Release, Reassert
	accessAdmin                // Configure, SetDraining, Observe, Sweep
)

// principal is an authenticated caller.
type principal struct {
	role   role
	router string // for roleRouter
}

// credential is one configured token, kept only as its SHA-256 digest so
// every comparison has the same length and takes the same time.
type credential struct {
	digest [sha256.Size]byte
	who    principal
}

// authenticator checks bearer tokens against the configured credentials.
type authenticator struct {
	creds []credential // empty: loopback only
}

func newAuthenticator(c Config) *authenticator {
	a := &authenticator{}
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
	for _, t := range c.AuditTokens {
		add(t, principal{role: roleAudit})
	}
	return a
}

// authenticate returns the caller, or the status refusing it.
func (a *authenticator) authenticate(ctx context.Context) (principal, *status.Status) {
	if len(a.creds) == 0 {
		p, _ := peer.FromContext(ctx)
		if p != nil && isLoopback(p.Addr) {
			return principal{role: roleAdmin}, nil
		}
		from := "an unknown peer"
		if p != nil && p.Addr != nil {
			from = p.Addr.String()
		}
		return principal{}, wire.AuthStatus(wire.ReasonLoopbackOnly, fmt.Sprintf(
			"reserver: no token is configured (set LEASEHOLD_TOKEN on the reserver and its routers), so it serves loopback clients only; refusing %s", from))
	}
	tok, ok := bearer(ctx)
	if !ok {
		return principal{}, wire.AuthStatus(wire.ReasonUnauthenticated,
			`reserver: missing bearer token: send metadata "authorization: Bearer <token>"`)
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

// bearer returns the token of the authorization metadata.
func bearer(ctx context.Context) (string, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
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
// id the call acts for (accessHolder only).
func authorize(p principal, method string, acc access, holder ledger.HolderID) *status.Status {
	switch {
	case p.role == roleAdmin:
		return nil
	case acc == accessRead:
		return nil
	case acc == accessHolder && p.role == roleRouter:
		h := string(holder)
		if h == p.router || strings.HasPrefix(h, p.router+"/") {
			return nil
		}
		return wire.AuthStatus(wire.ReasonForbidden, fmt.Sprintf(
			"reserver: %s: router %q may act only for holder %q or %q, not %q", method, p.router, p.router, p.router+"/...", h))
	case acc == accessHolder:
		return wire.AuthStatus(wire.ReasonForbidden, fmt.Sprintf("reserver: %s: an audit token may only read (Pools, List, Stats)", method))
	default:
		return wire.AuthStatus(wire.ReasonForbidden, fmt.Sprintf("reserver: %s needs the shared (LEASEHOLD_TOKEN) or an admin token", method))
	}
}
