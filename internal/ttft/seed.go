package ttft

// Seeding an engine's prefill rate from its own metrics, before this
// router has seen it answer. Each format's cumulative figures since the
// engine started give a mean prompt and a mean time to first token:
//
//   - vLLM: vllm:request_prompt_tokens (histogram) over
//     vllm:time_to_first_token_seconds (histogram), mean over mean;
//   - SGLang: sglang:prompt_tokens_total over the
//     sglang:time_to_first_token_seconds histogram's sum (one prompt per
//     first token);
//   - TGI, which has no TTFT: the mean tgi_request_input_length over the
//     mean tgi_request_queue_duration plus the mean
//     tgi_batch_forward_duration{method="prefill"}.
//
// Queueing is in those times, so the rate errs low (the estimate high)
// on a loaded engine; the router's own samples replace it after three
// answers. An engine with fewer than minSeedRequests first tokens, or
// whose figures are missing, gives no seed.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// minSeedRequests is the fewest requests a seed is drawn from.
const minSeedRequests = 16

// maxSeedBody bounds a metrics scrape read for a seed.
const maxSeedBody = 16 << 20

var seedFamilies = map[telemetry.Format][]string{
	telemetry.FormatVLLM:   {"vllm:request_prompt_tokens", "vllm:time_to_first_token_seconds"},
	telemetry.FormatSGLang: {"sglang:prompt_tokens_total", "sglang:time_to_first_token_seconds"},
	telemetry.FormatTGI:    {"tgi_request_input_length", "tgi_request_queue_duration", "tgi_batch_forward_duration"},
}

// ParseSeed reads one /metrics scrape of an engine of format f and returns
// the prefill rate its figures imply, tokens per second; ok is false when
// they are missing or drawn from too few requests.
func ParseSeed(f telemetry.Format, r io.Reader) (rate float64, ok bool, err error) {
	want := seedFamilies[f]
	if want == nil {
		return 0, false, fmt.Errorf("ttft: seed: %w: %q", telemetry.ErrUnknownFormat, f)
	}
	var buf bytes.Buffer
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if line := sc.Bytes(); wanted(line, want) {
			buf.Write(line)
			buf.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return 0, false, fmt.Errorf("ttft: seed: read: %w", err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(&buf)
	if err != nil {
		return 0, false, fmt.Errorf("ttft: seed: %w", err)
	}
	var prompt, ttft, n float64
	switch f {
	case telemetry.FormatVLLM:
		ps, pc := histo(fams["vllm:request_prompt_tokens"], nil)
		ts, tc := histo(fams["vllm:time_to_first_token_seconds"], nil)
		if pc > 0 && tc > 0 {
			prompt, ttft, n = ps/pc, ts/tc, tc
		}
	case telemetry.FormatSGLang:
		ts, tc := histo(fams["sglang:time_to_first_token_seconds"], nil)
		if tc > 0 {
			prompt, ttft, n = counter(fams["sglang:prompt_tokens_total"])/tc, ts/tc, tc
		}
	case telemetry.FormatTGI:
		is, ic := histo(fams["tgi_request_input_length"], nil)
		qs, qc := histo(fams["tgi_request_queue_duration"], nil)
		fs, fc := histo(fams["tgi_batch_forward_duration"], map[string]string{"method": "prefill"})
		if ic > 0 && qc > 0 && fc > 0 {
			prompt, ttft, n = is/ic, qs/qc+fs/fc, qc
		}
	}
	if n < minSeedRequests || !(prompt > 0) || !(ttft > 0) {
		return 0, false, nil
	}
	return prompt / ttft, true, nil
}

// wanted reports whether a text-format line belongs to one of families
// (a sample, its _sum, _count or _bucket, or its HELP or TYPE line).
func wanted(line []byte, families []string) bool {
	s := strings.TrimSpace(string(line))
	if rest, ok := strings.CutPrefix(s, "#"); ok {
		f := strings.Fields(rest)
		if len(f) < 2 || (f[0] != "HELP" && f[0] != "TYPE") {
			return false
		}
		s = f[1]
	}
	name, _, _ := strings.Cut(s, "{")
	name, _, _ = strings.Cut(name, " ")
	for _, fam := range families {
		if rest, ok := strings.CutPrefix(name, fam); ok && (rest == "" || rest == "_sum" || rest == "_count" || rest == "_bucket") {
			return true
		}
	}
	return false
}

// histo sums the sum and count of mf's histograms whose labels include
// match.
func histo(mf *dto.MetricFamily, match map[string]string) (sum, count float64) {
	if mf == nil {
		return 0, 0
	}
	for _, m := range mf.GetMetric() {
		if h := m.GetHistogram(); h != nil && labelsMatch(m, match) {
			sum += h.GetSampleSum()
			count += float64(h.GetSampleCount())
		}
	}
	return sum, count
}

func counter(mf *dto.MetricFamily) float64 {
	var v float64
	if mf != nil {
		for _, m := range mf.GetMetric() {
			v += m.GetCounter().GetValue() + m.GetUntyped().GetValue()
		}
	}
	return v
}

func labelsMatch(m *dto.Metric, match map[string]string) bool {
	for k, want := range match {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == want {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// SeedPool seeds each of pool's engines not yet seeded from its metrics
// (one bounded GET of its metrics URL each, through client), until one
// scrape of it was read. A failed scrape is tried again at the next call;
// an engine whose metrics give no seed keeps DefaultRate. Called from the
// router's fleet-apply rounds, beside capacity discovery.
func (e *Estimator) SeedPool(ctx context.Context, client *http.Client, timeout time.Duration, pool ledger.PoolID, engines []fleet.Engine) {
	for _, eng := range engines {
		k := key{pool, eng.ID}
		e.mu.Lock()
		done := e.seedRead[k]
		e.mu.Unlock()
		if done || eng.MetricsURL == "" {
			continue
		}
		rate, ok, err := scrapeSeed(ctx, client, timeout, eng.MetricsURL, eng.Format)
		if err != nil {
			continue
		}
		e.mu.Lock()
		e.seedRead[k] = true
		e.mu.Unlock()
		if ok {
			e.Seed(pool, eng.ID, rate)
		}
	}
}

func scrapeSeed(ctx context.Context, client *http.Client, timeout time.Duration, url string, f telemetry.Format) (float64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("ttft: seed: %s answered %d", url, resp.StatusCode)
	}
	return ParseSeed(f, io.LimitReader(resp.Body, maxSeedBody))
}
