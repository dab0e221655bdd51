package route

// The request path: authenticate, read and validate (no lease is taken for
// a request refused here), estimate, rank, acquire (queueing on capacity
// rejections), dispatch, release. Dispatch selects on the ticket's Done:
// when the lease is fenced, lost or revoked the upstream request is
// cancelled (closing the engine connection aborts it) and the client's
// answer ends with an error. A cut request keeps its lease AbortGrace
// longer, so the engine has aborted it before the capacity is granted
// again. The lease is released exactly once, with the
// actual usage when the engine reported it, on every way out: completion,
// upstream error, timeout, client disconnect, revocation; the release runs
// under its own bounded context, never the request's: before the answer
// ends when the engine's answer was read to its end (so the client's next
// request finds the capacity free), in the background after AbortGrace
// when the request was cut (Shutdown waits for it, under its ctx; if that
// ends first the release goes at once). Every wait here (queue timeout,
// retry hint, abort grace, first byte) is a timer of the router's clock.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/estimate"
	"github.com/leasehold/leasehold/internal/failover"
	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/openai"
	"github.com/leasehold/leasehold/internal/tenancy"
	"github.com/leasehold/leasehold/internal/ttft"
	"github.com/leasehold/leasehold/internal/waitq"
)

// maxUpstreamBody bounds a non-streaming answer read from an engine.
const maxUpstreamBody = 64 << 20

// outcome is what a request's answer was, for metrics.
type outcome struct {
	pool   ledger.PoolID
	status int
	code   string
}

func (r *Router) serveInference(w http.ResponseWriter, hr *http.Request, chat bool) {
	r.handlers.Add(1)
	defer r.handlers.Done()
	r.inflight.Add(1)
	defer r.inflight.Add(-1)
	out, err := r.serve(w, hr, chat)
	if err != nil {
		ae := toAPIError(err)
		writeError(w, ae)
		out.status, out.code = ae.status, ae.code
	}
	r.met.requests.WithLabelValues(string(out.pool), strconv.Itoa(out.status), out.code).Inc()
}

// serve answers one inference request. On error nothing was written and
// the caller answers with toAPIError(err).
func (r *Router) serve(w http.ResponseWriter, hr *http.Request, chat bool) (outcome, error) {
	var out outcome
	arrived := r.clock.Now()
	if r.draining.Load() {
		return out, ErrShuttingDown
	}
	tenant, err := r.authenticate(hr)
	if err != nil {
		return out, err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, hr.Body, r.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return out, fmt.Errorf("%w: more than %d bytes", ErrBodyTooLarge, mbe.Limit)
		}
		return out, badf("", "reading the body: %v", err)
	}
	req, err := parseRequest(body, chat, r.lim, r.cfg.AffinityBytes)
	if err != nil {
		return out, err
	}
	p := r.pools[req.model]
	if p == nil {
		return out, fmt.Errorf("%w: %q is not served here (GET /v1/models lists the models)", ErrUnknownModel, req.model)
	}
	out.pool = req.model
	ten := r.ten.Load() // this request's tenancy, whatever a reload swaps in
	if !ten.Tenant(tenant).InPool(req.model) {
		return out, fmt.Errorf("%w: %q", ErrForbidden, req.model)
	}
	if err := checkMedia(p.est.Media(), string(req.model), req.media); err != nil {
		return out, err
	}
	cls, err := ten.Class(tenant, cmp.Or(ledger.PriorityName(hr.Header.Get("X-Priority")), req.priority))
	var na *tenancy.NotAllowedError
	if errors.As(err, &na) { // refused before any lease
		r.tm.Request(req.model, tenant, na.Asked, 0, 0).Refused(tenancy.ReasonNotAllowed)
	}
	if err != nil {
		return out, err
	}
	prio := cls.Name
	req.enginePriority = ten.EnginePriority(req.model, cls)
	// Exact prompt count (--prompt-tokens=tokenize) before any lease.
	views := r.adm.views(req.model)
	r.countPrompt(hr.Context(), p, req, views, hr.Header.Get("X-Request-Id"))
	lens := r.lens.Get(req.model)
	if err := checkContext(req, lens.Reserve); err != nil {
		return out, err
	}
	// Warm elastic pools reserve the learned length (a non-streamed answer
	// only where reconciliation sees its growth); others the worst case.
	var expected int64
	if p.elastic && (req.stream || p.observed) {
		expected, _ = p.learned.Expected(tenant)
	}
	kv, slots, prompt := p.est.Demand(req.prompt(), lens.Reserve, expected)
	var worst int64 // an elastic lease's most: what its request can hold
	if p.elastic {
		// Never more than an engine grants, nor what no engine could hold.
		f := r.maxFill(prio)
		worst = min(min(prompt+estimate.OutputTokens(req.prompt(), lens.Reserve, prompt, 0), lens.Reserve)*req.n, ledger.MaxAmount)
		if worst > p.grantable(f, 0) {
			return out, &ledger.Rejection{Reason: ledger.ReasonTooLarge}
		}
		kv = min(kv, p.grantable(f, p.pool.GrowthHeadroom))
	}
	if kv > ledger.MaxAmount {
		return out, badf("n", "the request needs %d KV tokens, more than %d", kv, ledger.MaxAmount)
	}
	r.met.estRatio.WithLabelValues(string(req.model)).Set(p.est.Ratio())

	req.class, req.promptEst, req.arrived = prio, prompt, arrived
	req.acct = r.tm.Request(req.model, tenant, prio, kv, slots)
	areq := ledger.AcquireRequest{Pool: req.model, Tenant: tenant, Priority: prio, KVTokens: kv, Slots: slots, RequestID: failover.NewRequestID(),
		Tokens: ten.Tenant(tenant).RateCharge(estimate.RateTokens(req.prompt(), lens.Reserve, prompt))} // trued up at release
	r.met.admissions.WithLabelValues(string(req.model), string(prio)).Inc()
	// Failover: attempt n plans without the engines that failed (doc.go).
	ctx, failed, cands := hr.Context(), []ledger.EngineID(nil), []ledger.EngineID(nil)
	plan := func() ([]ledger.EngineID, time.Time, error) {
		c, until, err := r.plan(p, req)
		if err == nil && len(failed) > 0 {
			if c = failover.Without(c, failed); len(c) == 0 {
				err = fmt.Errorf("%w: engines %v failed and no other is a candidate", ErrUpstream, failed)
			}
		}
		cands = c
		return c, until, err
	}
	for n := 1; ; n++ {
		a := areq
		a.RequestID = failover.RequestID(areq.RequestID, n)
		t, err := r.acquire(ctx, p, a, ten.Key(tenant, cls), plan)
		if err != nil {
			reason := "ledger_unavailable"
			if rej := ledger.AsRejection(err); rej != nil {
				reason = string(rej.Reason)
			} else if hr.Context().Err() != nil {
				reason = "client_gone"
			} else if ctx.Err() != nil {
				reason, err = "upstream_timeout", fmt.Errorf("%w: %d engines failed and none answered within %s", ErrUpstreamTimeout, len(failed), r.cfg.UpstreamTimeout)
			} else if errors.Is(err, ErrUpstream) {
				reason = "upstream_error"
			}
			r.met.rejections.WithLabelValues(string(req.model), reason).Inc()
			if reason != "client_gone" && reason != "upstream_timeout" && reason != "upstream_error" {
				r.met.refused.WithLabelValues(string(req.model), string(prio), reason).Inc()
				req.acct.Refused(reason)
			}
			return out, err
		}
		r.met.grants.WithLabelValues(string(req.model)).Inc()
		req.acct.Granted()
		if n == 1 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeoutCause(hr.Context(), r.cfg.UpstreamTimeout, ErrUpstreamTimeout)
			defer cancel()
		}
		var g *lease.Growing
		if expected > 0 {
			g = lease.NewGrowing(t, req.n, min(prompt, lens.Reserve)*req.n, kv, worst)
		}
		last := n >= r.cfg.FailoverAttempts || len(cands) <= 1 // t's engine is one of them
		status, code, failure := r.dispatch(ctx, w, hr, p, req, t, g, last)
		if failure == ledger.OutcomeNone {
			out.status, out.code = status, code
			return out, nil
		}
		failed = append(failed, t.Engine())
		r.fo.FailedOver(req.model, failure)
	}
}

// acquire admits areq on the candidates plan gives at each attempt, in
// turn with the other requests in p's queue under key (waitq.Admit).
func (r *Router) acquire(ctx context.Context, p *poolRT, areq ledger.AcquireRequest, key waitq.Key, plan func() ([]ledger.EngineID, time.Time, error)) (lease.Ticket, error) {
	var t lease.Ticket
	err := p.q.Admit(ctx, key, r.stopC, func() (time.Time, error) {
		cands, until, err := plan()
		areq.Candidates = cands
		return until, err
	}, func() (err error) {
		began := r.clock.Now()
		t, err = r.adm.admit(ctx, areq)
		result := "granted"
		switch {
		case ledger.AsRejection(err) != nil:
			result = "rejected"
		case err != nil:
			result = "error"
		}
		r.met.admit.WithLabelValues(string(areq.Pool), result).Observe(r.clock.Since(began).Seconds())
		return err
	})
	if errors.Is(err, waitq.ErrStopped) {
		return nil, ErrShuttingDown
	}
	return t, err
}

// queueWaits: the refusals a request waits on in the queue; ttft.ReasonSLO
// and ReasonTooLarge never, a tenant quota with --queue-quota.
func (r *Router) queueWaits(rej *ledger.Rejection) bool {
	return rej.Reason != ledger.ReasonTooLarge && rej.Reason != ttft.ReasonSLO && (!rej.Reason.Quota() || r.cfg.QueueQuota)
}

// streamReaders recycles the 32 KiB readers of streamed answers: one per
// streaming request was most of the router's allocation (and GC) under load.
// A reader goes back only after dispatch is done with every slice of it.
var streamReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 32<<10) }}

// Dispatch. A granted request goes to its engine as one dispatch: send the
// request, then whole (read the answer, then write it) or stream (pass
// events through as they come), and finish on every way out: release the
// lease once, with the usage the engine reported, under its own bounded
// context. ctx ends with the client, the upstream timeout, or the lease
// (its Done): a fenced or lost lease cancels the upstream request.

// dispatch is one granted request on its way to the engine and back. One
// handler goroutine uses it.
type dispatch struct {
	r                  *Router
	w                  http.ResponseWriter
	hr                 *http.Request
	p                  *poolRT
	req                *request
	t                  lease.Ticket
	engine             ledger.EngineID
	ctx                context.Context // ends with the client, the upstream timeout, or the lease
	granted            time.Time
	grow               *lease.Growing // elastic leases only
	usage              ledger.Usage
	details            *estimate.PromptDetails // the engine's prompt_tokens_details
	known              bool                    // usage reported by the engine
	chunks             int64                   // stream chunks with choices, when usage is unknown
	sent               bool                    // the engine may have accepted the request
	tt                 *ttft.Inflight          // the TTFT estimate's record of this dispatch
	finished, complete bool                    // the answer was read to its end; complete: a 200 one, its length a sample (Usage.Finished)
	cancel             context.CancelCauseFunc // ends ctx
	att                failover.Attempt        // what the dispatch came to: Release's Outcome
	last, retry        bool                    // last: answer every failure; retry: a failure left unanswered, to fail over
}

// dispatch proxies req to t's engine under ctx and releases t. It writes
// the answer and returns its status and code, unless (not last) a failure
// before any write may go to another engine: then it returns its outcome.
func (r *Router) dispatch(ctx context.Context, w http.ResponseWriter, hr *http.Request, p *poolRT, req *request, t lease.Ticket, g *lease.Growing, last bool) (status int, code string, failure ledger.Outcome) {
	d := &dispatch{r: r, w: w, hr: hr, p: p, req: req, t: t, engine: t.Engine(), granted: r.clock.Now(), grow: g, last: last}
	defer d.finish()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	d.cancel = cancel
	if df, ok := t.(lease.DoneFunc); ok {
		defer df.AfterDone(func() { cancel(t.Err()) })()
	} else {
		stopWatch := make(chan struct{})
		defer close(stopWatch)
		go func() {
			select {
			case <-t.Done():
				cancel(t.Err())
			case <-stopWatch:
			}
		}()
	}
	d.ctx = ctx
	if status, code = d.send(); d.retry {
		failure = d.att.Outcome()
	}
	return status, code, failure
}

// finish releases the lease on the way out: at once when the answer was
// read to its end or never sent, else after --abort-grace.
func (d *dispatch) finish() {
	if !d.known {
		d.usage = ledger.Usage{CompletionTokens: d.chunks}
	}
	d.usage.Finished, d.usage.Outcome = d.complete, d.att.Outcome()
	d.r.fo.Dispatched(d.req.model, d.engine, d.usage.Outcome)
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
		if g := d.r.cfg.AbortGrace; g > 0 {
			t := d.r.clock.NewTimer(g)
			select {
			case <-t.Chan():
			case <-d.r.cutC: // Shutdown stopped waiting: release now
			}
			t.Stop()
		}
		d.release()
	}()
}

// release gives the lease back with the usage and learns from it.
func (d *dispatch) release() {
	_ = d.t.Release(d.usage) // bounded, own context; retried in background
	d.r.met.holdSecs.WithLabelValues(string(d.req.model)).Observe(d.r.clock.Since(d.granted).Seconds())
	d.req.acct.Released(d.usage)
	d.p.q.Notify()
	if d.known {
		d.p.est.ObserveUsage(d.req.prompt(), d.usage.PromptTokens, d.details)
		if g := d.grow; g != nil {
			d.r.met.outErr.WithLabelValues(string(d.req.model)).Observe(float64(d.usage.CompletionTokens) / float64(g.FirstOutput()))
		}
	}
}

// failure classifies an upstream error by what ended ctx into d.att; the log, never the answer, has the URL.
func (d *dispatch) failure(err error) error {
	cause := context.Cause(d.ctx)
	d.att.Err, d.att.FirstByteTimeout = err, errors.Is(cause, failover.ErrFirstByteTimeout)
	d.att.Cancelled = d.ctx.Err() != nil && !d.att.FirstByteTimeout
	switch {
	case d.ctx.Err() == nil:
		d.r.health.Report(d.req.model, d.engine, false)
		d.r.log.Warn("upstream engine failed", "pool", d.req.model, "engine", d.engine, "url", d.p.urls[d.engine], "err", err)
		return fmt.Errorf("%w: engine %s", ErrUpstream, d.engine)
	case d.att.FirstByteTimeout:
		d.r.health.Report(d.req.model, d.engine, false)
		return fmt.Errorf("%w: engine %s sent no response byte within the pool's first_byte_timeout %s", ErrUpstreamTimeout, d.engine, d.p.pool.FirstByteTimeout)
	case d.t.Err() != nil:
		return fmt.Errorf("lease on engine %s ended while dispatching: %w", d.engine, d.t.Err())
	case errors.Is(cause, ErrUpstreamTimeout):
		return fmt.Errorf("%w: engine %s after %s", ErrUpstreamTimeout, d.engine, d.r.cfg.UpstreamTimeout)
	default:
		return fmt.Errorf("client gone: %w", d.hr.Context().Err())
	}
}

// answer writes err as the answer, unless the request fails over or the client is gone.
func (d *dispatch) answer(err error) (int, string) {
	if d.retry = !d.last && d.att.Retryable(); d.retry {
		return 0, ""
	}
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
		return d.answer(d.failure(err))
	}
	ureq.Header.Set("Content-Type", "application/json")
	if id := d.hr.Header.Get("X-Request-Id"); id != "" {
		ureq.Header.Set("X-Request-Id", id)
	}
	start := r.clock.Now()
	d.sent = true
	d.tt = r.ttft.Start(ttft.Dispatch{Pool: req.model, Engine: d.engine, Class: req.class, Prompt: req.promptEst, Stream: req.stream, Arrived: req.arrived})
	defer d.tt.Done()
	stop := failover.FirstByte(r.clock, d.p.pool.FirstByteTimeout, d.cancel)
	resp, err := r.client.Do(ureq)
	if stop() && err == nil {
		resp.Body.Close() // too late: the dispatch is cancelled
		err = failover.ErrFirstByteTimeout
	}
	if err != nil {
		return d.answer(d.failure(err))
	}
	defer resp.Body.Close()
	d.att.Status = resp.StatusCode
	r.health.Report(req.model, d.engine, resp.StatusCode < 500)
	r.met.firstByte.WithLabelValues(string(req.model), string(d.engine)).Observe(r.clock.Since(start).Seconds())
	defer func() {
		r.met.upstream.WithLabelValues(string(req.model), string(d.engine), strconv.FormatBool(req.stream)).Observe(r.clock.Since(start).Seconds())
	}()

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
	d.finished, d.complete = true, resp.StatusCode == http.StatusOK
	if d.retry = !d.last && d.att.Retryable(); d.retry {
		return 0, "" // a 5xx another engine may not give
	}
	d.w.Header().Set("X-Leasehold-Engine", string(d.engine))
	if u := openai.BodyUsage(data); d.complete && u != nil {
		d.usage, d.details, d.known = u.Ledger(), u.Details, true
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
// when the client did not. The stream's end (a usage-only chunk, [DONE])
// is not flushed: it goes out with the answer's end, after the release.
func (d *dispatch) stream(resp *http.Response) (int, string) {
	w := d.w
	w.Header().Set("X-Leasehold-Engine", string(d.engine))
	copyHeader(w.Header(), resp.Header, "Content-Type", "Cache-Control")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	br := streamReaders.Get().(*bufio.Reader)
	br.Reset(resp.Body)
	defer func() { br.Reset(nil); streamReaders.Put(br) }()
	var event bytes.Buffer
	pending := false // written events to flush: all but the stream's end
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
			ev := openai.Inspect(event.Bytes())
			keep := ev.Keep
			if u := ev.Usage; u != nil {
				d.usage, d.details, d.known = u.Ledger(), u.Details, true
				keep = keep || d.req.includeUsage
			}
			if ev.Choices {
				if d.chunks++; d.chunks == 1 {
					d.att.TTFTBreach = d.r.ttft.Breached(d.req.class, d.tt.FirstToken())
				}
			}
			if d.grow != nil {
				var reported int64
				if d.known {
					reported = d.usage.CompletionTokens
				}
				if res := d.grow.Chunk(d.ctx, ev.Output(), ev.Finished(), reported); res != "" {
					d.r.met.grows.WithLabelValues(string(d.req.model), res).Inc()
				}
			}
			if keep {
				end := ev.End || (ev.Usage != nil && !ev.Choices)
				if end && pending && rc.Flush() != nil { // what came before goes now
					return 499, "client_gone"
				}
				if _, werr := w.Write(event.Bytes()); werr != nil {
					return 499, "client_gone"
				}
				pending = !end
			}
			event.Reset()
		}
		if err != nil {
			if errors.Is(err, io.EOF) && d.ctx.Err() == nil {
				d.finished, d.complete = true, true
				if pending {
					_ = rc.Flush()
				}
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
		if br.Buffered() == 0 && pending {
			if rc.Flush() != nil {
				return 499, "client_gone"
			}
			pending = false
		}
	}
}

func copyHeader(dst, src http.Header, names ...string) {
	for _, n := range names {
		if v := src.Get(n); v != "" {
			dst.Set(n, v)
		}
	}
}
