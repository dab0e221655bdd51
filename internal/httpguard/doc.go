// Package httpguard keeps an HTTP server answering while hostile or broken
// clients hold connections open: the router's proxy and the reserver's HTTP
// side both serve through it. It owns the server's timeouts, the bound on
// open connections and the bound on requests in flight without a
// credential; the handler it wraps owns everything else.
//
// Rules, each with the Config field that sets its bound:
//
//   - Headers: a connection must deliver a request's headers within
//     ReadHeaderTimeout of its first byte (of being accepted, for the
//     first request; the TLS handshake included).
//   - Credential before body: a request to a path that is neither a probe
//     nor public is authenticated on its headers alone (Policy.Authenticate)
//     before the handler runs and before a byte of its body is read. A
//     refusal is answered at once (Policy.Refuse, 401/403) and the
//     connection closed without reading or draining the body.
//   - Body: a request's body must arrive within BodyTimeout of its headers;
//     the deadline is lifted once the body has been read to its end, so it
//     never bounds the answer. An answer that starts before the body was
//     read to its end closes the connection instead of draining the rest.
//   - Writes: every write to a client must make progress within
//     WriteTimeout (writes are split into 64 KiB pieces, each with its own
//     deadline). A client that stops reading is cut; a stream that keeps
//     being read, however long, is not: there is deliberately no
//     whole-request ReadTimeout or WriteTimeout (they would cut long
//     server-sent-event streams).
//   - Idle: a keep-alive connection with no request for IdleTimeout is
//     closed.
//   - Connections: at most MaxConns are open (by default derived from
//     RLIMIT_NOFILE, see Config.ConnLimit). A new connection at the limit
//     is not made to wait: the guard closes the open connection that has
//     made no progress for the longest among those that are idle, new, or
//     still sending headers or body (nginx and haproxy shed the same way),
//     and counts it in leasehold_http_connections_shed_total. Only when
//     every open connection is being answered is the new one closed
//     instead (reason refused).
//   - Unauthenticated work: at most MaxUnauthenticated requests without a
//     credential are in flight (public paths and refusals; probes are
//     exempt, so a flood cannot fail them). Past it a public request is
//     answered 503 and a refusal is dropped unanswered.
//
// Hazards: the per-write deadline replaces any write deadline a handler
// sets; a handler that answers while still reading the request body (full
// duplex) has its body cut at the first byte of the answer. Serve only
// through Guard.Server on a Guard.Listener: the connection bound and the
// write deadlines live in the listener's connections.
package httpguard
