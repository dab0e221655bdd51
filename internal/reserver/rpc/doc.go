// Package rpc is the reserver's gRPC ledger service: it serves any
// ledger.Ledger as the leasehold.v1.Ledger service (proto/leasehold/v1),
// authenticating every call and limiting what each token may do. The wire
// form and the error table live in the wire subpackage, shared with the
// remote backend (internal/ledger/remote).
//
// # Authentication and authorization
//
// A caller sends metadata "authorization: Bearer <token>". Tokens have roles:
//
//	shared token (LEASEHOLD_TOKEN), admin tokens   every method, any holder
//	per-router token of router NAME                KeepAlive, Acquire, Renew, Resize, Release,
//	                                               Reassert for holder NAME or NAME/...; Pools, List, Stats
//	audit tokens                                   Pools, List, Stats
//
// Configure, SetDraining, Observe and Sweep need the shared or an admin
// token. A missing or unknown token is Unauthenticated; a known token used
// beyond its role is PermissionDenied and the ledger is not called. The
// ledger itself refuses a lease reference whose holder does not own the lease
// (ErrNotHolder), so a router confined to its own holder ids can touch only
// its own leases.
//
// With no token configured at all the server serves loopback peers only
// (with every right) and refuses any other peer with PermissionDenied,
// saying why. Tokens are compared in constant time and never logged or
// echoed in errors.
//
// # Hazards
//
// Bearer tokens sent over plaintext gRPC can be read on the network: serve
// TLS (grpc.Creds) wherever the path is not trusted. The loopback rule trusts
// the peer address, so a local proxy that forwards remote traffic would pass
// it; configure a token in any such setup. The Server holds no goroutines and
// does not own the ledger: whoever made the ledger closes it.
package rpc
