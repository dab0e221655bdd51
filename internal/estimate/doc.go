// Package estimate owns what the router leases for a request before it
// knows what the engine will use: the KV tokens and slots of a request
// (Estimator, estimate.go), its images, audio and video (Media, media.go),
// each pool's context-length bounds (ContextLens, contextlen.go) and the
// exact prompt count an engine's POST /tokenize gives (Tokenize,
// tokenize.go).
//
// Every estimate errs high: an underestimate lets an engine hold more than
// was leased, so each file states where it can still undershoot. The
// estimators calibrate online from what engines report (usage and
// /tokenize counts); they are safe for concurrent use.
//
// Not here: parsing a request into a Prompt, the metrics, and when a call
// is made (internal/route); the ledger's admission (internal/ledger).
package estimate
