package estimate

// Context lengths. A pool's context length (max_model_len: the most prompt
// + output tokens of one sequence) bounds a request's max_tokens, and is
// what a sequence reserves when the request gives no max_tokens. The fleet
// file's pools[].max_model_len is taken as is. Without it the pool's
// engines are asked: vLLM and SGLang answer GET /v1/models with
// data[].max_model_len, TGI answers GET /info with max_total_tokens. Two
// bounds follow:
//
//	limit   = the smallest context of the engines that answered: a larger
//	          max_tokens is refused (400), so a request fits every
//	          candidate engine;
//	reserve = the largest context of the pool's engines, one that has not
//	          answered counting as --max-model-len: no sequence reserves
//	          more, one without max_tokens reserves exactly this, so a lease
//	          never undershoots what the granted engine may hold.
//
// In a pool whose engines differ, a request is also matched to engines by
// its prompt plus max_tokens (Bounds.Fit): engines too small are not
// offered when the prompt is counted exactly, and offered last when it is
// estimated. In the usual pool of identical engines both bounds are the
// engines' value. While
// no engine has answered, or if none ever does, both are --max-model-len
// (logged once per pool). Engines that have not answered are asked again on
// every round of the fleet applier (ledger admission, internal/fleetapply), which asks
// before it configures the pool, so a pool is ready only once its engines
// have been asked; local admission asks once, at start. Engines that have
// answered are asked again every contextRecheck: an engine redeployed with
// a longer context must not be under-leased for long (a request without
// max_tokens reserves the old, shorter one). A failed re-ask keeps the
// answer had.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// maxInfoBody bounds an engine's /v1/models or /info answer.
const maxInfoBody = 1 << 20

// contextRecheck is how often an engine that reported its context length is
// asked again.
const contextRecheck = time.Minute

// Bounds is one pool's context-length bounds, in tokens.
type Bounds struct {
	// Limit bounds max_tokens; Reserve is the most one sequence reserves.
	Limit, Reserve int64
	// Reported is how many of the pool's engines answered (0: the
	// fallback, or the fleet file's value).
	Reported int
	// Engines is each engine's context (--max-model-len for one that has
	// not answered) when they differ; nil in a pool of equal engines.
	Engines map[ledger.EngineID]int64
}

// Fit orders cands for a request that needs need tokens of context (its
// prompt plus max_tokens) on one engine. With an exact prompt count an
// engine too small for it is dropped: it could only refuse the request.
// With an estimated one (which errs high) such engines go last, in their
// order, and stay candidates. In a pool of equal engines, or when every
// candidate would be dropped, cands is returned as is.
func (l Bounds) Fit(cands []ledger.EngineID, need int64, exact bool) []ledger.EngineID {
	if l.Engines == nil || need <= 0 {
		return cands
	}
	fits := make([]ledger.EngineID, 0, len(cands))
	var small []ledger.EngineID
	for _, id := range cands {
		if n, ok := l.Engines[id]; ok && n < need {
			small = append(small, id)
			continue
		}
		fits = append(fits, id)
	}
	switch {
	case len(small) == 0 || len(fits) == 0:
		return cands
	case exact:
		return fits
	}
	return append(fits, small...)
}

// ContextConfig is what ContextLens needs.
type ContextConfig struct {
	Fleet    *fleet.Fleet  // required
	Fallback int64         // --max-model-len: a pool's bounds until an engine answers
	Client   *http.Client  // required
	Timeout  time.Duration // bounds one engine's answer
	Log      *slog.Logger  // required
	Clock    clockwork.Clock
}

// ContextLens owns every pool's Bounds. Get is lock-free; Discover may run
// beside it.
type ContextLens struct {
	fleet    *fleet.Fleet
	fallback int64 // --max-model-len
	client   *http.Client
	timeout  time.Duration // one engine's answer
	log      *slog.Logger
	clock    clockwork.Clock // when an answer was had

	// cur is each fleet pool's bounds: the map is built once, the values
	// replaced whole.
	cur map[ledger.PoolID]*atomic.Pointer[Bounds]

	// recheck is contextRecheck (shorter in tests).
	recheck time.Duration

	// mu guards reported, askedAt and warned.
	mu       sync.Mutex
	reported map[telemetry.EngineKey]int64
	askedAt  map[telemetry.EngineKey]time.Time // when reported was had
	warned   map[ledger.PoolID]bool            // the fallback was logged
}

// NewContextLens returns every pool of cfg.Fleet at its fleet file's
// max_model_len, else at cfg.Fallback until Discover hears from its
// engines. A nil cfg.Clock is the real clock.
func NewContextLens(cfg ContextConfig) *ContextLens {
	f, fallback := cfg.Fleet, cfg.Fallback
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	c := &ContextLens{fleet: f, fallback: fallback, client: cfg.Client, timeout: cfg.Timeout, log: cfg.Log, clock: cfg.Clock, recheck: contextRecheck,
		cur: map[ledger.PoolID]*atomic.Pointer[Bounds]{}, reported: map[telemetry.EngineKey]int64{},
		askedAt: map[telemetry.EngineKey]time.Time{}, warned: map[ledger.PoolID]bool{}}
	for _, p := range f.Pools {
		v := Bounds{Limit: fallback, Reserve: fallback}
		if p.MaxModelLen > 0 {
			v = Bounds{Limit: p.MaxModelLen, Reserve: p.MaxModelLen}
		}
		c.cur[p.Name] = &atomic.Pointer[Bounds]{}
		c.cur[p.Name].Store(&v)
	}
	return c
}

// Get returns pool's bounds; a pool not in the fleet file gets the
// fallback.
func (c *ContextLens) Get(pool ledger.PoolID) Bounds {
	if v := c.cur[pool]; v != nil {
		return *v.Load()
	}
	return Bounds{Limit: c.fallback, Reserve: c.fallback}
}

// Limit is pool's bound on max_tokens.
func (c *ContextLens) Limit(pool ledger.PoolID) int64 { return c.Get(pool).Limit }

// DiscoverAll runs Discover for every pool.
func (c *ContextLens) DiscoverAll(ctx context.Context) {
	for _, p := range c.fleet.Pools {
		c.Discover(ctx, p.Name)
	}
}

// Discover asks pool's engines that have not answered yet, or not within
// recheck, for their context length and updates the pool's bounds. A pool
// whose fleet entry gives max_model_len is left alone.
func (c *ContextLens) Discover(ctx context.Context, pool ledger.PoolID) {
	p, ok := c.fleet.Pool(pool)
	if !ok || p.MaxModelLen > 0 {
		return
	}
	var errs []string
	for _, e := range p.Engines {
		key := telemetry.EngineKey{Pool: pool, Engine: e.ID}
		c.mu.Lock()
		_, known := c.reported[key]
		fresh := known && c.clock.Since(c.askedAt[key]) < c.recheck
		c.mu.Unlock()
		if fresh {
			continue
		}
		n, err := c.ask(ctx, pool, e)
		if err != nil {
			if known {
				c.log.Debug("engine did not confirm its context length; keeping the last answer", "pool", pool, "engine", e.ID, "err", err)
				c.mu.Lock()
				c.askedAt[key] = c.clock.Now() // not again before recheck
				c.mu.Unlock()
			} else {
				errs = append(errs, err.Error())
			}
			continue
		}
		c.mu.Lock()
		if prev, ok := c.reported[key]; ok && prev != n {
			c.log.Info("engine's context length changed", "pool", pool, "engine", e.ID, "from", prev, "to", n)
		}
		c.reported[key] = n
		c.askedAt[key] = c.clock.Now()
		c.mu.Unlock()
	}
	c.update(p, errs)
}

// update recomputes p's bounds from the answers had, logging a change, or
// the fallback once.
func (c *ContextLens) update(p fleet.Pool, errs []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var lo, hi int64
	n, missing := 0, false
	per := make(map[ledger.EngineID]int64, len(p.Engines))
	for _, e := range p.Engines {
		v, ok := c.reported[telemetry.EngineKey{Pool: p.Name, Engine: e.ID}]
		if !ok {
			missing = true
			per[e.ID] = c.fallback
			continue
		}
		per[e.ID] = v
		if n == 0 || v < lo {
			lo = v
		}
		hi = max(hi, v)
		n++
	}
	next := Bounds{Limit: c.fallback, Reserve: c.fallback}
	if n > 0 {
		next = Bounds{Limit: lo, Reserve: hi, Reported: n}
		if missing {
			next.Reserve = max(hi, c.fallback)
		}
		smallest := lo
		if missing {
			smallest = min(lo, c.fallback)
		}
		if smallest != next.Reserve {
			next.Engines = per
		}
	}
	prev := c.cur[p.Name].Swap(&next)
	switch {
	case next.Reported == 0 && !c.warned[p.Name]:
		c.warned[p.Name] = true
		c.log.Warn("no engine of the pool reported its context length; using --max-model-len until one does",
			"pool", p.Name, "max_model_len", c.fallback, "errors", strings.Join(errs, "; "))
	case next.Reported > 0 && (prev.Limit != next.Limit || prev.Reserve != next.Reserve || prev.Reported != next.Reported):
		c.log.Info("pool context length from its engines", "pool", p.Name, "max_model_len", next.Limit,
			"reserve_per_sequence", next.Reserve, "engines_reported", next.Reported, "engines", len(p.Engines))
		if len(errs) > 0 {
			c.log.Debug("engines that did not report their context length (asked again next round)", "pool", p.Name, "errors", strings.Join(errs, "; "))
		}
	}
}

// ask reads engine e's context length: GET /info max_total_tokens for TGI,
// else GET /v1/models max_model_len of the entry naming the pool (else the
// largest listed).
func (c *ContextLens) ask(ctx context.Context, pool ledger.PoolID, e fleet.Engine) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	url := strings.TrimRight(e.URL, "/") + "/v1/models"
	if e.Format == telemetry.FormatTGI {
		url = strings.TrimRight(e.URL, "/") + "/info"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, fmt.Errorf("engine %s: %w", e.ID, err)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("engine %s: GET %s: %w", e.ID, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxInfoBody))
	if err != nil {
		return 0, fmt.Errorf("engine %s: GET %s: %w", e.ID, url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("engine %s: GET %s: HTTP %s", e.ID, url, resp.Status)
	}
	var n int64
	if e.Format == telemetry.FormatTGI {
		var info struct {
			MaxTotalTokens int64 `json:"max_total_tokens"`
		}
		if err := json.Unmarshal(body, &info); err != nil {
			return 0, fmt.Errorf("engine %s: GET %s: %w", e.ID, url, err)
		}
		n = info.MaxTotalTokens
	} else {
		var models struct {
			Data []struct {
				ID          string `json:"id"`
				MaxModelLen int64  `json:"max_model_len"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &models); err != nil {
			return 0, fmt.Errorf("engine %s: GET %s: %w", e.ID, url, err)
		}
		for _, m := range models.Data {
			if m.ID == string(pool) && m.MaxModelLen > 0 {
				n = m.MaxModelLen
				break
			}
			n = max(n, m.MaxModelLen)
		}
	}
	if n < 1 || n > ledger.MaxAmount {
		return 0, fmt.Errorf("engine %s: GET %s: no context length in 1..%d in the answer", e.ID, url, ledger.MaxAmount)
	}
	return n, nil
}
