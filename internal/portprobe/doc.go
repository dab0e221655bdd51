// Package portprobe tells which of a reserver's two listeners an address
// is, for a command-line client that got a transport error: the gRPC
// ledger service (HTTP/2 with prior knowledge, whose server speaks first
// with a SETTINGS frame) or the HTTP side (HTTP/1.1: /v1/audit, /metrics,
// the probes). A client pointed at the other one fails with an error only
// a protocol engineer reads (`malformed HTTP response "\x00\x00\x06\x04…"`,
// `http2: frame too large, note that the frame header looked like an
// HTTP/1.1 header`); with Probe it can say which flag to use instead.
//
// Probe only reads what the address answers to one HTTP/1.1 GET of
// /healthz on a plaintext connection, bounded by its context and at most
// 2 s; it sends no credential. A TLS HTTP server answers that with an
// HTTP/1.x 400, so it is still HTTP1; a TLS gRPC server closes, and
// anything else that does not answer in time is Unknown: the caller then
// keeps its own error.
package portprobe
