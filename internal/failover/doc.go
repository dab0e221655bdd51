// Package failover owns what one dispatch of a request to an engine came
// to, and whether the request may go on to another engine.
//
// # Outcomes
//
// Attempt holds what the router saw of one dispatch (the engine's status,
// the transport error, whether the first-byte bound passed, whether the
// router or the client ended it); Attempt.Outcome names it as the circuit
// breaker's evidence (ledger.Outcome, reported with the lease's Release):
//
//	engine status >= 500                                   status_5xx
//	headers came (status < 500), then the connection broke reset
//	first token later than the class's ttft_slo            ttft_slo_breach
//	headers came (status < 500), answer read or cut by us  ok
//	no byte within the pool's first_byte_timeout           first_byte_timeout
//	before the headers: client gone, lease ended, deadline none
//	the connection could not be made (dial, DNS, TLS)      connect_error
//	any other transport error before the headers           reset
//	never sent (the router refused it)                     none
//
// "Cut by us" is the client leaving, the lease fenced, lost or revoked, or
// the request's deadline: none of these is the engine's fault, and an
// engine that had started to answer was healthy as far as this dispatch
// shows.
//
// # Failing over
//
// A dispatch whose outcome is connect_error, reset, first_byte_timeout, or
// status_5xx with status 500, 502, 503 or 504 may go to another engine,
// but only while nothing of it has been written to the client (the caller
// knows: a streamed answer's headers and chunks are written as they come,
// a whole answer only once it is read). 500 is included: an engine whose
// inference loop died answers it to everything (vLLM's EngineDeadError);
// a request that itself provokes 500 is then tried on at most
// --failover-attempts engines, one failure of evidence on each. 501, 505
// and the rest are answers about the request, passed through.
//
// Each attempt acquires its own lease under its own request id
// (RequestID): the first the request's base id, attempt n "<base>#n". A
// transport retry of one attempt's Acquire replays that attempt's grant
// (the ledger's idempotency on holder and request id), and no attempt can
// be handed an earlier attempt's lease: that one may still be in the
// ledger (released after --abort-grace, or a release retried in the
// background), and a replay of it would put a second request on capacity
// counted once.
//
// # First byte
//
// FirstByte bounds the wait for an engine's response headers: when the
// bound passes first it cancels the dispatch with ErrFirstByteTimeout. A
// streamed answer's headers come before its first token; a non-streamed
// answer's come with the whole answer, so a pool's first_byte_timeout must
// exceed its longest non-streamed generation.
//
// # Not here
//
// The attempt loop itself, acquiring and answering, is the router's
// (internal/route); the breaker that weighs the evidence is the ledger's
// (internal/ledger, breaker.go).
package failover
