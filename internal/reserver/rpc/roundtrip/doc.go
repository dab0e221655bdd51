// Package roundtrip tests the remote backend (internal/ledger/remote)
// against the real gRPC server (internal/reserver/rpc) on loopback TCP: the
// shared conformance suite through the wire on memory and Redis ledgers,
// reconnection after a reserver restart, mTLS and closing. The tests live
// here, beside the server, so that no package under internal/ledger imports
// internal/reserver. It has no code of its own.
package roundtrip
