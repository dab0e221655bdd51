package rpc

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// refusalEvery is how often one (peer host, method, code) is logged.
const refusalEvery = time.Minute

// refusalLog logs refused callers, at most once per peer host, method and
// code per refusalEvery: a misconfigured router retries every second per
// pool, and one line a minute is enough to find it. It never logs a token.
type refusalLog struct {
	logger *slog.Logger

	mu   sync.Mutex
	last map[refusalKey]time.Time
}

type refusalKey struct {
	host, method string
	code         uint32
}

func newRefusalLog(log *slog.Logger) *refusalLog {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &refusalLog{logger: log, last: map[refusalKey]time.Time{}}
}

func (r *refusalLog) note(ctx context.Context, method string, p principal, st *status.Status) {
	addr := ""
	if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
		addr = pr.Addr.String()
	}
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	k := refusalKey{host: host, method: method, code: uint32(st.Code())}
	now := time.Now()
	r.mu.Lock()
	if t, ok := r.last[k]; ok && now.Sub(t) < refusalEvery {
		r.mu.Unlock()
		return
	}
	if len(r.last) > 4096 { // many peers: forget them all rather than grow
		clear(r.last)
	}
	r.last[k] = now
	r.mu.Unlock()
	attrs := []any{"method", method, "code", st.Code().String(), "peer", addr, "reason", st.Message()}
	switch {
	case p.role == roleRouter && p.router == "":
		attrs = append(attrs, "as", "router token")
	case p.role == roleRouter:
		attrs = append(attrs, "as", "router "+p.router)
	case p.role == roleAudit:
		attrs = append(attrs, "as", "audit")
	case p.role == roleAdmin:
		attrs = append(attrs, "as", "admin")
	}
	r.logger.Warn("reserver: refused a gRPC call (one line per peer, method and code per minute)", attrs...)
}
