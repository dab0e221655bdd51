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
// retry hint, abort grace) is a timer of the router's clock.

import (
	"bufio"
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/internal/estimate"
	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ttft"
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
	if !r.tenant(tenant).InPool(req.model) {
		return out, fmt.Errorf("%w: %q", ErrForbidden, req.model)
	}
	if err := checkMedia(p.est.Media(), string(req.model), req.media); err != nil {
		return out, err
	}
	prio, err := r.priority(hr, req)
	if err != nil {
		return out, err
	}
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
	areq := ledger.AcquireRequest{Pool: req.model, Tenant: tenant, Priority: prio, KVTokens: kv, Slots: slots}
	r.met.admissions.WithLabelValues(string(req.model), string(prio)).Inc()
	t, err := r.acquire(hr.Context(), p, areq, func() ([]ledger.EngineID, time.Time, error) { return r.plan(p, req) })
	if err != nil {
		reason := "ledger_unavailable"
		if rej := ledger.AsRejection(err); rej != nil {
			reason = string(rej.Reason)
		} else if hr.Context().Err() != nil {
			reason = "client_gone"
		}
		r.met.rejections.WithLabelValues(string(req.model), reason).Inc()
		if reason != "client_gone" {
			r.met.refused.WithLabelValues(string(req.model), string(prio), reason).Inc()
		}
		return out, err
	}
	r.met.grants.WithLabelValues(string(req.model)).Inc()
	var g *lease.Growing
	if expected > 0 {
		g = lease.NewGrowing(t, req.n, min(prompt, lens.Reserve)*req.n, kv, worst)
	}
	status, code := r.dispatch(w, hr, p, req, t, g)
	out.status, out.code = status, code
	return out, nil
}

// checkContext refuses, before any lease, a request whose prompt is known
// exactly (token ids, or counted by --prompt-tokens=tokenize) and does not
// fit maxCtx, the largest context of the pool's engines: no engine could
// serve it. An estimated prompt is never refused here (the estimate errs
// high); the engine judges it.
func checkContext(req *request, maxCtx int64) error {
	if req.promptTokens <= 0 {
		return nil
	}
	param := "prompt"
	if req.chat {
		param = "messages"
	}
	switch {
	case req.promptTokens >= maxCtx:
		return &contextLengthError{param: param, msg: fmt.Sprintf(
			"this model's maximum context length is %d tokens; the prompt has %d, leaving no room for output", maxCtx, req.promptTokens)}
	case req.maxTokens > 0 && req.promptTokens+req.maxTokens > maxCtx:
		return &contextLengthError{param: req.maxTokensField, msg: fmt.Sprintf(
			"this model's maximum context length is %d tokens; you requested %d (%d in the prompt, %d for the output): lower %s or shorten the prompt",
			maxCtx, req.promptTokens+req.maxTokens, req.promptTokens, req.maxTokens, req.maxTokensField)}
	}
	return nil
}

// priority is X-Priority, else the body's "priority", else the fleet's
// default; it must name a configured class.
func (r *Router) priority(hr *http.Request, req *request) (ledger.PriorityName, error) {
	name := ledger.PriorityName(hr.Header.Get("X-Priority"))
	if name == "" {
		name = req.priority
	}
	if name == "" {
		return r.fleet.DefaultPriority, nil
	}
	names := make([]string, 0, len(r.fleet.Priorities))
	for _, p := range r.fleet.Priorities {
		if p.Name == name {
			return name, nil
		}
		names = append(names, string(p.Name))
	}
	return "", fmt.Errorf("%w: %q; want one of %v", ErrUnknownPriority, name, names)
}

// acquire admits areq on the candidates plan gives at each attempt,
// waiting in p's queue on capacity rejections (see internal/waitq), but
// not past the until plan gives (the class's TTFT objective). The last
// rejection is returned when the wait ends; ttft.ReasonSLO is not waited.
func (r *Router) acquire(ctx context.Context, p *poolRT, areq ledger.AcquireRequest, plan func() ([]ledger.EngineID, time.Time, error)) (lease.Ticket, error) {
	var (
		elem     *list.Element
		since    time.Time
		deadline clockwork.Timer
	)
	gauge := r.met.queueDepth.WithLabelValues(string(areq.Pool))
	waited := func(outcome string) {
		if elem != nil {
			p.q.Leave(elem)
			gauge.Dec()
			r.met.queueWait.WithLabelValues(string(areq.Pool), outcome).Observe(r.clock.Since(since).Seconds())
			deadline.Stop()
			elem = nil
		}
	}
	for {
		var t lease.Ticket
		cands, until, err := plan()
		if err == nil {
			began := r.clock.Now()
			areq.Candidates = cands
			t, err = r.adm.admit(ctx, areq)
			result := "granted"
			switch {
			case ledger.AsRejection(err) != nil:
				result = "rejected"
			case err != nil:
				result = "error"
			}
			r.met.admit.WithLabelValues(string(areq.Pool), result).Observe(r.clock.Since(began).Seconds())
		}
		if err == nil {
			if elem != nil {
				waited("granted")
				p.q.Notify() // pass the wake-up on: there may be room for more
			}
			return t, nil
		}
		rej := ledger.AsRejection(err)
		if rej == nil || rej.Reason == ledger.ReasonTooLarge || rej.Reason == ttft.ReasonSLO || (rej.Reason.Quota() && !r.cfg.QueueQuota) {
			waited("rejected")
			return nil, err
		}
		if elem == nil {
			if r.cfg.QueueTimeout <= 0 {
				return nil, err
			}
			if elem = p.q.Enter(); elem == nil {
				return nil, err // queue full: answer the ledger's reason now
			}
			gauge.Inc()
			since = r.clock.Now()
			deadline = r.clock.NewTimer(r.cfg.QueueTimeout)
		}
		hint := rej.RetryAfter
		if hint <= 0 {
			hint = time.Second
		}
		wait := time.Duration(float64(hint) * (0.5 + rand.Float64()))
		if !until.IsZero() {
			wait = max(min(wait, until.Sub(r.clock.Now())), 0) // then plan refuses: ttft_slo
		}
		retry := r.clock.NewTimer(wait)
		select {
		case <-elem.Value.(chan struct{}):
		case <-retry.Chan():
		case <-deadline.Chan():
			retry.Stop()
			waited("rejected")
			return nil, err
		case <-ctx.Done():
			retry.Stop()
			waited("cancelled")
			return nil, ctx.Err()
		case <-r.stopC:
			retry.Stop()
			waited("cancelled")
			return nil, ErrShuttingDown
		}
		retry.Stop()
	}
}

// streamReaders recycles the 32 KiB readers of streamed answers: one per
// streaming request was most of the router's allocation (and GC) under load.
// A reader goes back only after dispatch is done with every slice of it.
var streamReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 32<<10) }}

// usageOf reads an OpenAI usage object.
type usageJSON struct {
	PromptTokens     int64                   `json:"prompt_tokens"`
	CompletionTokens int64                   `json:"completion_tokens"`
	Details          *estimate.PromptDetails `json:"prompt_tokens_details"`
}

// ledgerUsage is u as the ledger's release takes it.
func (u *usageJSON) ledgerUsage() ledger.Usage {
	return ledger.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}
}

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
}

// dispatch proxies req to t's engine and releases t. It always writes the
// answer and returns its status and error code.
func (r *Router) dispatch(w http.ResponseWriter, hr *http.Request, p *poolRT, req *request, t lease.Ticket, g *lease.Growing) (status int, code string) {
	d := &dispatch{r: r, w: w, hr: hr, p: p, req: req, t: t, engine: t.Engine(), granted: r.clock.Now(), grow: g}
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
	d.usage.Finished = d.complete
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
	d.p.q.Notify()
	if d.known {
		d.p.est.ObserveUsage(d.req.prompt(), d.usage.PromptTokens, d.details)
		if g := d.grow; g != nil {
			d.r.met.outErr.WithLabelValues(string(d.req.model)).Observe(float64(d.usage.CompletionTokens) / float64(g.FirstOutput()))
		}
	}
}

// failure classifies an upstream error by what ended ctx; the log, never the answer, has the URL.
func (d *dispatch) failure(err error) error {
	switch cause := context.Cause(d.ctx); {
	case d.ctx.Err() == nil:
		d.r.health.Report(d.req.model, d.engine, false)
		d.r.log.Warn("upstream engine failed", "pool", d.req.model, "engine", d.engine, "url", d.p.urls[d.engine], "err", err)
		return fmt.Errorf("%w: engine %s", ErrUpstream, d.engine)
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
	resp, err := r.client.Do(ureq)
	if err != nil {
		return d.answer(d.failure(err))
	}
	defer resp.Body.Close()
	r.health.Report(req.model, d.engine, resp.StatusCode < 500)
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
	d.finished, d.complete = true, resp.StatusCode == http.StatusOK
	if d.complete {
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
				if d.chunks++; d.chunks == 1 {
					d.tt.FirstToken()
				}
			}
			if d.grow != nil {
				out := d.chunks
				if d.known {
					out = max(out, d.usage.CompletionTokens)
				}
				if res := d.grow.Saw(d.ctx, out); res != "" {
					d.r.met.grows.WithLabelValues(string(d.req.model), res).Inc()
				}
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
				d.finished, d.complete = true, true
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

// inspectEvent looks at one SSE event: keep is false for the usage-only
// chunk (which the caller keeps if the client asked for it), u is its
// usage, hasChoices reports a chunk carrying output.
func inspectEvent(ev []byte) (keep bool, u *usageJSON, hasChoices bool) {
	data, ok := bytes.CutPrefix(bytes.TrimSpace(ev), []byte("data:"))
	if !ok {
		return true, nil, false
	}
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, []byte("[DONE]")) {
		return true, nil, false
	}
	if !bytes.Contains(data, []byte(`"usage"`)) {
		return true, nil, bytes.Contains(data, []byte(`"index"`))
	}
	var c struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   *usageJSON        `json:"usage"`
	}
	if json.Unmarshal(data, &c) != nil {
		return true, nil, false
	}
	if c.Usage != nil && len(c.Choices) == 0 {
		return false, c.Usage, false
	}
	return true, c.Usage, len(c.Choices) > 0
}

func copyHeader(dst, src http.Header, names ...string) {
	for _, n := range names {
		if v := src.Get(n); v != "" {
			dst.Set(n, v)
		}
	}
}
