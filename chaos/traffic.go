package chaos

// The client pool: OpenAI requests with the fleet's API keys, spread over
// the routers the runner has not taken down (as a load balancer with
// health checks would), closed loop (Concurrency clients) or open loop
// (Poisson arrivals at Rate, times workload.spike's factor during it).
// Every draw comes from the workload seed, so a replay sends the same
// requests in the same order per client.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type traffic struct {
	sc     *Scenario
	c      *cluster
	rec    *recorder
	client *http.Client

	// targets are the nodes the clients send to: the routers, or with
	// admission direct the engines (as nodes of their own).
	targets []*routerNode
	rr      atomic.Uint64
	// dupUntil is the end (UnixNano) of a duplicate_retries window.
	dupUntil atomic.Int64
	// issued counts requests sent, for the progress bar.
	issued atomic.Int64

	tenants, prios []weighted
}

type weighted struct {
	name string
	w    float64
}

func sortedWeights(m map[string]float64) []weighted {
	var out []weighted
	for k, v := range m {
		if v > 0 {
			out = append(out, weighted{k, v})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func pick(rng *rand.Rand, ws []weighted) string {
	if len(ws) == 0 {
		return ""
	}
	var total float64
	for _, w := range ws {
		total += w.w
	}
	x := rng.Float64() * total
	for _, w := range ws {
		if x < w.w {
			return w.name
		}
		x -= w.w
	}
	return ws[len(ws)-1].name
}

func newTraffic(sc *Scenario, c *cluster, rec *recorder) *traffic {
	w := sc.Workload
	conc := max(w.Concurrency, w.MaxInFlight)
	t := &traffic{
		sc: sc, c: c, rec: rec,
		client: &http.Client{Transport: &http.Transport{
			Proxy: nil, MaxIdleConns: 2 * conc, MaxIdleConnsPerHost: 2 * conc,
			IdleConnTimeout: 30 * time.Second,
		}},
		prios:   sortedWeights(w.Priorities),
		targets: c.routers,
	}
	if sc.Topology.Admission == AdmissionDirect {
		t.targets = nil
		for _, e := range c.engines {
			t.targets = append(t.targets, &routerNode{id: e.id, addr: e.addr})
		}
	}
	tw := w.Tenants
	if len(tw) == 0 {
		tw = map[string]float64{}
		for _, tn := range sc.Topology.Tenants {
			tw[tn.Name] = 1
		}
	}
	t.tenants = sortedWeights(tw)
	return t
}

func (d Dist) draw(rng *rand.Rand) int {
	if d.Max <= d.Min {
		return d.Min
	}
	return d.Min + rng.IntN(d.Max-d.Min+1)
}

// request is one generated request.
type request struct {
	id       string
	tenant   string
	priority string
	chat     bool
	stream   bool
	prompt   int
	maxTok   int
	text     string
}

func (t *traffic) gen(rng *rand.Rand, id string) request {
	w := t.sc.Workload
	r := request{
		id:       id,
		tenant:   pick(rng, t.tenants),
		priority: pick(rng, t.prios),
		chat:     rng.Float64() < *w.Chat,
		stream:   rng.Float64() < w.Stream,
		prompt:   w.PromptTokens.draw(rng),
		maxTok:   w.OutputTokens.draw(rng),
	}
	// Drawn only when set, so the other scenarios' draws stay as they were.
	if w.NoMaxTokens > 0 && rng.Float64() < w.NoMaxTokens {
		r.maxTok = 0
	}
	// Four-letter words are one token each for the engines' tokenizer.
	var b strings.Builder
	b.Grow(r.prompt * 5)
	for i := range r.prompt {
		if i > 0 {
			b.WriteByte(' ')
		}
		for range 4 {
			b.WriteByte(byte('a' + rng.IntN(26)))
		}
	}
	r.text = b.String()
	return r
}

// router picks the next router (or engine, direct) in rotation that is up.
func (t *traffic) router() *routerNode {
	rs := t.targets
	for range len(rs) {
		r := rs[t.rr.Add(1)%uint64(len(rs))]
		if !r.down.Load() {
			return r
		}
	}
	return nil
}

// run issues requests until stop, then waits for those in flight (or,
// with CutAtEnd, cancels them).
func (t *traffic) run(ctx context.Context, stop time.Time) {
	w := t.sc.Workload
	if w.CutAtEnd {
		lctx, cancel := context.WithDeadline(ctx, stop)
		defer cancel()
		ctx = lctx
	}
	var wg sync.WaitGroup
	if w.Concurrency > 0 {
		for i := range w.Concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(w.Seed, uint64(i)+1))
				for seq := 0; time.Now().Before(stop) && ctx.Err() == nil; seq++ {
					req := t.gen(rng, fmt.Sprintf("chaos-%d-%d-%d", w.Seed, i, seq))
					wait := t.do(ctx, req)
					if wait > 0 {
						select {
						case <-ctx.Done():
						case <-time.After(wait):
						}
					}
				}
			}()
		}
		wg.Wait()
		return
	}
	// Open loop: Poisson arrivals, at most MaxInFlight at once; an arrival
	// finding the pool full is dropped and counted as shed by the client.
	rng := rand.New(rand.NewPCG(w.Seed, 0))
	sem := make(chan struct{}, w.MaxInFlight)
	next := time.Now()
	begin := stop.Add(-w.Duration.D()) // load start: the spike's origin
	for seq := 0; ctx.Err() == nil; seq++ {
		rate := w.rateAt(next.Sub(begin))
		next = next.Add(time.Duration(-math.Log(1-rng.Float64()) / rate * float64(time.Second)))
		if next.After(stop) {
			break
		}
		req := t.gen(rng, fmt.Sprintf("chaos-%d-o-%d", w.Seed, seq))
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(next)):
		}
		select {
		case sem <- struct{}{}:
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				t.do(ctx, req)
			}()
		default:
			now := t.rec.now()
			t.rec.request(RequestEvent{T: now, End: now, Tenant: req.tenant, Err: "client: in-flight bound reached, arrival shed"})
		}
	}
	wg.Wait()
}

// do sends req (twice under duplicate_retries) and returns how long the
// client should wait before its next request.
func (t *traffic) do(ctx context.Context, req request) time.Duration {
	r := t.router()
	if r == nil {
		return 50 * time.Millisecond // every router is down; the balancer has none to offer
	}
	t.issued.Add(1)
	if time.Now().UnixNano() < t.dupUntil.Load() {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); t.send(ctx, r, req, true) }()
		wait := t.send(ctx, r, req, false)
		wg.Wait()
		return wait
	}
	return t.send(ctx, r, req, false)
}

func (t *traffic) send(ctx context.Context, r *routerNode, req request, dup bool) time.Duration {
	w := t.sc.Workload
	model := t.sc.Topology.Model
	body := map[string]any{"model": model}
	if req.maxTok > 0 {
		body["max_tokens"] = req.maxTok
	}
	endpoint := "/v1/completions"
	if req.chat {
		endpoint = "/v1/chat/completions"
		body["messages"] = []map[string]string{{"role": "user", "content": req.text}}
	} else {
		body["prompt"] = req.text
	}
	if req.stream {
		body["stream"] = true
		body["stream_options"] = map[string]any{"include_usage": true}
	}
	b, _ := json.Marshal(body)
	ev := RequestEvent{
		Router: r.id, Tenant: req.tenant, Priority: req.priority, Endpoint: endpoint, Stream: req.stream,
		Prompt: req.prompt, MaxTokens: req.maxTok, Duplicate: dup,
	}
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, w.Timeout.D())
	defer cancel()
	var gaveUp *time.Timer
	if req.stream && w.FirstTokenTimeout > 0 {
		gaveUp = time.AfterFunc(w.FirstTokenTimeout.D(), cancel)
		ev.firstToken = func() { gaveUp.Stop() }
	}
	wait := t.exchange(rctx, r, endpoint, b, req, &ev, start)
	end := time.Now()
	if gaveUp != nil && ev.TTFTMS == 0 && !gaveUp.Stop() && ctx.Err() == nil && ev.Status/100 != 4 && ev.Status != 503 {
		ev.Err = fmt.Sprintf("%s: no first token within %s", errFirstToken, w.FirstTokenTimeout)
	}
	if w.CutAtEnd && ctx.Err() != nil && (ev.Err != "" || ev.Status == 0) {
		ev.Err = errCutAtEnd
	}
	ev.T, ev.End, ev.LatencyMS = t.rec.since(start), t.rec.since(end), float64(end.Sub(start).Microseconds())/1000
	ev.firstToken = nil
	t.rec.request(ev)
	return wait
}

// errFirstToken starts the Err of a stream the client gave up on for want
// of a first token (workload.first_token_timeout).
const errFirstToken = "first token timeout"

// errCutAtEnd is the Err of a request CutAtEnd cancelled ("client:"
// errors are the client's own, not the system's).
const errCutAtEnd = "client: cut at end of load"

// usageOf reads the completion (and prompt) tokens of a body or stream
// chunk's usage.
func usageOf(b []byte) (int, bool, int) {
	var u struct {
		Usage *struct {
			CompletionTokens int `json:"completion_tokens"`
			PromptTokens     int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(b, &u) != nil || u.Usage == nil {
		return 0, false, 0
	}
	return u.Usage.CompletionTokens, true, u.Usage.PromptTokens
}

// hasText reports whether a stream chunk carries generated text (a chat
// delta's content or a completion's text): the first token, for TTFT.
func hasText(b []byte) bool {
	var c struct {
		Choices []struct {
			Text  string `json:"text"`
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if json.Unmarshal(b, &c) != nil {
		return false
	}
	for _, ch := range c.Choices {
		if ch.Text != "" || ch.Delta.Content != "" {
			return true
		}
	}
	return false
}

func (t *traffic) exchange(ctx context.Context, r *routerNode, endpoint string, body []byte, req request, ev *RequestEvent, start time.Time) time.Duration {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.addr+endpoint, bytes.NewReader(body))
	if err != nil {
		ev.Err = err.Error()
		return 0
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Authorization", "Bearer sk-"+req.tenant)
	hreq.Header.Set("X-Request-Id", req.id)
	if req.priority != "" {
		hreq.Header.Set("X-Priority", req.priority)
	}
	resp, err := t.client.Do(hreq)
	if err != nil {
		ev.Err = err.Error()
		return 50 * time.Millisecond
	}
	defer resp.Body.Close()
	ev.Status = resp.StatusCode
	ev.HeadersMS = float64(time.Since(start).Microseconds()) / 1000
	ev.Engine = resp.Header.Get("X-Leasehold-Engine")
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct {
				Code any `json:"code"`
			} `json:"error"`
		}
		rb, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(rb, &e) == nil && e.Error.Code != nil {
			ev.Code = fmt.Sprint(e.Error.Code)
		}
		ev.RetryAfter = resp.Header.Get("Retry-After")
		if s, err := strconv.Atoi(ev.RetryAfter); err == nil {
			return min(time.Duration(s)*time.Second, t.sc.Workload.Backoff.D())
		}
		return t.sc.Workload.Backoff.D()
	}
	if !req.stream {
		rb, err := io.ReadAll(resp.Body)
		if err != nil {
			ev.Err = "body: " + err.Error()
		}
		ev.Completion, _, ev.UsagePrompt = usageOf(rb)
		return 0
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	done := false
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		switch {
		case !ok:
		case string(data) == "[DONE]":
			done = true
		case ev.TTFTMS == 0 && hasText(data):
			ev.TTFTMS = float64(time.Since(start).Microseconds()) / 1000
			if ev.firstToken != nil {
				ev.firstToken()
			}
		case bytes.Contains(data, []byte(`"usage":{`)):
			if n, ok, p := usageOf(data); ok {
				ev.Completion, ev.UsagePrompt = n, p
			}
		}
	}
	if !done {
		ev.Err = "stream cut before [DONE]"
		if err := sc.Err(); err != nil {
			ev.Err += ": " + err.Error()
		}
	}
	return 0
}
