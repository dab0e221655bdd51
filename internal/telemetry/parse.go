package telemetry

// Parsing an engine scrape. Only the handful of families a format needs are
// handed to the Prometheus text parser (expfmt); every other line is
// dropped first, so families we do not know — and anything malformed in
// them — never fail a scrape, and a 100 KB TGI histogram dump costs a line
// scan. Within a family, series are grouped by the format's data-parallel
// label (vLLM "engine", SGLang "dp_rank"): groups are separate KV pools and
// are summed. Series that differ only in other labels (tensor/pipeline/
// expert ranks reporting the same replica) describe one pool and are
// combined conservatively: the largest load and the smallest capacity.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Format is an engine's metrics dialect.
type Format string

// The supported formats.
const (
	FormatVLLM   Format = "vllm"   // vLLM V1 (0.8 and later)
	FormatSGLang Format = "sglang" // SGLang 0.4/0.5 with --enable-metrics
	FormatTGI    Format = "tgi"    // text-generation-inference v3 router
)

// Formats lists every supported Format, the default first.
var Formats = []Format{FormatVLLM, FormatSGLang, FormatTGI}

// DefaultFormat is the format assumed when none is configured.
const DefaultFormat = FormatVLLM

// ParseFormat returns the Format named s ("" is DefaultFormat).
func ParseFormat(s string) (Format, error) {
	if s == "" {
		return DefaultFormat, nil
	}
	if f := Format(s); slices.Contains(Formats, f) {
		return f, nil
	}
	return "", fmt.Errorf("%w: %q, want vllm, sglang or tgi", ErrUnknownFormat, s)
}

// Known says which quantities of a Sample the engine actually reported.
type Known uint8

// Quantities a Sample may know.
const (
	KnownKVUsed Known = 1 << iota
	KnownKVTotal
	KnownRunning
	KnownWaiting
)

// Has reports whether every quantity in q is known.
func (k Known) Has(q Known) bool { return k&q == q }

// String lists the known quantities, e.g. "kv_used|running".
func (k Known) String() string {
	var parts []string
	for _, n := range []struct {
		k Known
		s string
	}{{KnownKVUsed, "kv_used"}, {KnownKVTotal, "kv_total"}, {KnownRunning, "running"}, {KnownWaiting, "waiting"}} {
		if k.Has(n.k) {
			parts = append(parts, n.s)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "|")
}

// Sample is one scrape of one engine, summed over its data-parallel ranks.
// A quantity not in Known is zero and means "not reported", not "idle".
type Sample struct {
	Format Format
	// KVTokensUsed is KV-cache tokens in use (for TGI, reserved: see
	// KVUsedIsReservation).
	KVTokensUsed int64
	// KVTokensTotal is the engine's own KV-cache capacity in tokens, before
	// any headroom; 0 when not in Known.
	KVTokensTotal int64
	// Running and Waiting are requests running and queued.
	Running int64
	Waiting int64
	Known   Known
	// KVUsedIsReservation is set when KVTokensUsed counts tokens the engine
	// reserved up front (prompt + max_new_tokens), not tokens written.
	KVUsedIsReservation bool
	// Ranks is the number of data-parallel groups summed (1 without DP).
	Ranks int
}

// Observation turns s into the ledger's telemetry record.
func (s Sample) Observation(pool ledger.PoolID, engine ledger.EngineID, observedAt time.Time) ledger.Observation {
	return ledger.Observation{
		Pool: pool, Engine: engine,
		KVTokensUsed: s.KVTokensUsed, KVTokensTotal: s.KVTokensTotal,
		Running: s.Running, Waiting: s.Waiting,
		ObservedAt: observedAt,
	}
}

// Errors, checked with errors.Is.
var (
	// ErrUnknownFormat: a format name not in Formats.
	ErrUnknownFormat = errors.New("telemetry: unknown metrics format")
	// ErrMissingMetric: the scrape lacks a metric the format must report.
	ErrMissingMetric = errors.New("telemetry: missing metric")
	// ErrBadMetric: a metric is malformed or out of range.
	ErrBadMetric = errors.New("telemetry: bad metric")
)

// Metric names, per format.
const (
	vllmRunning     = "vllm:num_requests_running"
	vllmWaiting     = "vllm:num_requests_waiting"
	vllmUsage       = "vllm:kv_cache_usage_perc"
	vllmUsageLegacy = "vllm:gpu_cache_usage_perc" // v0.8–v0.10
	vllmCacheConfig = "vllm:cache_config_info"
	vllmDPLabel     = "engine"

	sglangRunning  = "sglang:num_running_reqs"
	sglangWaiting  = "sglang:num_queue_reqs"
	sglangUsed     = "sglang:num_used_tokens"
	sglangTotal    = "sglang:max_total_num_tokens"
	sglangDPLabel  = "dp_rank"
	tgiRunning     = "tgi_batch_current_size"
	tgiWaiting     = "tgi_queue_size"
	tgiReserved    = "tgi_batch_current_max_tokens"
	tgiTotal       = "tgi_batch_max_total_tokens"
	maxMetricsLine = 1 << 20
)

var families = map[Format][]string{
	FormatVLLM:   {vllmRunning, vllmWaiting, vllmUsage, vllmUsageLegacy, vllmCacheConfig},
	FormatSGLang: {sglangRunning, sglangWaiting, sglangUsed, sglangTotal},
	FormatTGI:    {tgiRunning, tgiWaiting, tgiReserved, tgiTotal},
}

// Parse reads one Prometheus text-format scrape of an engine of format f.
// Families the format does not use are skipped unread.
func Parse(f Format, r io.Reader) (Sample, error) {
	want, ok := families[f]
	if !ok {
		return Sample{}, fmt.Errorf("%w: %q", ErrUnknownFormat, f)
	}
	fams, err := readFamilies(r, want)
	if err != nil {
		return Sample{}, fmt.Errorf("parse %s metrics: %w", f, err)
	}
	var s Sample
	switch f {
	case FormatVLLM:
		s, err = fromVLLM(fams)
	case FormatSGLang:
		s, err = fromSGLang(fams)
	case FormatTGI:
		s, err = fromTGI(fams)
	}
	if err != nil {
		return Sample{}, fmt.Errorf("parse %s metrics: %w", f, err)
	}
	s.Format = f
	return s, nil
}

// readFamilies keeps the lines of the wanted families and parses them.
func readFamilies(r io.Reader, want []string) (map[string]*dto.MetricFamily, error) {
	keep := make(map[string]bool, len(want))
	for _, w := range want {
		keep[w] = true
	}
	var buf bytes.Buffer
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxMetricsLine)
	for sc.Scan() {
		line := sc.Bytes()
		if keep[lineFamily(line)] {
			buf.Write(line)
			buf.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(&buf)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadMetric, err)
	}
	return fams, nil
}

// lineFamily returns the metric name a text-format line is about: the name
// of a sample, or the subject of a HELP or TYPE comment. Other lines
// (blank, plain comments) return "".
func lineFamily(line []byte) string {
	line = bytes.TrimLeft(line, " \t")
	if len(line) > 0 && line[0] == '#' {
		rest := bytes.TrimLeft(line[1:], " \t")
		kw, rest, ok := bytes.Cut(rest, []byte{' '})
		if !ok || (string(kw) != "HELP" && string(kw) != "TYPE") {
			return ""
		}
		rest = bytes.TrimLeft(rest, " \t")
		name, _, _ := bytes.Cut(rest, []byte{' '})
		return string(name)
	}
	end := bytes.IndexAny(line, "{ \t")
	if end < 0 {
		return ""
	}
	return string(line[:end])
}

// series is one family's samples, reduced per data-parallel group.
type series struct {
	name   string
	groups map[string]float64 // DP label value → combined value
	labels map[string]map[string]string
}

// combine says how series of one DP group are merged.
type combine int

const (
	takeMax combine = iota // load: the largest report
	takeMin                // capacity: the smallest report
)

// collect reads family name into per-group values; ok is false when the
// family is absent or has no samples.
func collect(fams map[string]*dto.MetricFamily, name, dpLabel string, how combine) (series, bool, error) {
	s := series{name: name, groups: map[string]float64{}, labels: map[string]map[string]string{}}
	mf := fams[name]
	if mf == nil || len(mf.GetMetric()) == 0 {
		return s, false, nil
	}
	for _, m := range mf.GetMetric() {
		var v float64
		switch {
		case m.GetGauge() != nil:
			v = m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			v = m.GetUntyped().GetValue()
		case m.GetCounter() != nil:
			v = m.GetCounter().GetValue()
		default:
			return s, false, fmt.Errorf("%w: %s has type %s, want gauge", ErrBadMetric, name, mf.GetType())
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return s, false, fmt.Errorf("%w: %s = %v, want a finite value >= 0", ErrBadMetric, name, v)
		}
		lbl := map[string]string{}
		for _, lp := range m.GetLabel() {
			lbl[lp.GetName()] = lp.GetValue()
		}
		g := lbl[dpLabel]
		old, seen := s.groups[g]
		switch {
		case !seen:
		case how == takeMax:
			v = max(old, v)
		default:
			v = min(old, v)
		}
		s.groups[g] = v
		s.labels[g] = lbl
	}
	return s, true, nil
}

func require(fams map[string]*dto.MetricFamily, name, dpLabel string, how combine, hint string) (series, error) {
	s, ok, err := collect(fams, name, dpLabel, how)
	if err != nil {
		return s, err
	}
	if !ok {
		return s, fmt.Errorf("%w: %s (%s)", ErrMissingMetric, name, hint)
	}
	return s, nil
}

// count converts a metric value to a whole number in the ledger's range.
func count(name string, v float64) (int64, error) {
	r := math.Round(v)
	if r > float64(ledger.MaxAmount) {
		return 0, fmt.Errorf("%w: %s = %v, more than %d", ErrBadMetric, name, v, ledger.MaxAmount)
	}
	return int64(r), nil
}

// sum adds a series' groups as whole numbers.
func (s series) sum() (int64, error) {
	var t int64
	for _, v := range s.groups {
		n, err := count(s.name, v)
		if err != nil {
			return 0, err
		}
		if t += n; t > ledger.MaxAmount {
			return 0, fmt.Errorf("%w: %s sums to more than %d", ErrBadMetric, s.name, ledger.MaxAmount)
		}
	}
	return t, nil
}

// fromVLLM reads a vLLM V1 scrape.
//
//   - Running, Waiting: vllm:num_requests_running, vllm:num_requests_waiting.
//   - KVTokensTotal: per engine, the cache_config_info label
//     kv_cache_size_tokens when present (group-aware, recent vLLM), else
//     num_gpu_blocks × block_size (exact for single-group models only;
//     includes the reserved null block).
//   - KVTokensUsed: per engine, vllm:kv_cache_usage_perc (falling back to
//     vllm:gpu_cache_usage_perc before v0.9) × num_gpu_blocks rounded to a
//     whole block, × block_size; with kv_cache_size_tokens, perc × that.
//     Usage counts blocks held by running requests plus the null block;
//     prefix-cache blocks no request holds count as free. Releases whose
//     get_usage divides by num_gpu_blocks − 1 round to one block less.
//
// Engines (the "engine" label, one per data-parallel rank) are summed.
func fromVLLM(fams map[string]*dto.MetricFamily) (Sample, error) {
	s := Sample{Known: KnownKVUsed | KnownKVTotal | KnownRunning | KnownWaiting}
	running, err := require(fams, vllmRunning, vllmDPLabel, takeMax, "running requests")
	if err != nil {
		return s, err
	}
	waiting, err := require(fams, vllmWaiting, vllmDPLabel, takeMax, "waiting requests")
	if err != nil {
		return s, err
	}
	usage, ok, err := collect(fams, vllmUsage, vllmDPLabel, takeMax)
	if err == nil && !ok {
		usage, ok, err = collect(fams, vllmUsageLegacy, vllmDPLabel, takeMax)
	}
	if err != nil {
		return s, err
	}
	if !ok {
		return s, fmt.Errorf("%w: %s (or %s before v0.9): KV-cache usage", ErrMissingMetric, vllmUsage, vllmUsageLegacy)
	}
	cfg, err := require(fams, vllmCacheConfig, vllmDPLabel, takeMax, "its num_gpu_blocks and block_size labels give KV capacity")
	if err != nil {
		return s, err
	}
	if s.Running, err = running.sum(); err != nil {
		return s, err
	}
	if s.Waiting, err = waiting.sum(); err != nil {
		return s, err
	}
	for _, g := range slices.Sorted(maps.Keys(usage.groups)) {
		perc := usage.groups[g]
		if perc > 1 {
			return s, fmt.Errorf("%w: %s{engine=%q} = %v, want 0..1", ErrBadMetric, usage.name, g, perc)
		}
		lbl, ok := cfg.labels[g]
		if !ok {
			lbl, ok = cfg.labels[""] // one config for every engine
		}
		if !ok {
			return s, fmt.Errorf("%w: %s{engine=%q}: engine %q reports KV usage but no cache config", ErrMissingMetric, vllmCacheConfig, g, g)
		}
		used, total, err := vllmTokens(g, perc, lbl)
		if err != nil {
			return s, err
		}
		s.KVTokensUsed += used
		s.KVTokensTotal += total
		s.Ranks++
		if s.KVTokensTotal > ledger.MaxAmount {
			return s, fmt.Errorf("%w: KV capacity sums to more than %d", ErrBadMetric, ledger.MaxAmount)
		}
	}
	return s, nil
}

// vllmTokens converts one engine's usage fraction to tokens.
func vllmTokens(engine string, perc float64, lbl map[string]string) (used, total int64, err error) {
	label := func(name string) (int64, bool, error) {
		v, ok := lbl[name]
		if !ok || v == "None" {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n > ledger.MaxAmount {
			return 0, false, fmt.Errorf("%w: %s{engine=%q} label %s=%q, want an integer 1..%d", ErrBadMetric, vllmCacheConfig, engine, name, v, ledger.MaxAmount)
		}
		return n, true, nil
	}
	if size, ok, err := label("kv_cache_size_tokens"); err != nil {
		return 0, 0, err
	} else if ok {
		return int64(math.Round(perc * float64(size))), size, nil
	}
	blocks, okB, err := label("num_gpu_blocks")
	if err != nil {
		return 0, 0, err
	}
	bs, okS, err := label("block_size")
	if err != nil {
		return 0, 0, err
	}
	if !okB || !okS {
		return 0, 0, fmt.Errorf("%w: %s{engine=%q} lacks num_gpu_blocks or block_size (KV capacity unknown)", ErrMissingMetric, vllmCacheConfig, engine)
	}
	if blocks > ledger.MaxAmount/bs {
		return 0, 0, fmt.Errorf("%w: %s{engine=%q}: %d blocks × %d tokens is more than %d", ErrBadMetric, vllmCacheConfig, engine, blocks, bs, ledger.MaxAmount)
	}
	usedBlocks := int64(math.Round(perc * float64(blocks)))
	return usedBlocks * bs, blocks * bs, nil
}

// fromSGLang reads an SGLang scrape (--enable-metrics).
//
//   - KVTokensUsed: sglang:num_used_tokens (tokens held by running
//     requests: capacity − free − evictable radix cache). sglang:token_usage
//     is rounded to two decimals and is not used.
//   - KVTokensTotal: sglang:max_total_num_tokens.
//   - Running, Waiting: sglang:num_running_reqs, sglang:num_queue_reqs.
//
// Data-parallel ranks (the "dp_rank" label, under DP attention) are summed.
// The gauges refresh only when the scheduler logs, so they can lag.
func fromSGLang(fams map[string]*dto.MetricFamily) (Sample, error) {
	s := Sample{Known: KnownKVUsed | KnownKVTotal | KnownRunning | KnownWaiting}
	for _, q := range []struct {
		name, hint string
		how        combine
		dst        *int64
	}{
		{sglangRunning, "running requests", takeMax, &s.Running},
		{sglangWaiting, "queued requests", takeMax, &s.Waiting},
		{sglangUsed, "KV tokens in use; is the server started with --enable-metrics?", takeMax, &s.KVTokensUsed},
		{sglangTotal, "KV capacity in tokens", takeMin, &s.KVTokensTotal},
	} {
		ser, err := require(fams, q.name, sglangDPLabel, q.how, q.hint)
		if err != nil {
			return s, err
		}
		if *q.dst, err = ser.sum(); err != nil {
			return s, err
		}
		s.Ranks = max(s.Ranks, len(ser.groups))
	}
	return s, nil
}

// fromTGI reads a text-generation-inference v3 router scrape.
//
//   - KVTokensUsed: tgi_batch_current_max_tokens, the running batch's
//     reservation (input + max_new_tokens + speculate − 1 per request,
//     rounded up to blocks): KVUsedIsReservation is set.
//   - KVTokensTotal: tgi_batch_max_total_tokens (max_batch_total_tokens)
//     when present; older routers do not emit it, and then KV total is not
//     Known.
//   - Running, Waiting: tgi_batch_current_size, tgi_queue_size.
//
// TGI has no data-parallel label. Its gauges appear only once set, so a
// router that has not yet run a batch lacks them: that is reported as a
// missing metric, not as an idle engine.
func fromTGI(fams map[string]*dto.MetricFamily) (Sample, error) {
	s := Sample{Known: KnownKVUsed | KnownRunning | KnownWaiting, KVUsedIsReservation: true, Ranks: 1}
	for _, q := range []struct {
		name, hint string
		dst        *int64
	}{
		{tgiRunning, "running requests; absent until the first batch", &s.Running},
		{tgiWaiting, "queued requests; absent until the first request", &s.Waiting},
		{tgiReserved, "KV tokens reserved by the running batch; absent until the first batch", &s.KVTokensUsed},
	} {
		ser, err := require(fams, q.name, "", takeMax, q.hint)
		if err != nil {
			return s, err
		}
		if *q.dst, err = ser.sum(); err != nil {
			return s, err
		}
	}
	total, ok, err := collect(fams, tgiTotal, "", takeMin)
	if err != nil {
		return s, err
	}
	if ok {
		if s.KVTokensTotal, err = total.sum(); err != nil {
			return s, err
		}
		s.Known |= KnownKVTotal
	}
	return s, nil
}
