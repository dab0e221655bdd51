package ttft

import (
	"github.com/prometheus/client_golang/prometheus"
)

// refPrompt is the prompt the exported estimate is for while a pool has
// no mean prompt yet, tokens.
const refPrompt = 1000

var (
	estimateDesc = prometheus.NewDesc("leasehold_router_ttft_estimate_seconds",
		"Estimated time to first token of a request of the pool's mean prompt sent to the engine now (the work ahead plus the prompt over the learned prefill rate, plus the learned overhead).",
		[]string{"pool", "engine"}, nil)
	rateDesc = prometheus.NewDesc("leasehold_router_ttft_prefill_tokens_per_second",
		"The engine's learned prefill rate: the inverse slope of its fitted time to first token over the prefill work ahead of and in a request; 0 while the line is flat (more work ahead did not take longer).",
		[]string{"pool", "engine"}, nil)
)

// Describe implements prometheus.Collector: the estimate and rate gauges,
// the estimate's error histogram and the client-side TTFT histogram.
func (e *Estimator) Describe(ch chan<- *prometheus.Desc) {
	ch <- estimateDesc
	ch <- rateDesc
	e.errHist.Describe(ch)
	e.ttftHist.Describe(ch)
}

// Collect implements prometheus.Collector.
func (e *Estimator) Collect(ch chan<- prometheus.Metric) {
	e.errHist.Collect(ch)
	e.ttftHist.Collect(ch)
	now := e.clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, s := range e.engines {
		prompt := int64(refPrompt)
		if ps := e.pools[k.pool]; ps != nil && ps.prompt > 0 {
			prompt = int64(ps.prompt)
		}
		est := e.estimateLocked(k.pool, s, prompt, now)
		ch <- prometheus.MustNewConstMetric(estimateDesc, prometheus.GaugeValue, est.Expected.Seconds(), string(k.pool), string(k.engine))
		rate := 0.0
		if s.fit.slope > 1/maxRate {
			rate = s.fit.rat
		}
		ch <- prometheus.MustNewConstMetric(rateDesc, prometheus.GaugeValue, rate, string(k.pool), string(k.engine))
	}
}
