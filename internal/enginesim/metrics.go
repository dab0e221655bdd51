package enginesim

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/internal/telemetry"
)

// /metrics in the engine's format, following the fixtures in
// /work/shared/fixtures/engines (internal/telemetry/testdata): the families
// Leasehold reads, with the label sets and number formatting of each engine,
// plus the main token and request counters. Latency histograms are left out.
//
//   - vLLM V1: gauges num_requests_running/waiting (sequences) and
//     kv_cache_usage_perc (used ÷ total blocks); cache_config_info with
//     block_size and num_gpu_blocks; counters with their _created gauges.
//     Labels engine="0", model_name; numbers as prometheus_client prints
//     them (24.0, 4.8213504e+07).
//   - SGLang: scheduler gauges with engine_type/model_name/moe_ep_rank/
//     pp_rank/tp_rank; num_used_tokens is blocks held × block size (SGLang
//     with --page-size equal to the block size); tokenizer counters carry
//     model_name only. No _created (multiprocess mode).
//   - TGI: unlabeled counters without _total, then gauges; a blank line
//     after each family; tgi_batch_current_max_tokens is what TGI's v3
//     queue would have reserved for the running sequences: (prompt +
//     max_tokens) rounded up to whole blocks each.

// metricsState is what /metrics reports, read under Engine.mu.
type metricsState struct {
	running, waiting   int
	usedBlocks, blocks int
	reserved           int64 // TGI: Σ blocks(prompt + max_tokens) × block size of running
	c                  counters
}

func (e *Engine) metricsState() metricsState {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := metricsState{
		running: len(e.running), waiting: len(e.waiting),
		usedBlocks: e.numBlocks - e.free, blocks: e.numBlocks, c: e.st.counters,
	}
	for _, s := range e.running {
		m.reserved += int64(e.blocksFor(s.req.prompt+s.req.maxTokens)) * int64(e.cfg.BlockSize)
	}
	return m
}

func (e *Engine) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	if f, _ := e.faults(); f.MetricsOff {
		http.Error(w, "metrics unavailable (injected failure)", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(e.Metrics())
}

// Metrics renders /metrics in the configured format.
func (e *Engine) Metrics() []byte {
	m := e.metricsState()
	var b bytes.Buffer
	switch e.cfg.Format {
	case telemetry.FormatSGLang:
		e.sglangMetrics(&b, m)
	case telemetry.FormatTGI:
		e.tgiMetrics(&b, m)
	default:
		e.vllmMetrics(&b, m)
	}
	return b.Bytes()
}

// labels renders a label set; pairs are name, value, name, value, ...
func labels(pairs ...string) string {
	if len(pairs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i+1 < len(pairs); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(pairs[i])
		b.WriteString(`="`)
		b.WriteString(escapeLabel(pairs[i+1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// pyFloat formats v as prometheus_client's floatToGoString does: Python's
// repr, with a Go-style exponent once there are more than six digits
// before the point.
func pyFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	var s string
	if v == math.Trunc(v) && math.Abs(v) < 1e16 {
		s = strconv.FormatFloat(v, 'f', -1, 64) + ".0"
	} else {
		s = strconv.FormatFloat(v, 'g', -1, 64)
		if strings.ContainsAny(s, "e") || v >= 1e16 {
			// Python repr switches to exponents at 1e16 and below 1e-4,
			// and writes e+16 / e-05 like Go.
			return s
		}
	}
	dot := strings.IndexByte(s, '.')
	if v > 0 && dot > 6 {
		mant := strings.TrimRight(s[:1]+"."+s[1:dot]+s[dot+1:], "0.")
		return fmt.Sprintf("%se+0%d", mant, dot-1)
	}
	return s
}

// family writes a HELP/TYPE header.
func family(b *bytes.Buffer, name, typ, help string) {
	if help != "" {
		fmt.Fprintf(b, "# HELP %s %s\n", name, help)
	}
	fmt.Fprintf(b, "# TYPE %s %s\n", name, typ)
}

func (e *Engine) vllmMetrics(b *bytes.Buffer, m metricsState) {
	base := []string{"engine", "0", "model_name", e.cfg.Model}
	created := pyFloat(float64(e.started.UnixNano()) / 1e9)
	gauge := func(name, help string, v float64) {
		family(b, name, "gauge", help)
		fmt.Fprintf(b, "%s%s %s\n", name, labels(base...), pyFloat(v))
	}
	counter := func(name, help string, v int64) {
		family(b, name+"_total", "counter", help)
		fmt.Fprintf(b, "%s_total%s %s\n", name, labels(base...), pyFloat(float64(v)))
		family(b, name+"_created", "gauge", help)
		fmt.Fprintf(b, "%s_created%s %s\n", name, labels(base...), created)
	}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", float64(m.running))
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", float64(m.waiting))
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", float64(m.usedBlocks)/float64(m.blocks))
	counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", m.c.promptTokens)
	counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", 0)
	counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", m.c.preemptions)
	counter("vllm:prompt_tokens", "Number of prefill tokens processed.", m.c.promptTokens)
	counter("vllm:generation_tokens", "Number of generation tokens processed.", m.c.generationTokens)
	reasons := []struct {
		r string
		v int64
	}{{finishStop, m.c.finishStop}, {finishLength, m.c.finishLength}, {finishAbort, m.c.finishAbort}}
	const successHelp = "Count of successfully processed requests."
	family(b, "vllm:request_success_total", "counter", successHelp)
	for _, r := range reasons {
		fmt.Fprintf(b, "vllm:request_success_total%s %s\n", labels("engine", "0", "finished_reason", r.r, "model_name", e.cfg.Model), pyFloat(float64(r.v)))
	}
	family(b, "vllm:request_success_created", "gauge", successHelp)
	for _, r := range reasons {
		fmt.Fprintf(b, "vllm:request_success_created%s %s\n", labels("engine", "0", "finished_reason", r.r, "model_name", e.cfg.Model), created)
	}
	family(b, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
	fmt.Fprintf(b, "vllm:cache_config_info%s 1.0\n", labels(
		"block_size", strconv.Itoa(e.cfg.BlockSize), "cache_dtype", "auto", "enable_prefix_caching", "False",
		"engine", "0", "gpu_memory_utilization", "0.9", "num_cpu_blocks", "0",
		"num_gpu_blocks", strconv.Itoa(m.blocks), "num_gpu_blocks_override", "None", "sliding_window", "None"))
}

func (e *Engine) sglangMetrics(b *bytes.Buffer, m metricsState) {
	tok := []string{"model_name", e.cfg.Model}
	sched := []string{"engine_type", "unified", "model_name", e.cfg.Model, "moe_ep_rank", "0", "pp_rank", "0", "tp_rank", "0"}
	one := func(name, typ, help string, lbl []string, v float64) {
		family(b, name, typ, help)
		fmt.Fprintf(b, "%s%s %s\n", name, labels(lbl...), pyFloat(v))
	}
	bs := float64(e.cfg.BlockSize)
	used := float64(m.usedBlocks) * bs
	total := float64(m.blocks) * bs
	one("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.", tok, float64(m.c.promptTokens))
	one("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.", tok, float64(m.c.generationTokens))
	one("sglang:cached_tokens_total", "counter", "Number of cached prompt tokens.", tok, 0)
	one("sglang:num_requests_total", "counter", "Number of requests processed.", tok, float64(m.c.completed+m.c.aborted+m.c.failed))
	one("sglang:num_aborted_requests_total", "counter", "Number of requests aborted.", tok, float64(m.c.aborted+m.c.failed))
	one("sglang:num_retracted_requests_total", "counter", "Total number of retracted requests.", sched, float64(m.c.preemptions))
	one("sglang:num_running_reqs", "gauge", "The number of running requests.", sched, float64(m.running))
	one("sglang:num_used_tokens", "gauge", "The number of used tokens.", sched, used)
	one("sglang:token_usage", "gauge", "The token usage.", sched, math.Round(used/total*100)/100)
	one("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", sched, float64(m.waiting))
	one("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", sched, 0)
	one("sglang:max_total_num_tokens", "gauge", "Maximum total number of tokens in the KV cache pool.", sched, total)
}

func (e *Engine) tgiMetrics(b *bytes.Buffer, m metricsState) {
	rust := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	one := func(name, typ, help string, v string) {
		family(b, name, typ, help)
		fmt.Fprintf(b, "%s %s\n\n", name, v)
	}
	// Counters first, then gauges, as metrics-exporter-prometheus renders.
	one("tgi_request_count", "counter", "Total number of requests", strconv.FormatInt(m.c.accepted, 10))
	one("tgi_request_success", "counter", "Number of successful requests", strconv.FormatInt(m.c.completed, 10))
	family(b, "tgi_request_failure", "counter", "")
	fmt.Fprintf(b, "tgi_request_failure{err=\"dropped\"} %d\n\n", m.c.aborted+m.c.failed)
	one("tgi_queue_size", "gauge", "Current queue size", rust(float64(m.waiting)))
	one("tgi_batch_current_size", "gauge", "Current batch size", rust(float64(m.running)))
	one("tgi_batch_current_max_tokens", "gauge", "Maximum tokens for the current batch", rust(float64(m.reserved)))
	one("tgi_batch_max_total_tokens", "gauge", "", rust(float64(m.blocks)*float64(e.cfg.BlockSize)))
}
