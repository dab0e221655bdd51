package chaos

// The routers' TTFT estimate error, read from their /metrics when the
// load ends: a histogram of |estimate − observed| / observed per engine,
// summed over every router and engine, its median interpolated within
// its bucket as Prometheus' histogram_quantile does.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// TTFTErrorMetric is the routers' histogram of the relative TTFT estimate
// error, |estimate − observed| / observed, one series per engine.
const TTFTErrorMetric = "leasehold_router_ttft_estimate_error_ratio"

// EstimateError is the routers' TTFT estimate error over a run.
type EstimateError struct {
	// P50 is the median of |estimate − observed| / observed; N the
	// observations.
	P50 float64 `json:"p50"`
	N   float64 `json:"n"`
}

func (e EstimateError) String() string { return fmt.Sprintf("%.0f%% (n=%.0f)", 100*e.P50, e.N) }

// ttftEstimateError reads TTFTErrorMetric from every router; nil when no
// router exports it or it has no observation.
func (c *cluster) ttftEstimateError(ctx context.Context) (*EstimateError, error) {
	buckets := map[float64]float64{}
	for _, r := range c.routers {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.addr+"/metrics", nil)
		if err != nil {
			return nil, err
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("%s /metrics: %w", r.id, err)
		}
		err = sumBuckets(resp.Body, TTFTErrorMetric, buckets)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("%s /metrics: %w", r.id, err)
		}
	}
	return histogramMedian(buckets), nil
}

// sumBuckets adds every series of histogram name's cumulative buckets read
// from the text exposition in r into by (upper bound → count).
func sumBuckets(r io.Reader, name string, by map[float64]float64) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	prefix := name + "_bucket{"
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		i := strings.Index(rest, `le="`)
		if i < 0 {
			return fmt.Errorf("%q: no le label", line)
		}
		le := rest[i+4:]
		le = le[:strings.IndexByte(le, '"')]
		bound := math.Inf(1)
		if le != "+Inf" {
			var err error
			if bound, err = strconv.ParseFloat(le, 64); err != nil {
				return fmt.Errorf("%q: %w", line, err)
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return fmt.Errorf("%q: %w", line, err)
		}
		by[bound] += v
	}
	return sc.Err()
}

// histogramMedian is the median of cumulative buckets, interpolated
// linearly within its bucket (the lowest from 0); nil without
// observations.
func histogramMedian(by map[float64]float64) *EstimateError {
	bounds := make([]float64, 0, len(by))
	for b := range by {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 || by[bounds[len(bounds)-1]] == 0 {
		return nil
	}
	n := by[bounds[len(bounds)-1]]
	rank := n / 2
	lo, below := 0.0, 0.0
	for _, b := range bounds {
		if by[b] >= rank {
			if math.IsInf(b, 1) {
				return &EstimateError{P50: lo, N: n} // past the last finite bound: report it
			}
			return &EstimateError{P50: lo + (b-lo)*(rank-below)/(by[b]-below), N: n}
		}
		lo, below = b, by[b]
	}
	return &EstimateError{P50: lo, N: n}
}
