package route

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testutil/poll"
)

// Shutdown waits under the caller's context, like http.Server.Shutdown:
// with time to spare it waits for a cut request's release (--abort-grace)
// and returns nil; when the context ends first it returns the context's
// error at once, still cutting what is left (live streams, releases still
// waiting out their grace), and every lease is released either way.
func TestShutdownWaitsUnderCallersContext(t *testing.T) {
	for _, tc := range []struct {
		name    string
		grace   time.Duration
		cut     bool // the client goes away before Shutdown
		timeout time.Duration
		wantErr error
	}{
		{name: "clean: waits out the abort grace", grace: 300 * time.Millisecond, cut: true, timeout: 10 * time.Second},
		{name: "ctx ends during the abort grace", grace: time.Hour, cut: true, timeout: 300 * time.Millisecond, wantErr: context.DeadlineExceeded},
		{name: "ctx ends during the drain", grace: time.Hour, timeout: 300 * time.Millisecond, wantErr: context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{engines: 1, kv: 4096, slots: 8, speed: 1, output: 2000, extra: tenants,
				cfg: func(c *Config) { c.AbortGrace = tc.grace }})
			s, status, body := h.openStream(t, "sk-acme", map[string]any{"model": "m", "prompt": "long", "max_tokens": 1000, "ignore_eos": true})
			if s == nil {
				t.Fatalf("stream: %d %s", status, body)
			}
			defer s.close()
			cutAt := time.Now()
			if tc.cut {
				s.close()
				poll.Eventually(t, 5*time.Second, "the engine to see the request aborted", func() bool { return h.engines[0].Stats().RequestsAborted > 0 })
			}

			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			start := time.Now()
			err := h.r.Shutdown(ctx)
			took := time.Since(start)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Shutdown = %v, want nil", err)
				}
				if since := time.Since(cutAt); since < tc.grace {
					t.Errorf("Shutdown returned %s after the cut, before the %s abort grace ended", since, tc.grace)
				}
				if n := h.r.inflight.Load(); n != 0 {
					t.Errorf("after a clean Shutdown %d requests are in flight, want 0", n)
				}
			} else {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Shutdown = %v, want one wrapping %v", err, tc.wantErr)
				}
				if took > 3*time.Second {
					t.Errorf("Shutdown took %s with a %s context", took, tc.timeout)
				}
				// Cut, not abandoned: the request and its release end soon.
				poll.Eventually(t, 5*time.Second, "the cut request to end", func() bool { return h.r.inflight.Load() == 0 })
			}
			if st := h.stats(); st.Leases != 0 {
				t.Errorf("after Shutdown the ledger holds %d leases, want 0", st.Leases)
			}
		})
	}
}
