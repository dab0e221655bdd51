// Package wire owns the wire form of the ledger shared by the reserver's
// gRPC server (the reserver's rpc package) and the remote backend
// (internal/ledger/remote): conversions between the ledger package's types
// and the leaseholdv1 messages, and the one table that maps ledger errors to
// gRPC status codes and back.
//
// Both directions live here so they cannot drift: whatever the server
// encodes, the client decodes to the same value, the same sentinel
// (errors.Is holds through the wire) or the same *ledger.Rejection.
//
// Times cross as google.protobuf.Timestamp (unset is the zero time) and
// durations as google.protobuf.Duration (unset is zero); both are exact to
// the nanosecond, and decoded times are in UTC.
package wire
