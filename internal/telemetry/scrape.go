package telemetry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Scraper defaults.
const (
	DefaultScrapeTimeout = 2 * time.Second
	DefaultMaxBytes      = 16 << 20
)

// ErrTooLarge: a metrics response exceeded Scraper.MaxBytes.
var ErrTooLarge = errors.New("telemetry: metrics response too large")

// Scraper fetches and parses one engine's metrics. The zero value is usable;
// it is safe for concurrent use.
type Scraper struct {
	// Client makes the request; nil means http.DefaultClient.
	Client *http.Client
	// Timeout bounds one scrape, headers and body; 0 means
	// DefaultScrapeTimeout.
	Timeout time.Duration
	// MaxBytes bounds the response body; 0 means DefaultMaxBytes.
	MaxBytes int64
	// Clock stamps observations; nil means the wall clock.
	Clock ledger.Clock
}

// Scrape GETs url and parses it as format f. observedAt is the clock
// reading just before the request was sent: the engine's state is no older
// than that, and never claimed fresher than it is.
func (s *Scraper) Scrape(ctx context.Context, url string, f Format) (Sample, time.Time, error) {
	clock := s.Clock
	if clock == nil {
		clock = ledger.SystemClock{}
	}
	client := s.Client
	if client == nil {
		client = http.DefaultClient
	}
	timeout, limit := s.Timeout, s.MaxBytes
	if timeout <= 0 {
		timeout = DefaultScrapeTimeout
	}
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Sample{}, time.Time{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	// Ask for the classic text format, not OpenMetrics or protobuf.
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
	at := clock.Now()
	resp, err := client.Do(req)
	if err != nil {
		return Sample{}, time.Time{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return Sample{}, time.Time{}, fmt.Errorf("scrape %s: HTTP %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return Sample{}, time.Time{}, fmt.Errorf("scrape %s: read body: %w", url, err)
	}
	if int64(len(body)) > limit {
		return Sample{}, time.Time{}, fmt.Errorf("scrape %s: %w: more than %d bytes", url, ErrTooLarge, limit)
	}
	sample, err := Parse(f, bytes.NewReader(body))
	if err != nil {
		return Sample{}, time.Time{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	return sample, at, nil
}
