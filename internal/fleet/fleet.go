package fleet

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// Defaults for fields the file may omit.
const (
	DefaultSessionTTL     = 10 * time.Second
	MinSessionTTL         = time.Second
	DefaultLeaseTTL       = 30 * time.Second
	DefaultRecoveryWindow = ledger.DefaultRecoveryWindow
	DefaultRetryAfter     = ledger.DefaultRetryAfter
	DefaultStaleAfter     = 10 * time.Second
	DefaultStalePolicy    = ledger.StaleHold
	DefaultHeadroom       = 0.9
	// DefaultReserve is how a pool reserves when the file does not say.
	DefaultReserve = ledger.ReserveElastic
	// DefaultGrowthHeadroom is the share of each engine's KV capacity an
	// elastic pool keeps free for its leases' growth (docs/benchmarks.md,
	// "Goodput", shows how it was chosen).
	DefaultGrowthHeadroom = 0.1
	// DefaultPriority is the class used when the file lists none: it may
	// fill an engine completely.
	DefaultPriority ledger.PriorityName = "standard"
	// MaxFileSize bounds what Load reads.
	MaxFileSize = 16 << 20
	// MinMaxModelLen is the smallest pools[].max_model_len accepted.
	MinMaxModelLen = 16
	// MinTTFTSLO is the smallest priorities[].ttft_slo accepted.
	MinTTFTSLO = 10 * time.Millisecond
)

// DefaultMediaTokens is what a router reserves per media item of a chat
// request when the pool does not say: enough for most vision models'
// images (LLaVA-1.5 576 tokens, Gemma 3 256, InternVL2 up to 3,328,
// Pixtral 4,096 at 1024x1024; dynamic-resolution models such as Qwen2-VL
// take more for large images), a 30 s audio clip at Whisper's 50
// frames/s, and a short sampled video.
var DefaultMediaTokens = MediaTokens{Image: 4096, Audio: 1500, Video: 16384}

// MediaTokens is the KV tokens one media item of a chat request takes at
// the engine, per kind; 0 means the pool's model takes no such input.
type MediaTokens struct {
	Image, Audio, Video int64
}

// kinds lists m by the fleet file's names for the kinds.
func (m MediaTokens) kinds() []struct {
	kind   string
	tokens int64
} {
	return []struct {
		kind   string
		tokens int64
	}{{"image", m.Image}, {"audio", m.Audio}, {"video", m.Video}}
}

// Fleet is a parsed, defaulted and validated fleet file.
type Fleet struct {
	Pools   []Pool
	Tenants []Tenant
	// Priorities are the classes, in file order; the implicit "standard"
	// (max_fill 1.0) when the file lists none.
	Priorities []ledger.PrioritySpec
	// DefaultPriority is the class of a request that names none.
	DefaultPriority ledger.PriorityName
	// TTFTSLOs is each class's priorities[].ttft_slo, the time to first
	// token routers admit a request of the class against (internal/ttft);
	// a class absent has none. Routers only: the ledger never sees it.
	TTFTSLOs map[ledger.PriorityName]time.Duration
	Lease    Lease
	// PriorityPolicy is what a router does with a request for a class its
	// tenant may not use (priority_policy, tenancy.go); "" is refuse.
	PriorityPolicy PriorityPolicy
}

// Pool is the engines serving one model.
type Pool struct {
	// Name is the OpenAI "model" a request names.
	Name    ledger.PoolID
	Engines []Engine
	// RetryAfter is the hint sent with capacity rejections (default 1s).
	RetryAfter time.Duration
	// MaxModelLen is the engines' context length in tokens (prompt +
	// output of one sequence): a request's max_tokens may not exceed it,
	// and a request without max_tokens reserves it per sequence, so it must
	// not be below any engine's. 0 (omitted) means routers discover it from
	// the engines (GET /v1/models max_model_len; TGI: GET /info
	// max_total_tokens).
	MaxModelLen int64
	// MediaTokens is what routers reserve per image, audio clip and video
	// of a chat request in estimate mode, and on top of an engine's
	// /tokenize count (which counts a placeholder, not what the engine
	// expands it to). Routers raise it when engines report more; they
	// refuse a kind set to 0 before any lease.
	MediaTokens MediaTokens
	// Reserve is how leases reserve KV tokens: elastic (the default: the
	// prompt and an expected output, grown as the request generates) or
	// worst_case (every token the request could produce, up front).
	Reserve ledger.ReserveMode
	// GrowthHeadroom is the share of each engine's KV capacity new grants
	// leave free for growth: DefaultGrowthHeadroom in elastic pools unless
	// the file says, always 0 in worst_case pools.
	GrowthHeadroom float64
	// Breaker is the circuit breaker every engine of the pool has in the
	// ledger (pools[].breaker: failures, cooldown, probes, successes), the
	// ledger's defaults filled in for what the file omits; Failures -1
	// turns it off.
	Breaker ledger.BreakerSpec
	// FirstByteTimeout bounds the wait for an engine's response headers
	// (first_byte_timeout; 0, the default: no bound but the router's
	// --upstream-timeout). Past it the dispatch fails with
	// first_byte_timeout and the request may go to another engine. A
	// non-streamed answer's headers come with the whole answer: the bound
	// must exceed the pool's longest non-streamed generation.
	FirstByteTimeout time.Duration
	// EnginePriority passes each request's class to the engines as vLLM's
	// "priority" field (engine_priority, tenancy.go); off by default.
	EnginePriority bool
}

// Engine is one GPU engine replica.
type Engine struct {
	ID ledger.EngineID
	// URL is where requests are proxied (http or https).
	URL string
	// MetricsURL is the engine's Prometheus endpoint (default URL+"/metrics").
	MetricsURL string
	// Format is the metrics dialect (default vllm).
	Format telemetry.Format
	// KVFromMetrics is set when the file omits kv_tokens: capacity is the
	// engine's reported KV tokens × Headroom, known only after a scrape.
	KVFromMetrics bool
	// KVTokens is the configured admissible KV capacity in tokens; 0 exactly
	// when KVFromMetrics.
	KVTokens int64
	// Slots is the admissible number of concurrent sequences (required).
	Slots int64
	// StaleAfter is how long telemetry stays fresh (default 10s); 0 means
	// the engine is not scraped and not expected to report.
	StaleAfter time.Duration
	// StalePolicy applies while telemetry is stale (default hold).
	StalePolicy ledger.StalePolicy
	// Headroom is the fraction of discovered capacity that is admissible,
	// in (0, 1] (default 0.9); 0 when kv_tokens is configured.
	Headroom float64
}

// Tenant is a consumer with a quota in each pool it may use.
type Tenant struct {
	Name ledger.TenantID
	// APIKeys are the SHA-256 hashes of the tenant's bearer keys.
	APIKeys []KeyHash
	// KVShare is the share of each pool's KV tokens, in (0, 1].
	KVShare float64
	// SlotShare is the share of each pool's slots, in [0, 1]; 0 means no
	// slot quota.
	SlotShare float64
	// TokensPerMinute and RequestsPerMinute are the tenant's rate budgets
	// in each pool it may use, each pool counting its own (a sliding
	// minute, ledger/rate.go), shared by every router: tokens_per_minute
	// and requests_per_minute, 0..ledger.MaxAmount; 0 (omitted) is none.
	TokensPerMinute   int64
	RequestsPerMinute int64
	// Pools restricts the tenant to these pools; empty means every pool.
	Pools []ledger.PoolID
	// Tenancy: its classes, weight and queue bound (tenancy.go).
	TenantClasses
}

// Rated reports whether the tenant has a rate budget: its requests are
// then charged every token they may use (ledger.AcquireRequest.Tokens).
func (t Tenant) Rated() bool { return t.TokensPerMinute > 0 || t.RequestsPerMinute > 0 }

// RateCharge is the AcquireRequest.Tokens of a request of the tenant that
// may use tokens in all: tokens when the tenant is Rated, else 0 (nothing
// is charged, and a block lease may admit it).
func (t Tenant) RateCharge(tokens int64) int64 {
	if !t.Rated() {
		return 0
	}
	return tokens
}

// InPool reports whether the tenant may use pool p.
func (t Tenant) InPool(p ledger.PoolID) bool {
	if len(t.Pools) == 0 {
		return true
	}
	for _, q := range t.Pools {
		if q == p {
			return true
		}
	}
	return false
}

// Lease holds the timings routers use for holder sessions and leases.
type Lease struct {
	// SessionTTL: a router's leases are released this long after its last
	// keepalive (default 10s, at least 1s).
	SessionTTL time.Duration
	// LeaseTTL: a lease's deadline after each renewal (default the larger
	// of 30s and 3 × RenewInterval).
	LeaseTTL time.Duration
	// RenewInterval: how often a router keeps its session alive and renews
	// its leases (default SessionTTL/3; below SessionTTL and LeaseTTL).
	RenewInterval time.Duration
	// RecoveryWindow: how long after a new ledger epoch an engine takes
	// new grants only once a fresh observation shows what it holds, while
	// holders re-assert (default SessionTTL: a holder that cannot
	// re-assert has fenced itself by then); 0 disables it, otherwise at
	// least SessionTTL.
	RecoveryWindow time.Duration
	// OrphanHold: how long a lease the ledger ends (its router stopped
	// renewing) stays charged in full on an engine with telemetry, for a
	// router that is paused rather than dead (default 0: until the
	// engine's next observation). See ledger.Options.OrphanHold.
	OrphanHold time.Duration
}

// LedgerOptions returns the ledger options the lease timings imply.
func (l Lease) LedgerOptions() ledger.Options {
	o := ledger.Options{RecoveryWindow: l.RecoveryWindow, OrphanHold: l.OrphanHold}
	if l.RecoveryWindow == 0 {
		o.RecoveryWindow = -1 // disabled, not "default"
	}
	return o
}

// The file's shape. Pointers mark fields whose omission differs from zero;
// omitempty is for Marshal (decoding ignores it).
type fileYAML struct {
	Pools           []poolYAML     `yaml:"pools"`
	Tenants         []tenantYAML   `yaml:"tenants"`
	Priorities      []priorityYAML `yaml:"priorities,omitempty"`
	DefaultPriority string         `yaml:"default_priority,omitempty"`
	// PriorityPolicy is priority_policy (tenancy.go).
	PriorityPolicy string    `yaml:"priority_policy,omitempty"`
	Lease          leaseYAML `yaml:"lease"`
}

type poolYAML struct {
	Name        string         `yaml:"name"`
	Engines     []engineYAML   `yaml:"engines"`
	RetryAfter  *time.Duration `yaml:"retry_after,omitempty"`
	MaxModelLen *int64         `yaml:"max_model_len,omitempty"`
	MediaTokens *mediaYAML     `yaml:"media_tokens,omitempty"`
	Reserve     string         `yaml:"reserve,omitempty"`
	// GrowthHeadroom is growth_headroom.
	GrowthHeadroom *float64     `yaml:"growth_headroom,omitempty"`
	Breaker        *breakerYAML `yaml:"breaker,omitempty"`
	// FirstByteTimeout is first_byte_timeout.
	FirstByteTimeout time.Duration `yaml:"first_byte_timeout,omitempty"`
	// EnginePriority is engine_priority (tenancy.go).
	EnginePriority bool `yaml:"engine_priority,omitempty"`
}

type breakerYAML struct {
	Failures  *int           `yaml:"failures,omitempty"`
	Cooldown  *time.Duration `yaml:"cooldown,omitempty"`
	Probes    *int           `yaml:"probes,omitempty"`
	Successes *int           `yaml:"successes,omitempty"`
}

type mediaYAML struct {
	Image *int64 `yaml:"image,omitempty"`
	Audio *int64 `yaml:"audio,omitempty"`
	Video *int64 `yaml:"video,omitempty"`
}

type engineYAML struct {
	ID          string         `yaml:"id"`
	URL         string         `yaml:"url"`
	KVTokens    *int64         `yaml:"kv_tokens,omitempty"`
	Slots       int64          `yaml:"slots"`
	Format      string         `yaml:"format,omitempty"`
	MetricsURL  string         `yaml:"metrics_url,omitempty"`
	StaleAfter  *time.Duration `yaml:"stale_after,omitempty"`
	StalePolicy string         `yaml:"stale_policy,omitempty"`
	Headroom    *float64       `yaml:"headroom,omitempty"`
}

type tenantYAML struct {
	Name      string   `yaml:"name"`
	APIKeys   []string `yaml:"api_keys"`
	KVShare   float64  `yaml:"kv_share"`
	SlotShare float64  `yaml:"slot_share,omitempty"`
	Pools     []string `yaml:"pools,omitempty"`
	// Tenancy (tenancy.go).
	Priorities      []string `yaml:"priorities,omitempty"`
	DefaultPriority string   `yaml:"default_priority,omitempty"`
	Weight          float64  `yaml:"weight,omitempty"`
	MaxQueued       int      `yaml:"max_queued,omitempty"`
	// Rate budgets: tokens_per_minute and requests_per_minute.
	TokensPerMinute   int64 `yaml:"tokens_per_minute,omitempty"`
	RequestsPerMinute int64 `yaml:"requests_per_minute,omitempty"`
}

type priorityYAML struct {
	Name    string         `yaml:"name"`
	MaxFill float64        `yaml:"max_fill"`
	TTFTSLO *time.Duration `yaml:"ttft_slo,omitempty"`
}

type leaseYAML struct {
	SessionTTL     *time.Duration `yaml:"session_ttl,omitempty"`
	LeaseTTL       *time.Duration `yaml:"lease_ttl,omitempty"`
	RenewInterval  *time.Duration `yaml:"renew_interval,omitempty"`
	RecoveryWindow *time.Duration `yaml:"recovery_window,omitempty"`
	OrphanHold     time.Duration  `yaml:"orphan_hold,omitempty"`
}

// sections names each YAML type for unknown-field errors.
var sections = map[string]struct {
	what string
	t    reflect.Type
}{
	"fileYAML":     {"the top level", reflect.TypeOf(fileYAML{})},
	"poolYAML":     {"a pool", reflect.TypeOf(poolYAML{})},
	"engineYAML":   {"an engine", reflect.TypeOf(engineYAML{})},
	"tenantYAML":   {"a tenant", reflect.TypeOf(tenantYAML{})},
	"priorityYAML": {"a priority", reflect.TypeOf(priorityYAML{})},
	"leaseYAML":    {"lease", reflect.TypeOf(leaseYAML{})},
	"mediaYAML":    {"media_tokens", reflect.TypeOf(mediaYAML{})},
	"breakerYAML":  {"breaker", reflect.TypeOf(breakerYAML{})},
}

var notFound = regexp.MustCompile(`^(line \d+): field (.+) not found in type fleet\.(\w+)$`)

// friendlier rewrites yaml's unknown-field messages to name the section
// and the fields it allows.
func friendlier(msg string) string {
	m := notFound.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	s, ok := sections[m[3]]
	if !ok {
		return msg
	}
	var allowed []string
	for i := range s.t.NumField() {
		allowed = append(allowed, strings.Split(s.t.Field(i).Tag.Get("yaml"), ",")[0])
	}
	return fmt.Sprintf("%s: unknown field %q in %s (allowed: %s)", m[1], m[2], s.what, strings.Join(allowed, ", "))
}

// ErrInvalid marks every fleet-file error; FieldError carries the path.
var ErrInvalid = errors.New("fleet: invalid fleet file")

// FieldError is one problem with one field.
type FieldError struct {
	// Path is the field, e.g. "pools[0].engines[1].kv_tokens".
	Path string
	// Message says what is wrong and what is allowed.
	Message string
}

func (e *FieldError) Error() string { return e.Path + ": " + e.Message }

// Unwrap makes every FieldError match ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// Load reads, parses and validates the fleet file at path.
func Load(path string) (*Fleet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("fleet: read %s: %w", path, err)
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("fleet: %s: %w: larger than %d bytes", path, ErrInvalid, MaxFileSize)
	}
	fl, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("fleet file %s: %w", path, err)
	}
	return fl, nil
}

// Parse decodes a fleet file, applies defaults and validates it. The error
// lists every problem found.
func Parse(data []byte) (*Fleet, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var raw fileYAML
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: the file is empty", ErrInvalid)
		}
		var te *yaml.TypeError
		if errors.As(err, &te) {
			msgs := make([]string, len(te.Errors))
			for i, m := range te.Errors {
				msgs[i] = friendlier(m)
			}
			return nil, fmt.Errorf("%w: %s", ErrInvalid, strings.Join(msgs, "; "))
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: more than one YAML document (want one)", ErrInvalid)
	}
	f, errs := build(raw)
	errs = append(errs, f.check()...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return f, nil
}

// build converts the decoded file into a Fleet with defaults applied. It
// reports what only the raw file shows (key syntax).
func build(raw fileYAML) (*Fleet, []error) {
	var errs []error
	f := &Fleet{DefaultPriority: ledger.PriorityName(raw.DefaultPriority)}
	for _, p := range raw.Pools {
		pool := Pool{Name: ledger.PoolID(p.Name), RetryAfter: DefaultRetryAfter, MediaTokens: DefaultMediaTokens, FirstByteTimeout: p.FirstByteTimeout}
		if m := p.MediaTokens; m != nil {
			for _, f := range []struct {
				v   *int64
				dst *int64
			}{{m.Image, &pool.MediaTokens.Image}, {m.Audio, &pool.MediaTokens.Audio}, {m.Video, &pool.MediaTokens.Video}} {
				if f.v != nil {
					*f.dst = *f.v
				}
			}
		}
		if p.RetryAfter != nil {
			pool.RetryAfter = *p.RetryAfter
		}
		pool.Reserve = cmp.Or(ledger.ReserveMode(p.Reserve), DefaultReserve)
		if pool.Reserve == ledger.ReserveElastic {
			pool.GrowthHeadroom = DefaultGrowthHeadroom
		}
		if p.GrowthHeadroom != nil {
			pool.GrowthHeadroom = *p.GrowthHeadroom
		}
		pool.Breaker = ledger.BreakerSpec{}.WithDefaults()
		if b := p.Breaker; b != nil {
			for _, f := range []struct {
				v   *int
				dst *int
			}{{b.Failures, &pool.Breaker.Failures}, {b.Probes, &pool.Breaker.Probes}, {b.Successes, &pool.Breaker.Successes}} {
				if f.v != nil {
					*f.dst = *f.v
				}
			}
			if b.Cooldown != nil {
				pool.Breaker.Cooldown = *b.Cooldown
			}
		}
		if p.MaxModelLen != nil {
			pool.MaxModelLen = *p.MaxModelLen
			if pool.MaxModelLen == 0 {
				errs = append(errs, &FieldError{fmt.Sprintf("pools[%d].max_model_len", len(f.Pools)), maxModelLenMsg(0)})
			}
		}
		for _, e := range p.Engines {
			eng := Engine{
				ID: ledger.EngineID(e.ID), URL: e.URL, MetricsURL: e.MetricsURL,
				Format: telemetry.Format(e.Format), Slots: e.Slots,
				StaleAfter: DefaultStaleAfter, StalePolicy: ledger.StalePolicy(e.StalePolicy),
			}
			if eng.MetricsURL == "" && eng.URL != "" {
				eng.MetricsURL = strings.TrimRight(eng.URL, "/") + "/metrics"
			}
			if eng.Format == "" {
				eng.Format = telemetry.DefaultFormat
			}
			if eng.StalePolicy == "" {
				eng.StalePolicy = DefaultStalePolicy
			}
			if e.StaleAfter != nil {
				eng.StaleAfter = *e.StaleAfter
			}
			if e.KVTokens != nil {
				eng.KVTokens = *e.KVTokens
			} else {
				eng.KVFromMetrics = true
				eng.Headroom = DefaultHeadroom
			}
			if e.Headroom != nil {
				eng.Headroom = *e.Headroom
			}
			pool.Engines = append(pool.Engines, eng)
		}
		f.Pools = append(f.Pools, pool)
	}
	for i, t := range raw.Tenants {
		ten := Tenant{Name: ledger.TenantID(t.Name), KVShare: t.KVShare, SlotShare: t.SlotShare}
		ten.TokensPerMinute, ten.RequestsPerMinute = t.TokensPerMinute, t.RequestsPerMinute
		for j, k := range t.APIKeys {
			h, err := ParseAPIKey(k)
			if err != nil {
				errs = append(errs, &FieldError{fmt.Sprintf("tenants[%d].api_keys[%d]", i, j), err.Error()})
				continue
			}
			ten.APIKeys = append(ten.APIKeys, h)
		}
		for _, p := range t.Pools {
			ten.Pools = append(ten.Pools, ledger.PoolID(p))
		}
		f.Tenants = append(f.Tenants, ten)
	}
	for _, p := range raw.Priorities {
		f.Priorities = append(f.Priorities, ledger.PrioritySpec{Name: ledger.PriorityName(p.Name), MaxFill: p.MaxFill})
		if p.TTFTSLO != nil {
			if f.TTFTSLOs == nil {
				f.TTFTSLOs = map[ledger.PriorityName]time.Duration{}
			}
			f.TTFTSLOs[ledger.PriorityName(p.Name)] = *p.TTFTSLO
		}
	}
	if len(raw.Priorities) == 0 {
		f.Priorities = []ledger.PrioritySpec{{Name: DefaultPriority, MaxFill: 1}}
	}
	if f.DefaultPriority == "" {
		f.DefaultPriority = f.Priorities[0].Name
	}

	l := &f.Lease
	l.SessionTTL = DefaultSessionTTL
	if raw.Lease.SessionTTL != nil {
		l.SessionTTL = *raw.Lease.SessionTTL
	}
	l.RenewInterval = l.SessionTTL / 3
	if raw.Lease.RenewInterval != nil {
		l.RenewInterval = *raw.Lease.RenewInterval
	}
	l.LeaseTTL = max(DefaultLeaseTTL, 3*l.RenewInterval)
	if raw.Lease.LeaseTTL != nil {
		l.LeaseTTL = *raw.Lease.LeaseTTL
	}
	l.RecoveryWindow = l.SessionTTL // what the window must cover (docs/design.md, "Recovery after ledger loss")
	if raw.Lease.RecoveryWindow != nil {
		l.RecoveryWindow = *raw.Lease.RecoveryWindow
	}
	l.OrphanHold = raw.Lease.OrphanHold
	buildTenancy(raw, f)
	return f, errs
}
