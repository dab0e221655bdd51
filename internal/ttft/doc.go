// Package ttft is the router's time-to-first-token estimate per engine and
// the per-class TTFT objectives it admits against
// (docs/design.md, "Admitting on latency").
//
// It owns:
//
//   - The estimate (estimator.go): for a request of P prompt tokens on
//     engine E, the prefill work queued ahead of it on E (this router's
//     own dispatches not past their first token, exactly; other routers'
//     from the ledger's lease count and the engine's reported waiting
//     queue, read from the fleet view's polls), plus P, through a line
//     learned per engine (fit.go): overhead + work / rate.
//   - Learning: every streamed dispatch's time from the request being sent
//     to its first chunk with output (Inflight.FirstToken) is a sample of
//     that line, fitted by exponentially weighted least squares with
//     outliers clipped. An engine starts from a prior rate: its own
//     metrics' (Seed, ParseSeed: vLLM and SGLang TTFT histograms over
//     prompt tokens, TGI queue and prefill times), else DefaultRate.
//   - The objectives (slo.go): Admissible keeps the candidates that can
//     still meet the class's ttft_slo and says until when; none left is a
//     refusal with ReasonSLO before any lease is taken. Breached tells the
//     dispatch code when an observed TTFT is an SLO breach, evidence for
//     the engine's circuit breaker (ledger.OutcomeTTFTBreach).
//   - Its metrics (metrics.go): leasehold_router_ttft_estimate_seconds and
//     the prefill rate per engine, the estimate's relative error
//     (leasehold_router_ttft_estimate_error_ratio) and the client-side TTFT
//     per class (leasehold_router_ttft_seconds), collected into the
//     router's registry.
//
// What it does not do: it never admits or refuses capacity (the ledger
// does), and its figures are one router's: other routers' load reaches it
// only through the ledger's lease counts and the engines' telemetry, a
// poll late. Prefix caching, chunked prefill and batch interference are
// not modelled, only learned on average; a non-streamed request teaches
// nothing (its first token is not seen). The estimate orders and filters
// candidates; it is not a bound.
package ttft
