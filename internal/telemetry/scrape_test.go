package telemetry

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

func TestScraper(t *testing.T) {
	body := fixture(t, "sglang.metrics.txt")
	var accept string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			accept = r.Header.Get("Accept")
			_, _ = w.Write(body)
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		default:
			http.Error(w, "no", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	t0 := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	clock := clockwork.NewFakeClockAt(t0)

	t.Run("ok", func(t *testing.T) {
		s := &Scraper{Client: srv.Client(), Clock: clock}
		got, at, err := s.Scrape(context.Background(), srv.URL+"/metrics", FormatSGLang)
		if err != nil {
			t.Fatal(err)
		}
		if got != fixtures[1].want || !at.Equal(t0) {
			t.Errorf("Scrape = %+v at %s, want %+v at %s", got, at, fixtures[1].want, t0)
		}
		if !strings.HasPrefix(accept, "text/plain;version=0.0.4") {
			t.Errorf("Accept = %q, want the classic text format first", accept)
		}
	})
	for _, tt := range []struct {
		name    string
		s       Scraper
		path    string
		wantErr error
		errHas  string
	}{
		{name: "http error", path: "/nope", errHas: "404"},
		{name: "too large", s: Scraper{MaxBytes: 1000}, path: "/metrics", wantErr: ErrTooLarge},
		{name: "timeout", s: Scraper{Timeout: 50 * time.Millisecond}, path: "/slow", wantErr: context.DeadlineExceeded},
		{name: "wrong format", path: "/metrics", s: Scraper{}, wantErr: ErrMissingMetric},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.s.Client = srv.Client()
			f := FormatSGLang
			if tt.name == "wrong format" {
				f = FormatVLLM
			}
			_, at, err := tt.s.Scrape(context.Background(), srv.URL+tt.path, f)
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) || !strings.Contains(err.Error(), tt.errHas) {
				t.Fatalf("Scrape error = %v, want %v containing %q", err, tt.wantErr, tt.errHas)
			}
			if !at.IsZero() {
				t.Errorf("failed scrape returned a time %s", at)
			}
			if !strings.Contains(err.Error(), srv.URL) {
				t.Errorf("error %q does not name the URL", err)
			}
		})
	}
}
