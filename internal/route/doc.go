// Package route owns the router's HTTP proxy: the OpenAI-compatible front
// (POST /v1/chat/completions and /v1/completions, streaming and not; GET
// /v1/models, /healthz, /readyz, /metrics) that leases capacity from the
// shared ledger before it dispatches a request to an engine.
//
// # A request's way through
//
//  1. Authenticate: Authorization: Bearer <key> names the tenant
//     (fleet.TenantForKey); no or unknown key is 401.
//  2. Validate (request.go): JSON object, model, messages or prompt,
//     max_tokens (1..the pool's context length, see below), n (1..MaxN),
//     stream options, priority class (internal/tenancy: X-Priority, else the
//     body's "priority", else the tenant's or fleet's default; one the tenant
//     may not use is 403 or clamped). Every refusal is a 4xx, before any lease.
//  3. Estimate (internal/estimate): KV tokens = (prompt + output reservation) × n,
//     slots = n. The prompt is estimated from its bytes with a ratio
//     calibrated from engines' reported usage, or, with
//     --prompt-tokens=tokenize, counted exactly by an engine of the pool
//     (vLLM's POST /tokenize, bounded by --tokenize-timeout; tokenize.go
//     here, estimate.Tokenize),
//     falling back to the estimate, counted in
//     leasehold_router_tokenize_errors_total, when that call fails. The
//     count is known before any lease is taken. An exact count (token ids,
//     or tokenized) that with max_tokens exceeds the pool's largest context
//     is refused with 400 context_length_exceeded: no engine could serve
//     it. An estimate is never refused for its size; the engine judges.
//     Images, audio and video in chat content add the pool's media_tokens
//     per item (a floor, raised to what engines report; estimate.Media), in
//     both modes: /tokenize counts their placeholders only.
//  4. Rank (rank.go, internal/rank), at every attempt: health first
//     (internal/enginehealth), then free capacity in this router's view
//     (its own leases and the fleet view's totals), estimated TTFT and
//     prompt-prefix affinity; a class's ttft_slo keeps only engines that
//     can still meet it (internal/ttft), else 503 ttft_slo, no lease.
//  5. Acquire once over the ranked candidates (lease.Manager, which carves
//     the request out of a block lease when --block-lease-kv is set; or
//     the local baseline, internal/baseline). Capacity rejections wait their turn in a
//     bounded per-pool queue (internal/waitq: by class, then fair between tenants),
//     turns handed out by this router's releases and a poll that finds the pool's totals
//     lower; the final rejection is 503 (capacity) or 429 (tenant quota, queue bound) with a jittered Retry-After and the reason as code;
//     ReasonTooLarge is 400. A ledger that cannot confirm a grant (fenced,
//     unreachable) is 503 ledger_unavailable: fail-closed.
//  6. Dispatch (proxy.go): proxy to the granted engine, streaming with
//     flushes; when streaming, stream_options.include_usage is injected so
//     the actual usage is known (and its chunk dropped if the client did
//     not ask). Dispatch selects on the lease's Done: a fenced or lost lease
//     cancels the upstream request and ends the client's answer with an
//     error. The lease is released once, with the actual usage, on every
//     way out, under its own bounded context. In an elastic pool the lease
//     first reserves the learned completion length (estimate.Learned, fed
//     by the fleet view's Stats polls) and a streamed answer grows it ahead
//     of its output (lease.Growing). The release carries the dispatch's
//     outcome (internal/failover); one that failed before any byte reached
//     the client goes back to steps 4 and 5 without the failed engines,
//     at most --failover-attempts times, the pool's first_byte_timeout
//     bounding each wait for the engine's headers.
//
// The statuses and codes of every error are one table, toAPIError
// (errors.go).
//
// # Configuring the ledger
//
// In ledger admission the router configures its pools itself (internal/fleetapply),
// as the reserver does: with the engines whose capacity is known
// (fleet.PartialPoolSpec), adding a waiting engine once its metrics report
// one; only configured engines are candidates. Start does not wait for the
// ledger: failures are retried with backoff while the router serves,
// unready. A new epoch or a wiped store re-applies the fleet.
//
// # Context lengths
//
// Each pool has its own context length (estimate.ContextLens): the fleet file's
// pools[].max_model_len, else what its engines report (vLLM and SGLang:
// GET /v1/models max_model_len; TGI: GET /info max_total_tokens), else
// --max-model-len. max_tokens is bounded by the smallest an engine
// reported; a request without max_tokens reserves the largest, an engine
// that has not reported counting as --max-model-len, so a lease is never
// smaller than what the granted engine may hold. The engines are asked in
// the fleet applier's rounds, before the pool is configured (local
// admission: once, at start).
//
// # Admission modes
//
// "ledger" (the default) is Leasehold. "local" is the BASELINE of today's
// routers, kept only to measure the gap: each router admits against the
// last scrape of the engines' metrics plus its own dispatches since, with
// nothing shared, so N routers over-admit (internal/baseline). It logs a
// warning at start.
//
// # Not here
//
// The ledger's semantics (internal/ledger), holder sessions, renewal and
// fencing (internal/lease), and reconciliation from telemetry (the
// reserver) are not this package's; nor are block leases (lease.Manager
// with Config.Block, sized by --block-lease-kv and --block-lease-slots:
// the router only passes the sizes on), token estimation
// (internal/estimate) or the baseline admitter (internal/baseline).
// Batches of several prompts in one completions request are refused.
package route
