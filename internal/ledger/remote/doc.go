// Package remote is the ledger backend that is a gRPC client of a reserver
// (`--ledger grpc://host:port`): every ledger.Ledger call is one unary RPC of
// the leasehold.v1.Ledger service, served by the reserver's gRPC server (package rpc) in front
// of whatever backend the reserver uses. It lets routers — or routers not
// written in Go, from proto/leasehold/v1/ledger.proto — share a reserver
// instead of talking to Redis or etcd themselves.
//
// # Semantics
//
// The reserver's ledger decides everything, on its clock; this package only
// carries calls. Results round-trip exactly: a capacity or quota refusal is
// the same *ledger.Rejection (reason, engine, retry-after, epoch) and every
// ledger error matches the same sentinel with errors.Is. Refusals by the
// reserver's authentication match ErrUnauthenticated or
// ledger.ErrPermissionDenied (the token may not make this call, or not for
// this holder; or the reserver has no token and serves loopback only).
//
// # Holder key
//
// Every Ledger has a holder key (Options.HolderKey, else a fresh one drawn
// by Dial; package holderkey), sent as metadata holderkey.MetadataKey with
// the holder-scoped calls only (KeepAlive, Acquire, Renew, Resize, Grow,
// Release, Reassert). A reserver lets a router credential act only for
// holder ids derived from the key its call presents, so a caller that
// makes its own holder ids must derive them from Ledger.HolderKey (a
// lease.Manager on the Ledger does); an admin credential needs none.
//
// # What it does not do
//
// It does not retry. An error that matches no sentinel (connection refused,
// reserver restarting, a deadline, a backend failure on the reserver) leaves
// the outcome unknown; the ledger contract makes every call safe to retry —
// Acquire on its (holder, request id), Release on its lease id, Renew,
// Resize and Grow to absolute values — and when and how often to retry is the
// caller's business (internal/lease). Calls fail fast while the reserver is
// unreachable (no wait-for-ready); the connection is re-established in the
// background with capped exponential backoff, and at once on the next call
// after the reserver went away cleanly.
//
// Callers bound each call with their ctx. Close closes the connection, not
// the reserver's ledger; calls after Close fail with ledger.ErrClosed.
//
// # Hazards
//
// Without TLS the bearer token and the holder key cross the network in the
// clear; set Options.CAFile (and CertFile/KeyFile for mTLS) wherever the
// path is not trusted. With mTLS the client certificate alone can authenticate a router
// (the reserver's rpc package), so no token need be sent at all. Identifiers must be valid UTF-8 to cross the wire (protobuf
// strings); others fail with ledger.ErrInvalidArgument.
package remote
