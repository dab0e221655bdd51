package chaos

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Scenarios are the built-in scenarios, by name (file name less .yaml).
//
//go:embed scenarios/*.yaml
var scenarioFS embed.FS

// ErrScenario marks every scenario error.
var ErrScenario = errors.New("chaos: bad scenario")

// Ledger backends of a topology.
const (
	// LedgerMemory is the embedded default: one reserver on memory://,
	// routers reach it as grpc://.
	LedgerMemory = "memory"
	// LedgerRedis: a redis-server; routers and reservers use redis://.
	LedgerRedis = "redis"
	// LedgerEtcd: an etcd the caller runs (Options.Etcd); routers and
	// reservers use etcd:// with a key prefix of their own per run.
	LedgerEtcd = "etcd"
	// LedgerSentinel: a Redis primary, topology.redis_replicas replicas and
	// three Sentinels (sentinel.go); routers and reservers use
	// redis+sentinel://.
	LedgerSentinel = "redis-sentinel"
)

// expiryLateness is how late a backend may end a lease or session past its
// TTL, on top of the bounds every check allows: etcd counts lease TTLs in
// whole seconds and checks expiry every 0.5 s.
func expiryLateness(ledger string) time.Duration {
	if ledger == LedgerEtcd {
		return 1500 * time.Millisecond
	}
	return 0
}

// Admission modes of routers (the router's --admission).
const (
	AdmissionLedger = "ledger"
	AdmissionLocal  = "local"
	// AdmissionDirect starts no ledger, reserver or router: the clients
	// send straight to the engines in rotation, which queue and preempt on
	// their own (the benchmark's baseline; no faults, no ledger checks).
	AdmissionDirect = "direct"
)

// Fault kinds.
const (
	FaultKillRouter       = "kill_router"       // SIGKILL a router; restart_after brings it back
	FaultStopRouter       = "stop_router"       // SIGSTOP a router
	FaultContRouter       = "cont_router"       // SIGCONT a stopped router
	FaultKillReserver     = "kill_reserver"     // SIGKILL a reserver; restart_after brings it back (memory: empty)
	FaultRestartRedis     = "restart_redis"     // kill redis-server, start it empty on the same port after `for`
	FaultPartition        = "partition"         // fault proxy between routers and the ledger or engines
	FaultStaleTelemetry   = "stale_telemetry"   // enginesim /metrics answer 503 for `for`
	FaultEngineCrash      = "engine_crash"      // enginesim aborts every request and fails new ones for `for`
	FaultClockOffset      = "clock_offset"      // restart a router with --clock-offset (LEASEHOLD_CLOCK_OFFSET) = offset
	FaultDuplicateRetries = "duplicate_retries" // clients send each request twice with one X-Request-Id for `for`
	// The engine faults of issue 16 (enginefail.go), each for `for`.
	FaultEngineKill   = "engine_kill"   // SIGKILL an enginesim: listener and connections close; restarted empty after `for`
	FaultEngineHang   = "engine_hang"   // enginesim leaves new requests unanswered (POST /admin/fail hang)
	FaultEngineErrors = "engine_errors" // enginesim answers every request 500 (POST /admin/fail errors)
	// FaultFailoverRedis SIGKILLs the Sentinel deployment's primary; the
	// Sentinels promote a replica (topology.ledger redis-sentinel). With
	// `for` (< 1s) replication stalls that long first and the stalled
	// stream is dropped at the kill, so the promoted replica lacks the
	// primary's last writes (sentinel.go).
	FaultFailoverRedis = "failover_redis"
)

var faultKinds = []string{
	FaultKillRouter, FaultStopRouter, FaultContRouter, FaultKillReserver, FaultRestartRedis,
	FaultPartition, FaultStaleTelemetry, FaultEngineCrash, FaultClockOffset, FaultDuplicateRetries,
	FaultEngineKill, FaultEngineHang, FaultEngineErrors, FaultFailoverRedis,
}

// Partition links and modes.
const (
	LinkLedger = "ledger"
	LinkEngine = "engine"

	ModeDrop    = "drop"    // bytes are held, connections stay open
	ModeLatency = "latency" // every chunk is delayed by latency
	ModeReset   = "reset"   // open connections are reset, new ones refused
)

// Check names.
const (
	CheckNoOverCapacity = "no_over_capacity"
	CheckReclaim        = "reclaim_within_ttl"
	CheckNoLeasesAtEnd  = "no_leases_at_end"
	CheckNoDeadHolder   = "no_dead_holder_leases"
	CheckCleanErrors    = "clean_errors"
	CheckCompleted      = "completed"
	CheckStaleSeen      = "stale_telemetry_seen"
	CheckFaultsApplied  = "faults_applied"
	// Compare-only checks.
	CheckLocalOver     = "local_over_capacity"
	CheckLedgerWithin  = "ledger_within_capacity"
	CheckQuotaRejected = "quota_rejections"
	// Audit-sample checks.
	CheckPriorityHeadroom = "priority_headroom"
	CheckTenantQuota      = "tenant_quota"
	// Engine-failure checks (enginefail.go).
	CheckFailuresAfterCrash = "failures_after_crash"
	CheckHangBounded        = "hang_bounded"
	CheckBreakerTransitions = "breaker_transitions"
	// Spike checks (spike.go).
	CheckTTFTSLOHeld = "ttft_slo_held"
	// Rate-budget check (ratecheck.go).
	CheckTokenRate = "token_rate"
	// Failover check (checks_failover.go).
	CheckGrantsResume = "grants_resume"
)

var checkNames = []string{
	CheckNoOverCapacity, CheckReclaim, CheckNoLeasesAtEnd, CheckNoDeadHolder, CheckCleanErrors,
	CheckCompleted, CheckStaleSeen, CheckFaultsApplied, CheckLocalOver, CheckLedgerWithin, CheckQuotaRejected,
	CheckPriorityHeadroom, CheckTenantQuota,
	CheckFailuresAfterCrash, CheckHangBounded, CheckBreakerTransitions, CheckTTFTSLOHeld,
	CheckTokenRate, CheckColdStart, CheckRecoveryResumes, CheckGrantsResume,
}

// DefaultChecks run when a scenario lists none.
var DefaultChecks = []string{
	CheckNoOverCapacity, CheckReclaim, CheckNoLeasesAtEnd, CheckNoDeadHolder, CheckCleanErrors, CheckCompleted,
	CheckStaleSeen,
}

// Scenario is one chaos scenario. Every duration is a Go duration string in
// the file ("3s", "250ms").
type Scenario struct {
	Name        string   `yaml:"name"`
	Description string   `yaml:"description,omitempty"`
	Topology    Topology `yaml:"topology"`
	Workload    Workload `yaml:"workload"`
	Faults      []Fault  `yaml:"faults,omitempty"`
	// Checks to run (default DefaultChecks).
	Checks []string `yaml:"checks,omitempty"`
	// Compare, when set, runs the workload once per router count and
	// admission mode and prints peak usage / capacity side by side.
	Compare *Compare `yaml:"compare,omitempty"`
	// Baselines, when set, run the same workload first along each listed
	// path (direct, local, no_slo: see spike.go) and report them beside the
	// scenario's own run in one table; skipped by --short.
	Baselines []string `yaml:"baselines,omitempty"`
	// Short overrides parts of the scenario for CI (--short).
	Short *Short `yaml:"short,omitempty"`
}

// Topology is what the runner starts.
type Topology struct {
	// Ledger is memory (default), redis, etcd or redis-sentinel.
	Ledger string `yaml:"ledger,omitempty"`
	// RedisReplicas is how many replicas the redis-sentinel primary has
	// (default 1).
	RedisReplicas int `yaml:"redis_replicas,omitempty"`
	// WaitReplicas is the redis-sentinel URL's wait_replicas: every change
	// acknowledged only once that many replicas have it (default 0).
	WaitReplicas int `yaml:"wait_replicas,omitempty"`
	// Reservers is how many reservers run (default 1; memory allows 1).
	Reservers int `yaml:"reservers,omitempty"`
	// Routers is how many routers run (default 1).
	Routers int `yaml:"routers,omitempty"`
	// Admission is every router's --admission: ledger (default) or local;
	// or direct: no routers, the clients send straight to the engines.
	Admission string `yaml:"admission,omitempty"`
	// Reserve is the pool's reserve: elastic (default) or worst_case. It
	// decides what no_over_capacity judges: an elastic pool the KV its
	// requests really hold (actual demand) and preemptions, a worst_case
	// pool the demand admitted (prompt + max_tokens).
	Reserve string `yaml:"reserve,omitempty"`
	// Model is the pool name and the model requests name (default "sim").
	Model   string        `yaml:"model,omitempty"`
	Engines []EngineGroup `yaml:"engines"`
	Tenants []TenantSpec  `yaml:"tenants"`
	// Priorities are the fleet's classes (default: the fleet's standard).
	Priorities []PrioritySpec `yaml:"priorities,omitempty"`
	// SessionTTL is the fleet's lease.session_ttl (default 2s).
	SessionTTL Duration `yaml:"session_ttl,omitempty"`
	// ColdStart starts the load the moment the routers serve (/healthz),
	// without waiting for them to be ready or the ledger to grant
	// (cold_start judges the wait).
	ColdStart bool `yaml:"cold_start,omitempty"`
	// RecoveryWindow is the fleet's lease.recovery_window (default: 0,
	// off, unless a fault loses the ledger (kill_reserver, restart_redis);
	// then SessionTTL, the shortest the fleet allows).
	RecoveryWindow *Duration `yaml:"recovery_window,omitempty"`
	// OrphanHold is the fleet's lease.orphan_hold (default 0: a lease the
	// ledger ends is charged until its engine's next observation).
	OrphanHold Duration `yaml:"orphan_hold,omitempty"`
	// StaleAfter is every engine's stale_after (default 2s).
	StaleAfter Duration `yaml:"stale_after,omitempty"`
	// StalePolicy is every engine's stale_policy (default the fleet's).
	StalePolicy string `yaml:"stale_policy,omitempty"`
	// GrowthHeadroom is the elastic pool's growth_headroom (default the
	// fleet's).
	GrowthHeadroom *float64 `yaml:"growth_headroom,omitempty"`
	// RouterFlags are extra flags for every router.
	RouterFlags []string `yaml:"router_flags,omitempty"`
	// Breaker is the pool's circuit breaker (fleet pools[].breaker;
	// default: the fleet's).
	Breaker *BreakerSpec `yaml:"breaker,omitempty"`
	// FirstByteTimeout is the pool's first_byte_timeout: how long a router
	// waits for an engine's first response byte before it fails over
	// (default: the fleet's). hang_bounded judges against it.
	FirstByteTimeout Duration `yaml:"first_byte_timeout,omitempty"`
}

// BreakerSpec is the fleet file's pools[].breaker: zero fields take the
// fleet's defaults.
type BreakerSpec struct {
	Failures  int      `yaml:"failures,omitempty"`
	Cooldown  Duration `yaml:"cooldown,omitempty"`
	Probes    int      `yaml:"probes,omitempty"`
	Successes int      `yaml:"successes,omitempty"`
}

// elastic reports whether the pool reserves elastically (judged on actual
// demand and preemptions); an unset reserve is the default, elastic.
func (t Topology) elastic() bool { return t.Reserve != string(ledger.ReserveWorstCase) }

// EngineGroup is Count identical enginesims.
type EngineGroup struct {
	Count    int    `yaml:"count,omitempty"` // default 1
	KVTokens int64  `yaml:"kv_tokens"`
	Slots    int64  `yaml:"slots"`
	Format   string `yaml:"format,omitempty"` // vllm (default), sglang, tgi
	// Speed is simulated seconds per wall second (default 10).
	Speed float64 `yaml:"speed,omitempty"`
	// DecodeTokensPerSec is per-sequence decode speed (default enginesim's).
	DecodeTokensPerSec float64 `yaml:"decode_tokens_per_sec,omitempty"`
	// OutputTokens, OutputDist (uniform or lognormal) and OutputSigma are
	// the engine's natural output lengths, MaxModelLen its context length
	// (each default enginesim's).
	OutputTokens int     `yaml:"output_tokens,omitempty"`
	OutputDist   string  `yaml:"output_dist,omitempty"`
	OutputSigma  float64 `yaml:"output_sigma,omitempty"`
	MaxModelLen  int     `yaml:"max_model_len,omitempty"`
}

// TenantSpec is a fleet tenant; its API key is "sk-<name>".
type TenantSpec struct {
	Name      string  `yaml:"name"`
	KVShare   float64 `yaml:"kv_share"`
	SlotShare float64 `yaml:"slot_share,omitempty"`

	// TokensPerMinute and RequestsPerMinute are the fleet's
	// tenants[].tokens_per_minute and requests_per_minute (0: none).
	TokensPerMinute   int64 `yaml:"tokens_per_minute,omitempty"`
	RequestsPerMinute int64 `yaml:"requests_per_minute,omitempty"`
}

// APIKey is the bearer key the runner gives tenant t.
func (t TenantSpec) APIKey() string { return "sk-" + t.Name }

// PrioritySpec is a fleet priority class.
type PrioritySpec struct {
	Name    string  `yaml:"name"`
	MaxFill float64 `yaml:"max_fill"`
	// TTFTSLO is the class's ttft_slo (0: none): routers refuse what they
	// estimate would miss it; ttft_slo_held judges it.
	TTFTSLO Duration `yaml:"ttft_slo,omitempty"`
}

// Workload is the client pool's traffic.
type Workload struct {
	// Duration is how long requests are issued.
	Duration Duration `yaml:"duration"`
	// Concurrency is the number of closed-loop clients (each sends its next
	// request when the last is answered). Exactly one of Concurrency and
	// Rate is set.
	Concurrency int `yaml:"concurrency,omitempty"`
	// Rate is open-loop arrivals per second (Poisson), bounded by
	// MaxInFlight (default 256).
	Rate        float64 `yaml:"rate,omitempty"`
	MaxInFlight int     `yaml:"max_in_flight,omitempty"`
	// Spike multiplies Rate by Factor from At for For (open loop only).
	Spike *Spike `yaml:"spike,omitempty"`
	// PromptTokens and OutputTokens (max_tokens) are drawn per request.
	PromptTokens Dist `yaml:"prompt_tokens"`
	OutputTokens Dist `yaml:"output_tokens"`
	// NoMaxTokens is the share of requests sent without max_tokens (the
	// engine's context bounds them), in [0, 1].
	NoMaxTokens float64 `yaml:"no_max_tokens,omitempty"`
	// Tenants and Priorities weight the draw (default: every tenant equally,
	// no priority sent).
	Tenants    map[string]float64 `yaml:"tenants,omitempty"`
	Priorities map[string]float64 `yaml:"priorities,omitempty"`
	// Stream is the share of streaming requests, in [0, 1].
	Stream float64 `yaml:"stream,omitempty"`
	// Chat is the share of /v1/chat/completions (the rest /v1/completions);
	// default 1.
	Chat *float64 `yaml:"chat,omitempty"`
	// Seed seeds every draw (default 1).
	Seed uint64 `yaml:"seed,omitempty"`
	// Timeout bounds one request (default 30s).
	Timeout Duration `yaml:"timeout,omitempty"`
	// FirstTokenTimeout, when set, is how long a client waits for a
	// streamed request's first token before it gives up (recorded as a
	// failure: the system was too slow, not the client).
	FirstTokenTimeout Duration `yaml:"first_token_timeout,omitempty"`
	// Backoff: a client honours Retry-After up to this long (default 200ms)
	// before its next request.
	Backoff Duration `yaml:"backoff,omitempty"`
	// CutAtEnd cancels the requests still in flight when Duration ends
	// (a benchmark's window) instead of waiting for them; they are
	// recorded with Err "client: cut at end of load".
	CutAtEnd bool `yaml:"cut_at_end,omitempty"`
}

// Spike is a step in open-loop arrivals: Rate × Factor in [At, At+For).
type Spike struct {
	At     Duration `yaml:"at"`
	For    Duration `yaml:"for"`
	Factor float64  `yaml:"factor"`
}

// Dist is a token-count distribution: uniform in [min, max], or fixed when
// max is 0 or equal to min.
type Dist struct {
	Min int `yaml:"min"`
	Max int `yaml:"max,omitempty"`
}

// Fault is one scheduled fault.
type Fault struct {
	// At is the time since load start.
	At   Duration `yaml:"at"`
	Kind string   `yaml:"kind"`
	// Target names a router ("router-1"), reserver ("reserver-0") or engine
	// ("engine-2"); "all" or empty means every one the kind applies to.
	Target string `yaml:"target,omitempty"`
	// For is how long a timed fault lasts (partition, stale_telemetry,
	// engine_crash, duplicate_retries, restart_redis downtime, the
	// replication stall before failover_redis).
	For Duration `yaml:"for,omitempty"`
	// RestartAfter restarts a killed router or reserver.
	RestartAfter *Duration `yaml:"restart_after,omitempty"`
	// Partition: link (ledger or engine) and mode (drop, latency, reset).
	Link    string   `yaml:"link,omitempty"`
	Mode    string   `yaml:"mode,omitempty"`
	Latency Duration `yaml:"latency,omitempty"`
	// Offset is the clock_offset given to the router (e.g. 30s, -30s):
	// its wall clock reads real time + offset from the restart on,
	// restarts after a kill included.
	Offset Duration `yaml:"offset,omitempty"`
}

// Compare lists the variants of a compare scenario.
type Compare struct {
	Routers   []int    `yaml:"routers"`
	Admission []string `yaml:"admission"`
}

// Short is the CI variant's overrides.
type Short struct {
	Duration    Duration `yaml:"duration,omitempty"`
	Concurrency int      `yaml:"concurrency,omitempty"`
	Rate        float64  `yaml:"rate,omitempty"`
	// Faults, when given, replace the scenario's.
	Faults  []Fault `yaml:"faults,omitempty"`
	Routers []int   `yaml:"compare_routers,omitempty"`
	// Spike, when given, replaces the workload's.
	Spike *Spike `yaml:"spike,omitempty"`
}

// Duration is a time.Duration written as "3s" in YAML.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalYAML writes d as "3s".
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// UnmarshalYAML reads "3s" (a bare 0 is zero).
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Value == "0" {
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (want e.g. 3s, 250ms)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// Names lists the built-in scenarios.
func Names() []string {
	ents, _ := fs.ReadDir(scenarioFS, "scenarios")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(out)
	return out
}

// Load returns the scenario named by arg: a file path if one exists there,
// else a built-in scenario name.
func Load(arg string) (*Scenario, error) {
	if b, err := os.ReadFile(arg); err == nil {
		return Parse(b)
	}
	name := strings.TrimSuffix(filepath.Base(arg), ".yaml")
	b, err := scenarioFS.ReadFile("scenarios/" + name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("%w: %q is neither a file nor a built-in scenario (%s)", ErrScenario, arg, strings.Join(Names(), ", "))
	}
	return Parse(b)
}

// Parse decodes a scenario (unknown fields are errors), applies defaults
// and validates it.
func Parse(b []byte) (*Scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var s Scenario
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrScenario, err)
	}
	s.defaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Marshal writes s as YAML (the run directory's scenario.yaml).
func (s *Scenario) Marshal() ([]byte, error) { return yaml.Marshal(s) }

func (s *Scenario) defaults() {
	t := &s.Topology
	if t.Ledger == "" {
		t.Ledger = LedgerMemory
	}
	if t.Reservers == 0 {
		t.Reservers = 1
	}
	if t.Ledger == LedgerSentinel && t.RedisReplicas == 0 {
		t.RedisReplicas = 1
	}
	if t.Routers == 0 {
		t.Routers = 1
	}
	if t.Admission == "" {
		t.Admission = AdmissionLedger
	}
	if t.Reserve == "" {
		t.Reserve = string(ledger.ReserveElastic)
	}
	if t.Model == "" {
		t.Model = "sim"
	}
	for i := range t.Engines {
		g := &t.Engines[i]
		if g.Count == 0 {
			g.Count = 1
		}
		if g.Format == "" {
			g.Format = "vllm"
		}
		if g.Speed == 0 {
			g.Speed = 10
		}
	}
	if t.SessionTTL == 0 {
		t.SessionTTL = Duration(2 * time.Second)
	}
	if t.RecoveryWindow == nil {
		// Off unless the scenario loses the ledger (every run starts on a
		// fresh one, which would otherwise open with a window); then the
		// shortest the fleet allows.
		rw := Duration(0)
		for _, f := range append(slices.Clone(s.Faults), s.shortFaults()...) {
			if f.Kind == FaultKillReserver || f.Kind == FaultRestartRedis || f.Kind == FaultFailoverRedis {
				rw = t.SessionTTL
			}
		}
		t.RecoveryWindow = &rw
	}
	if t.StaleAfter == 0 {
		t.StaleAfter = Duration(2 * time.Second)
	}
	w := &s.Workload
	if w.Seed == 0 {
		w.Seed = 1
	}
	if w.Timeout == 0 {
		w.Timeout = Duration(30 * time.Second)
	}
	if w.Backoff == 0 {
		w.Backoff = Duration(200 * time.Millisecond)
	}
	if w.Rate > 0 && w.MaxInFlight == 0 {
		w.MaxInFlight = 256
	}
	if w.Chat == nil {
		one := 1.0
		w.Chat = &one
	}
	if len(s.Checks) == 0 && s.Compare == nil {
		s.Checks = slices.Clone(DefaultChecks)
	}
}

func (s *Scenario) shortFaults() []Fault {
	if s.Short == nil {
		return nil
	}
	return s.Short.Faults
}

func (s *Scenario) engineCount() int {
	n := 0
	for _, g := range s.Topology.Engines {
		n += g.Count
	}
	return n
}

// WithShort returns a copy of s with its short overrides applied.
func (s *Scenario) WithShort() *Scenario {
	c := s.clone()
	if s.Short == nil {
		return c
	}
	sh := s.Short
	if sh.Duration > 0 {
		c.Workload.Duration = sh.Duration
	}
	if sh.Concurrency > 0 {
		c.Workload.Concurrency, c.Workload.Rate = sh.Concurrency, 0
	}
	if sh.Rate > 0 {
		c.Workload.Rate, c.Workload.Concurrency = sh.Rate, 0
		if c.Workload.MaxInFlight == 0 {
			c.Workload.MaxInFlight = 256
		}
	}
	if sh.Faults != nil {
		c.Faults = slices.Clone(sh.Faults)
	}
	if sh.Spike != nil {
		sp := *sh.Spike
		c.Workload.Spike = &sp
	}
	if sh.Routers != nil && c.Compare != nil {
		c.Compare.Routers = slices.Clone(sh.Routers)
	}
	c.Short = nil
	return c
}

// clone deep-copies s through YAML.
func (s *Scenario) clone() *Scenario {
	b, err := yaml.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("chaos: marshal scenario: %v", err)) // a Scenario always marshals
	}
	var c Scenario
	if err := yaml.Unmarshal(b, &c); err != nil {
		panic(fmt.Sprintf("chaos: unmarshal scenario: %v", err))
	}
	return &c
}
