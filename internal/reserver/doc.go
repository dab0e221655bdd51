// Package reserver wires one reserver process (cmd/reserver): a ledger
// backend picked from the --ledger URL, the gRPC ledger service
// (internal/reserver/rpc), the fleet applier, the telemetry reconciler and
// the HTTP endpoints. The command only parses, starts, waits for signals
// and shuts down; everything here is testable in-process.
//
// # Lifecycle
//
// New validates the Config, loads the fleet file (an invalid file is an
// error naming the field), opens the ledger and listens. Start applies the
// fleet — Configure per pool; when an engine's KV capacity must be
// discovered from its metrics, one telemetry round runs first. A pool is
// configured with the engines whose capacity is known; an engine still
// unknown waits (logged, listed on /readyz) and joins when its metrics
// report, and tenant quotas, a share of the configured engines, grow then.
// An engine another reserver on the same store already configured is kept,
// never removed by this reserver's narrower view. A pool with no known
// engine stays pending and is retried. That first application is bounded
// by StartupTimeout, every ledger call in it by its own deadline, and ends
// with Start's ctx (a signal: Start then returns without serving). Start
// then serves gRPC and HTTP, unready while the ledger does not answer, and
// starts the loops:
//
//   - reconcile: every ReconcileInterval one round of scrapes, each sample
//     passed to Observe; failures are counted, discovered capacity merged.
//   - maintenance: every ReapplyInterval each pool's epoch is checked and
//     the fleet re-applied when the ledger reports a new epoch or no longer
//     knows the pool (a wiped store); pending pools are retried; every
//     SweepInterval each pool is swept.
//
// Reload (SIGHUP) re-reads the fleet file; a bad file is logged and the
// old fleet stays. Configure is idempotent, so leases survive re-applying.
// Shutdown (SIGTERM, SIGINT) marks the reserver unready, stops gRPC
// gracefully, stops the loops, shuts HTTP down and closes the ledger.
//
// # No leader election
//
// Several reservers may front one store and all reconcile the same
// engines: no leader is elected, because Observe is idempotent by
// observation time — an observation whose ObservedAt is not after the last
// applied one is ignored — so duplicate scrapes only repeat each other.
// Configure is idempotent too, so reservers re-applying the same fleet file
// agree. (Fleet files that differ between reservers would fight; deploy one
// file.)
//
// # HTTP
//
//	GET /metrics     Prometheus, this process's registry (open)
//	GET /healthz     the process is up (open)
//	GET /readyz      serving and the ledger answers; lists pending pools and waiting engines (open)
//	GET /v1/audit    audit.Report as JSON; ?pool=&engine=&holder=&tenant=
//	GET /            the same report as an HTML page, refreshed by a meta tag
//
// The audit needs a token — the shared LEASEHOLD_TOKEN, an admin,
// router-role, per-router or audit token — as "Authorization: Bearer
// <token>" (or as the password of HTTP Basic auth, for browsers). With no token configured it is served
// to loopback clients only. HTTP does not ask for client certificates, so
// a reserver authenticating gRPC callers by mTLS alone
// (--tls-client-ca-file, no token) still serves its audit to loopback only.
// HTTP serves through internal/httpguard (--http-* flags): any path but the
// three open ones is authenticated on its headers and refused at once,
// and slow, idle or excess connections are bounded. gRPC runs under
// rpc.Limits (--grpc-* flags): message size, streams per connection, idle
// connections, handshake time and keepalive enforcement.
//
// # gRPC authentication
//
// See internal/reserver/rpc for the whole model. In short: a bearer token
// that is sent decides; else, with --tls-client-ca-file, the verified
// client certificate's first DNS SAN (else CommonName) is the router of
// that name, or an admin or audit principal when listed in
// --admin-identities or --audit-identities; with neither tokens nor a
// client CA, loopback clients only. A router — router-role token
// (LEASEHOLD_ROUTER_ROLE_TOKENS, --router-role-tokens-file), per-router
// token or certificate — acts only for the holder ids derived from the
// holder key its call presents, and calls no admin method.
//
// # Hazards
//
// The audit's lease_of_expired_holder check knows only sessions whose
// KeepAlive passed through this reserver; routers that use Redis or etcd
// directly are not judged. Secrets are read from the environment or files
// and never logged; a ledger URL's password is redacted in logs.
package reserver
