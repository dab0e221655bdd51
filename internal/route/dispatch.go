package route

// Dispatch. A granted request goes to its engine as one dispatch: send the
// request, then whole (read the answer, then write it) or stream (pass
// events through as they come), and finish on every way out: release the
// lease once, with the usage the engine reported, under its own bounded
// context. ctx ends with the client, the upstream timeout, or the lease
// (its Done): a fenced or lost lease cancels the upstream request.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/internal/estimate"
	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
)

// dispatch is one granted request on its way to the engine and back. One
// handler goroutine uses it.
type dispatch struct {
	r      *Router
	w      http.ResponseWriter
	hr     *http.Request
	p      *poolRT
	req    *request
	t      lease.Ticket
	engine ledger.EngineID
	ctx    context.Context // ends with the client, the upstream timeout, or the lease

	granted  time.Time
	usage    ledger.Usage
	details  *estimate.PromptDetails // the engine's prompt_tokens_details
	known    bool                    // usage reported by the engine
	chunks   int64                   // stream chunks with choices, when usage is unknown
	sent     bool                    // the engine may have accepted the request
	finished bool                    // the engine's answer was read to its end
}

// dispatch proxies req to t's engine and releases t. It always writes the
// answer and returns its status and error code.
func (r *Router) dispatch(w http.ResponseWriter, hr *http.Request, p *poolRT, req *request, t lease.Ticket) (status int, code string) {
	d := &dispatch{r: r, w: w, hr: hr, p: p, req: req, t: t, engine: t.Engine(), granted: r.clock.Now()}
	defer d.finish()
	ctx, cancelTimeout := context.WithTimeoutCause(hr.Context(), r.cfg.UpstreamTimeout, ErrUpstreamTimeout)
	defer cancelTimeout()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopWatch := make(chan struct{})
	defer close(stopWatch)
	go func() {
		select {
		case <-t.Done():
			cancel(t.Err())
		case <-stopWatch:
		}
	}()
	d.ctx = ctx
	return d.send()
}

// finish releases the lease on the way out: at once when the answer was
// read to its end or never sent, else after --abort-grace.
func (d *dispatch) finish() {
	if !d.known {
		d.usage = ledger.Usage{CompletionTokens: d.chunks}
	}
	if !d.sent || d.finished {
		// Before the answer ends: a client that sends its next request
		// once this one is done finds the capacity (and its tenant's
		// quota) free again, on any router.
		d.release()
		return
	}
	// The connection was cut: nobody waits for this answer. Give the
	// engine time to notice and abort before the capacity can be
	// granted again, in the background; it counts as in flight, so
	// Shutdown waits for it before closing the holder sessions.
	d.r.handlers.Add(1)
	d.r.inflight.Add(1)
	go func() {
		defer d.r.handlers.Done()
		defer d.r.inflight.Add(-1)
		if d.r.cfg.AbortGrace > 0 {
			time.Sleep(d.r.cfg.AbortGrace)
		}
		d.release()
	}()
}

// release gives the lease back with the usage and learns from it.
func (d *dispatch) release() {
	_ = d.t.Release(d.usage) // bounded, own context; retried in background
	d.r.met.holdSecs.WithLabelValues(string(d.req.model)).Observe(d.r.clock.Since(d.granted).Seconds())
	d.p.q.Notify()
	if d.known {
		d.p.est.ObserveUsage(d.req.prompt(), d.usage.PromptTokens, d.details)
		d.p.est.ObserveCompletion(d.usage.CompletionTokens / d.req.n)
	}
}

// failure classifies an upstream error by what ended ctx.
func (d *dispatch) failure(err error) error {
	switch cause := context.Cause(d.ctx); {
	case d.ctx.Err() == nil:
		return fmt.Errorf("%w: engine %s: %v", ErrUpstream, d.engine, err)
	case d.t.Err() != nil:
		return fmt.Errorf("lease on engine %s ended while dispatching: %w", d.engine, d.t.Err())
	case errors.Is(cause, ErrUpstreamTimeout):
		return fmt.Errorf("%w: engine %s after %s", ErrUpstreamTimeout, d.engine, d.r.cfg.UpstreamTimeout)
	default:
		return fmt.Errorf("client gone: %w", d.hr.Context().Err())
	}
}

// answer writes err as the answer, unless the client is gone.
func (d *dispatch) answer(err error) (int, string) {
	if d.hr.Context().Err() != nil {
		return 499, "client_gone" // nobody to answer
	}
	ae := toAPIError(err)
	writeError(d.w, ae)
	return ae.status, ae.code
}

// send sends the request to the engine and answers with what comes back.
func (d *dispatch) send() (int, string) {
	r, req := d.r, d.req
	body, err := req.upstreamBody()
	if err != nil {
		return d.answer(badf("", "re-encoding the body: %v", err))
	}
	path := "/v1/completions"
	if req.chat {
		path = "/v1/chat/completions"
	}
	ureq, err := http.NewRequestWithContext(d.ctx, http.MethodPost, d.p.urls[d.engine]+path, bytes.NewReader(body))
	if err != nil {
		return d.answer(fmt.Errorf("%w: %v", ErrUpstream, err))
	}
	ureq.Header.Set("Content-Type", "application/json")
	if id := d.hr.Header.Get("X-Request-Id"); id != "" {
		ureq.Header.Set("X-Request-Id", id)
	}
	start := r.clock.Now()
	d.sent = true
	resp, err := r.client.Do(ureq)
	if err != nil {
		return d.answer(d.failure(err))
	}
	defer resp.Body.Close()
	r.met.firstByte.WithLabelValues(string(req.model), string(d.engine)).Observe(r.clock.Since(start).Seconds())
	defer func() {
		r.met.upstream.WithLabelValues(string(req.model), string(d.engine), strconv.FormatBool(req.stream)).Observe(r.clock.Since(start).Seconds())
	}()

	d.w.Header().Set("X-Leasehold-Engine", string(d.engine))
	if !req.stream || resp.StatusCode != http.StatusOK {
		return d.whole(resp)
	}
	return d.stream(resp)
}

// whole reads the engine's answer to its end, then writes it.
func (d *dispatch) whole(resp *http.Response) (int, string) {
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody))
	if err != nil {
		return d.answer(d.failure(err))
	}
	d.finished = true
	if resp.StatusCode == http.StatusOK {
		var u struct {
			Usage *usageJSON `json:"usage"`
		}
		if json.Unmarshal(data, &u) == nil && u.Usage != nil {
			d.usage, d.details, d.known = u.Usage.ledgerUsage(), u.Usage.Details, true
		}
	}
	copyHeader(d.w.Header(), resp.Header, "Content-Type")
	d.w.WriteHeader(resp.StatusCode)
	_, _ = d.w.Write(data)
	code := ""
	if resp.StatusCode != http.StatusOK {
		code = "upstream_" + strconv.Itoa(resp.StatusCode)
	}
	return resp.StatusCode, code
}

// stream passes events through as they come, flushing whenever the engine
// has nothing more buffered; it drops the usage chunk the router asked for
// when the client did not.
func (d *dispatch) stream(resp *http.Response) (int, string) {
	w := d.w
	copyHeader(w.Header(), resp.Header, "Content-Type", "Cache-Control")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	br := streamReaders.Get().(*bufio.Reader)
	br.Reset(resp.Body)
	defer func() { br.Reset(nil); streamReaders.Put(br) }()
	var event bytes.Buffer
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			event.Write(line) // a long line: keep reading it
			continue
		}
		if len(line) > 0 {
			event.Write(line)
		}
		if err == nil && len(bytes.TrimSpace(line)) > 0 {
			continue // inside an event
		}
		if event.Len() > 0 {
			keep, u, hasChoices := inspectEvent(event.Bytes())
			if u != nil {
				d.usage, d.details, d.known = u.ledgerUsage(), u.Details, true
				keep = keep || d.req.includeUsage
			}
			if hasChoices {
				d.chunks++
			}
			if keep {
				if _, werr := w.Write(event.Bytes()); werr != nil {
					return 499, "client_gone"
				}
			}
			event.Reset()
		}
		if err != nil {
			if errors.Is(err, io.EOF) && d.ctx.Err() == nil {
				d.finished = true
				_ = rc.Flush()
				return http.StatusOK, ""
			}
			ferr := d.failure(err)
			if d.hr.Context().Err() != nil {
				return 499, "client_gone"
			}
			// Headers are gone: end the stream with an error event.
			ae := toAPIError(ferr)
			b, _ := json.Marshal(errorBody(ae))
			_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
			_ = rc.Flush()
			return ae.status, ae.code
		}
		if br.Buffered() == 0 {
			if rc.Flush() != nil {
				return 499, "client_gone"
			}
		}
	}
}
