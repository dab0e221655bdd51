// Package telemetry reads what GPU engines report about themselves and feeds
// it to the ledger for reconciliation (docs/design.md, Guarantee 7).
//
// It owns three things:
//
//   - Parse: one engine /metrics scrape (Prometheus text format) of vLLM V1,
//     SGLang or TGI, reduced to a Sample: KV tokens used and total, running
//     and waiting requests. A quantity the format does not reveal is left
//     out of Sample.Known rather than guessed, and a metric the format must
//     carry but the scrape lacks is an error (ErrMissingMetric), never zero
//     load.
//   - Scraper: one bounded HTTP GET of a metrics URL (timeout, size limit,
//     injected client) returning the Sample and the time it was taken.
//   - Reconciler: a loop that scrapes every configured engine on an interval
//     with bounded concurrency, calls Ledger.Observe with each successful
//     sample, and tracks each engine's last success so stale telemetry is
//     visible. A failed scrape observes nothing: the ledger's own staleness
//     rule (EngineSpec.StaleAfter and StalePolicy) then applies.
//
// What each format's metrics mean, and the figures the tests check, are
// written next to the parser of each format (parse.go) and in
// testdata/README.md (a copy of the shared engine fixtures).
package telemetry
