// Package oaihttp is the router's OpenAI-shaped HTTP edge apart from
// inference itself: how an error is written (the JSON body every OpenAI
// SDK parses, and a jittered Retry-After), the x-request-id every answer
// carries, the model endpoints (GET /v1/models, GET /v1/models/{model}),
// and the JSON answer to a path or a method the router does not serve.
//
// It owns the wire shapes only: which error a request earns, and the one
// table of statuses and codes, stay in internal/route (toAPIError); which
// models a tenant sees is the caller's to say. No I/O but the
// ResponseWriter; safe for concurrent use.
//
// Request ids: a client's X-Request-Id is kept when it is sane (1 to 128
// bytes of letters, digits and ._:+=@/-), so a caller's or a proxy's id
// follows the request to the engine and back; any other value, or none,
// is replaced by a fresh "req_" and 32 hex digits. The request's header is
// rewritten too: what the handler forwards upstream is what the client
// was answered with.
package oaihttp
