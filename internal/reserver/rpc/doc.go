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
//	principal                                         may call
//	shared token (LEASEHOLD_TOKEN), admin token,      every method, any holder
//	  admin certificate identity
//	router NAME: its per-router token, or a           KeepAlive, Acquire, Renew, Resize, Grow,
//	  certificate whose identity is NAME              Release, Reassert for holder NAME or NAME/...;
//	                                                  Pools, List, Stats
//	audit token, audit certificate identity           Pools, List, Stats
//
// Configure, SetDraining, Observe and Sweep need an admin principal. A
// known principal used beyond its role is PermissionDenied and the ledger
// is not called. The ledger itself refuses a lease reference whose holder
// does not own the lease (ErrNotHolder), so a router confined to its own
// holder ids can touch only its own leases. A certificate identity that is
// not an admin or audit identity and is not a usable router name (it
// contains '/', a space or a control character) is PermissionDenied.
//
// # Hazards
//
// Bearer tokens sent over plaintext gRPC can be read on the network: serve
// TLS (grpc.Creds) wherever the path is not trusted. The loopback rule trusts
// the peer address, so a local proxy that forwards remote traffic would pass
// it; configure a token or a client CA in any such setup. Every certificate
// the client CA signs is a principal — at least a router — so use a CA
// dedicated to the reserver's clients, and issue a router's certificate with
// its name as the first DNS SAN: two routers given the same name can touch
// each other's leases. Config.ClientCerts must match the transport: the
// Server does not configure TLS, it only reads what the handshake verified.
// The Server holds no goroutines and does not own the ledger: whoever made
// the ledger closes it.
package rpc
