package chaos

// The event log: one JSON object per line, each with "type" and "t"
// (seconds since load start). Types: request, fault, engine (a sample of
// one engine's /admin/stats), audit (a sample of the reserver's
// /v1/audit), reclaim (a killed holder's leases gone), breaker (an
// engine's circuit breaker changed between two audits). The recorder keeps
// what the checks need in memory as it writes.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// RequestEvent is one client request's outcome.
type RequestEvent struct {
	Type      string  `json:"type"` // "request"
	T         float64 `json:"t"`    // start
	End       float64 `json:"end"`
	LatencyMS float64 `json:"latency_ms"`
	Router    string  `json:"router"`
	Tenant    string  `json:"tenant"`
	Priority  string  `json:"priority,omitempty"`
	Endpoint  string  `json:"endpoint"`
	Stream    bool    `json:"stream,omitempty"`
	Prompt    int     `json:"prompt_tokens"`
	MaxTokens int     `json:"max_tokens"`
	// Status is the HTTP status (0: no response).
	Status int `json:"status"`
	// Code is the OpenAI error code of a rejection.
	Code       string `json:"code,omitempty"`
	RetryAfter string `json:"retry_after,omitempty"`
	// Err is a transport error, or a stream cut before its end.
	Err string `json:"err,omitempty"`
	// Duplicate marks the second copy sent under duplicate_retries.
	Duplicate bool `json:"duplicate,omitempty"`
	// TTFTMS is the time to the first generated text of a streamed
	// request; Completion the completion tokens its usage reported.
	TTFTMS     float64 `json:"ttft_ms,omitempty"`
	Completion int     `json:"completion_tokens,omitempty"`
	// UsagePrompt is the prompt tokens the engine's usage reported (the
	// client's Prompt is what it drew).
	UsagePrompt int `json:"usage_prompt_tokens,omitempty"`
	// HeadersMS is the time to the response's status and headers (for a
	// stream through a router: to the engine's first response byte).
	HeadersMS float64 `json:"headers_ms,omitempty"`
	// Engine is the engine that answered (the router's
	// X-Leasehold-Engine header).
	Engine string `json:"engine,omitempty"`

	// firstToken, when set, is called at the first token.
	firstToken func()
}

// FaultEvent is one fault step.
type FaultEvent struct {
	Type   string  `json:"type"` // "fault"
	T      float64 `json:"t"`
	Kind   string  `json:"kind"`
	Target string  `json:"target,omitempty"`
	// Phase is inject or heal.
	Phase  string `json:"phase"`
	Detail string `json:"detail,omitempty"`
	Err    string `json:"err,omitempty"`
}

// EngineSample is one engine's ground truth at T.
type EngineSample struct {
	Type             string  `json:"type"` // "engine"
	T                float64 `json:"t"`
	Engine           string  `json:"engine"`
	AdmittedDemand   int64   `json:"admitted_demand_tokens"`
	AcceptedSeqs     int     `json:"accepted_sequences"`
	KVCapacity       int64   `json:"kv_capacity_tokens"`
	Slots            int     `json:"slots"`
	PeakDemand       int64   `json:"peak_admitted_demand_tokens"`
	PeakAcceptedSeqs int     `json:"peak_accepted_sequences"`
	// Actual demand: Σ prompt + tokens generated so far over accepted,
	// unfinished sequences, what an elastic reservation protects.
	ActualDemand int64 `json:"actual_demand_tokens"`
	PeakActual   int64 `json:"peak_actual_demand_tokens"`
	Preemptions  int64 `json:"preemptions"`
	Generated    int64 `json:"generation_tokens"`
	// PeakRunning and PeakKVUsed: the most sequences the engine ran at
	// once and the most KV tokens its running sequences held.
	PeakRunning int    `json:"peak_running"`
	PeakKVUsed  int64  `json:"peak_kv_tokens_used"`
	Err         string `json:"err,omitempty"`
}

// AuditSample is the reserver audit at T.
type AuditSample struct {
	Type     string           `json:"type"` // "audit"
	T        float64          `json:"t"`
	Leases   int              `json:"leases"`
	ByHolder map[string]int   `json:"by_holder,omitempty"`
	Reserved map[string]int64 `json:"reserved_kv,omitempty"`
	// PriorityFill is, per priority class, the largest fraction of one
	// engine's KV capacity its leases hold.
	PriorityFill map[string]float64 `json:"priority_fill,omitempty"`
	// TenantShare is, per tenant, the fraction of the pool's KV capacity
	// its leases hold.
	TenantShare map[string]float64 `json:"tenant_share,omitempty"`
	// Stale lists the engines the audit shows with stale telemetry.
	Stale []string `json:"stale,omitempty"`
	// Breakers is each engine's circuit-breaker state (closed, open,
	// half_open) where the audit shows one.
	Breakers map[string]string `json:"breakers,omitempty"`
	// BreakerFailures is, per engine whose count is not zero, the
	// consecutive failed dispatches its closed breaker has counted.
	BreakerFailures map[string]int `json:"breaker_failures,omitempty"`
	Err             string         `json:"err,omitempty"`
}

// ReclaimEvent is how long a router's leases outlived its death (SIGKILL)
// or its silence (SIGSTOP, ledger partition) longer than the session TTL.
type ReclaimEvent struct {
	Type   string  `json:"type"` // "reclaim"
	T      float64 `json:"t"`
	Router string  `json:"router"`
	// Cause is the fault kind; Dead is set for a SIGKILL (the holder can
	// never come back, so its leases must never reappear).
	Cause   string   `json:"cause"`
	Dead    bool     `json:"dead"`
	Holders []string `json:"holders"`
	// Leases held at the kill.
	Leases int `json:"leases"`
	// Seconds from the kill until none was left; -1 if never seen gone.
	Seconds float64 `json:"seconds"`
}

// auditJSON is the part of GET /v1/audit the runner reads.
type auditJSON struct {
	Pools []struct {
		Pool            string     `json:"pool"`
		RecoveringUntil *time.Time `json:"recovering_until"`
	} `json:"pools"`
	Engines []struct {
		Engine  string          `json:"engine"`
		Stale   bool            `json:"stale"`
		Breaker json.RawMessage `json:"breaker"`
	} `json:"engines"`
	Leases []struct {
		ID       string `json:"id"`
		Holder   string `json:"holder"`
		Engine   string `json:"engine"`
		Tenant   string `json:"tenant"`
		Priority string `json:"priority"`
		KVTokens int64  `json:"kv_tokens"`
	} `json:"leases"`
}

// recorder writes the event log and keeps its events.
type recorder struct {
	start time.Time

	mu       sync.Mutex // guards everything below
	w        *bufio.Writer
	f        *os.File
	requests []RequestEvent
	faults   []FaultEvent
	engines  []EngineSample
	audits   []AuditSample
	reclaims []ReclaimEvent
	// breaker is each engine's last breaker state seen, breakerEvents
	// its changes.
	breaker       map[string]string
	breakerEvents []BreakerEvent
}

func newRecorder(path string) (*recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &recorder{f: f, w: bufio.NewWriterSize(f, 64<<10), start: time.Now()}, nil
}

// since is seconds since load start.
func (r *recorder) since(t time.Time) float64 { return t.Sub(r.start).Seconds() }

func (r *recorder) now() float64 { return r.since(time.Now()) }

func (r *recorder) write(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return // every event type marshals
	}
	_, _ = r.w.Write(append(b, '\n'))
}

// event is a logged event type; stamp sets its "type".
type event interface{ stamp() }

func (e *RequestEvent) stamp() { e.Type = "request" }
func (e *FaultEvent) stamp()   { e.Type = "fault" }
func (e *EngineSample) stamp() { e.Type = "engine" }
func (e *AuditSample) stamp()  { e.Type = "audit" }
func (e *ReclaimEvent) stamp() { e.Type = "reclaim" }

// record stamps e, appends it to one of r's event lists and writes it to
// the log, under r.mu so the list and the log keep the same order.
func record[T any, P interface {
	*T
	event
}](r *recorder, list *[]T, e T) {
	P(&e).stamp()
	r.mu.Lock()
	defer r.mu.Unlock()
	*list = append(*list, e)
	r.write(e)
}

func (r *recorder) request(e RequestEvent) { record(r, &r.requests, e) }
func (r *recorder) fault(e FaultEvent)     { record(r, &r.faults, e) }
func (r *recorder) engine(e EngineSample)  { record(r, &r.engines, e) }
func (r *recorder) audit(e AuditSample)    { record(r, &r.audits, e) }
func (r *recorder) reclaim(e ReclaimEvent) { record(r, &r.reclaims, e) }

func (r *recorder) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.w.Flush(); err != nil {
		r.f.Close()
		return err
	}
	return r.f.Close()
}

// sampleEngines records every engine's /admin/stats; it returns the stats.
func (c *cluster) sampleEngines(ctx context.Context, rec *recorder) []EngineSample {
	out := make([]EngineSample, len(c.engines))
	var wg sync.WaitGroup
	for i, e := range c.engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// /admin/stats names its fields as EngineSample does.
			s := EngineSample{Engine: e.id}
			if err := getJSON(ctx, "http://"+e.addr+"/admin/stats", "", &s); err != nil {
				s = EngineSample{Engine: e.id, Err: err.Error()}
			}
			s.T = rec.now()
			out[i] = s
		}()
	}
	wg.Wait()
	for _, s := range out {
		rec.engine(s)
	}
	return out
}

// fetchAudit reads the audit from the first reserver that answers.
func (c *cluster) fetchAudit(ctx context.Context) (*auditJSON, error) {
	var errs []string
	for _, r := range c.reservers {
		if !r.running() {
			continue
		}
		var a auditJSON
		err := getJSON(ctx, "http://"+r.httpAddr+"/v1/audit", c.token, &a)
		if err == nil {
			return &a, nil
		}
		errs = append(errs, err.Error())
	}
	return nil, fmt.Errorf("audit: no reserver answered: %s", strings.Join(errs, "; "))
}

// sampleAudit records the audit.
func (c *cluster) sampleAudit(ctx context.Context, rec *recorder) (*auditJSON, error) {
	a, err := c.fetchAudit(ctx)
	s := AuditSample{T: rec.now()}
	if err != nil {
		s.Err = err.Error()
	} else {
		s.Leases = len(a.Leases)
		s.ByHolder, s.Reserved = map[string]int{}, map[string]int64{}
		s.PriorityFill, s.TenantShare = map[string]float64{}, map[string]float64{}
		capOf, pool := map[string]int64{}, int64(0)
		for _, e := range c.engines {
			capOf[e.id] = e.kvTokens
			pool += e.kvTokens
		}
		byPrio := map[[2]string]int64{}
		byTenant := map[string]int64{}
		for _, l := range a.Leases {
			s.ByHolder[l.Holder]++
			s.Reserved[l.Engine] += l.KVTokens
			byPrio[[2]string{l.Priority, l.Engine}] += l.KVTokens
			byTenant[l.Tenant] += l.KVTokens
		}
		for k, v := range byPrio {
			if capOf[k[1]] > 0 {
				s.PriorityFill[k[0]] = max(s.PriorityFill[k[0]], float64(v)/float64(capOf[k[1]]))
			}
		}
		for _, e := range a.Engines {
			if e.Stale {
				s.Stale = append(s.Stale, e.Engine)
			}
			if st, ok := breakerState(e.Breaker); ok {
				if s.Breakers == nil {
					s.Breakers = map[string]string{}
				}
				s.Breakers[e.Engine] = st
			}
			if n := breakerFailures(e.Breaker); n > 0 {
				if s.BreakerFailures == nil {
					s.BreakerFailures = map[string]int{}
				}
				s.BreakerFailures[e.Engine] = n
			}
		}
		for k, v := range byTenant {
			if pool > 0 {
				s.TenantShare[k] = float64(v) / float64(pool)
			}
		}
	}
	rec.audit(s)
	if s.Breakers != nil {
		rec.breakers(s.T, s.Breakers)
	}
	return a, err
}

// holdersOf returns the holder ids of router id in a (holders are
// "ID/<random>"), sorted.
func holdersOf(a *auditJSON, id string) (holders []string, leases int) {
	seen := map[string]bool{}
	for _, l := range a.Leases {
		if strings.HasPrefix(l.Holder, id+"/") || l.Holder == id {
			leases++
			if !seen[l.Holder] {
				seen[l.Holder] = true
				holders = append(holders, l.Holder)
			}
		}
	}
	sort.Strings(holders)
	return holders, leases
}

// ReadEvents reads an event log back into its typed events.
func ReadEvents(path string) (reqs []RequestEvent, faults []FaultEvent, engines []EngineSample, audits []AuditSample, reclaims []ReclaimEvent, err error) {
	reqs, faults, engines, audits, reclaims, _, err = readEvents(path)
	return
}

// ReadBreakerEvents reads the breaker events of an event log.
func ReadBreakerEvents(path string) ([]BreakerEvent, error) {
	_, _, _, _, _, bs, err := readEvents(path)
	return bs, err
}

func readEvents(path string) (reqs []RequestEvent, faults []FaultEvent, engines []EngineSample, audits []AuditSample, reclaims []ReclaimEvent, breakers []BreakerEvent, err error) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	decode := map[string]func(line []byte) error{
		"request": func(line []byte) error { return appendJSON(line, &reqs) },
		"fault":   func(line []byte) error { return appendJSON(line, &faults) },
		"engine":  func(line []byte) error { return appendJSON(line, &engines) },
		"audit":   func(line []byte) error { return appendJSON(line, &audits) },
		"reclaim": func(line []byte) error { return appendJSON(line, &reclaims) },
		"breaker": func(line []byte) error { return appendJSON(line, &breakers) },
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var head struct {
			Type string `json:"type"`
		}
		if err = json.Unmarshal(line, &head); err != nil {
			return
		}
		if d, ok := decode[head.Type]; ok {
			if err = d(line); err != nil {
				return
			}
		}
	}
	err = sc.Err()
	return
}

// appendJSON decodes line as one T onto list.
func appendJSON[T any](line []byte, list *[]T) error {
	var e T
	err := json.Unmarshal(line, &e)
	*list = append(*list, e)
	return err
}
