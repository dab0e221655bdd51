// Package enginesim is a simulated GPU inference engine for tests, demos and
// benchmarks: an OpenAI-compatible HTTP server in front of a KV-cache model
// shaped like vLLM's scheduler, reporting itself in vLLM V1, SGLang or TGI
// /metrics format, and keeping the ground truth Leasehold's safety checks
// compare against.
//
// # What it owns
//
//   - The KV-cache model (engine.go): capacity is whole blocks of
//     Config.BlockSize tokens (there is no reserved null block, so capacity
//     is exactly num_gpu_blocks × block_size). A sequence gets the blocks
//     for its prompt when it is admitted and one more block every
//     block_size generated tokens. At most Config.Slots sequences run; the
//     rest wait in one FIFO queue, and the head of the queue blocks those
//     behind it. When a running sequence needs a block and none is free,
//     the newest running sequence is preempted: its blocks are freed and it
//     goes back to the front of the queue to be recomputed (prompt plus the
//     tokens it already produced) when it is admitted again. A request with
//     n > 1 is n sequences, as in vLLM.
//   - Time: one scheduler goroutine runs decode steps on the real clock.
//     A step is 1/DecodeTokensPerSec simulated seconds and gives every
//     running sequence one token; a prefill of P tokens takes
//     P/PrefillTokensPerSec (at least one step) and ends with the first
//     token. Simulated time runs Config.Speed times faster than the wall
//     clock.
//   - The tokenizer approximation (tokenizer.go), used by vLLM's POST
//     /tokenize and by usage alike: close to bytes/4 on English, well above
//     it on CJK, emoji and punctuation.
//   - Media (Config.MediaTokens, --media-tokens): each image, audio clip
//     or video part of a chat request takes that many prompt tokens, as a
//     multimodal processor expands it, reported per kind in
//     usage.prompt_tokens_details as vLLM does with
//     --enable-prompt-tokens-details; /tokenize counts only a placeholder
//     per item, as vLLM's does. 0 (the default) refuses media with 400, as
//     a text-only model does.
//   - The context length (Config.MaxModelLen), reported as vLLM does in
//     GET /v1/models (max_model_len) and, with format tgi, as TGI does in
//     GET /info (max_total_tokens).
//   - Natural output lengths (Config.OutputDist, --output-dist): a
//     sequence stops after a length drawn deterministically from its key
//     (the request seed or prompt, and the sequence index), uniform in
//     1..2×OutputTokens−1 or lognormal with median OutputTokens and σ
//     OutputSigma (a long tail, as real completions have), then capped by
//     max_tokens and the context.
//   - Ground truth (stats.go): peak KV held, peak running, preemptions,
//     aborts; the admitted demand — the sum over accepted, unfinished
//     requests of (prompt_tokens + max_tokens) × n — with its peak and the
//     time it spent above capacity; and the actual demand — the sum over
//     accepted, unfinished sequences of (prompt_tokens + tokens generated
//     so far), running or waiting — with its peak and the time it spent
//     above capacity. GET /admin/stats, POST /admin/reset.
//   - Fault injection (POST /admin/fail): answer 500 or 503, hang, cut
//     every connection without an answer (reset; crash also drops every
//     request in flight), stop serving metrics, fail /tokenize alone, or
//     drop every request in flight.
//
// # What it does not do
//
// No prefix caching, no chunked prefill, no batching cost (a step takes the
// same time however many sequences run), one data-parallel rank. TGI-format
// metrics are rendered from the same vLLM-like lazy allocator; only the
// reported reservation (tgi_batch_current_max_tokens) follows TGI.
package enginesim
