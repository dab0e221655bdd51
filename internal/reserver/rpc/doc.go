// Package rpc is the reserver's gRPC ledger service: it serves any
// ledger.Ledger as the leasehold.v1.Ledger service (proto/leasehold/v1),
// authenticating every call and limiting what each principal may do. The
// wire form and the error table live in the wire subpackage, shared with
// the remote backend (internal/ledger/remote).
//
// # Authentication
//
// A caller is identified, in this order, by:
//
//  1. a bearer token, metadata "authorization: Bearer <token>". A token that
//     is sent is explicit and wins over a client certificate; a malformed or
//     unknown one is Unauthenticated even when a good certificate came with
//     it.
//  2. a client certificate, when Config.ClientCerts says the transport
//     verifies them against a client CA (reserver --tls-client-ca-file). Only
//     a certificate the TLS handshake verified (credentials.TLSInfo with
//     non-empty VerifiedChains) counts. Its identity is its first DNS SAN,
//     else its CommonName: an identity listed in Config.AdminIdentities or
//     AuditIdentities has that role, any other is the router of that name.
//
// Neither is Unauthenticated. With no token and no client CA configured the
// server serves loopback peers only (with every right) and refuses any
// other peer with PermissionDenied, saying why. Tokens are compared in
// constant time and never logged or echoed in errors.
//
// # Authorization
//
//	principal                                   may call
//	admin: shared token (LEASEHOLD_TOKEN),      every method, any holder, no holder key needed
//	  admin token, admin certificate identity
//	router, any name: router-role token         KeepAlive, Acquire, Renew, Resize, Grow, Release,
//	  (Config.RouterRoleTokens)                 Reassert for a holder NAME/SUFFIX (any NAME) whose
//	                                            SUFFIX is derived from the holder key the call
//	                                            presents; Pools, List, Stats
//	router NAME: its per-router token, or a     the same, with NAME its own name;
//	  certificate whose identity is NAME        Pools, List, Stats
//	audit token, audit certificate identity     Pools, List, Stats
//
// Configure, SetDraining, Observe and Sweep need an admin principal. A
// known principal used beyond its role is PermissionDenied, with the
// reason, and the ledger is not called.
//
// A router's holder key (package holderkey) is a secret it draws at start:
// the call carries it as metadata holderkey.MetadataKey (the remote backend
// sends it with every holder-scoped call) and the holder id carries the
// key's tag, a hash of it. A router call that sends no key, a malformed
// one, or a key the holder id was not derived from (holderkey.Verify, in
// constant time) is PermissionDenied. Holder ids are public (List, the
// audit), keys are not, so a router credential, even one every replica
// shares, reaches only the holder ids of its own session; and the ledger
// refuses a lease reference whose holder does not own the lease
// (ErrNotHolder), so only that session's leases. The check needs nothing
// but the call, so reservers in front of one store agree without sharing
// state. A certificate identity that is not an admin or audit identity
// and is not a usable router name (it contains '/', a space or a control
// character) is PermissionDenied.
//
// # Hazards
//
// Bearer tokens and holder keys sent over plaintext gRPC can be read on the
// network, and replayed to act for that router's session until it ends:
// serve TLS (grpc.Creds) wherever the path is not trusted. The loopback
// rule trusts the peer address, so a local proxy that forwards remote
// traffic would pass it; configure a token or a client CA in any such
// setup. Every certificate the client CA signs is a principal — at least a
// router — so use a CA dedicated to the reserver's clients, and issue a
// router's certificate with its name as the first DNS SAN. An admin
// credential needs no holder key and can act for any holder: keep it off
// routers. Config.ClientCerts must match the transport: the Server does not
// configure TLS, it only reads what the handshake verified. The Server
// holds no goroutines and does not own the ledger: whoever made the ledger
// closes it.
package rpc
