package chaos

// A scenario's validation: every problem, each naming its field, so a
// scenario file is fixed in one pass.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Validate reports every problem, naming the field.
func (s *Scenario) Validate() error {
	var errs []error
	bad := func(path, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrScenario, path, fmt.Sprintf(format, a...)))
	}
	if s.Name == "" {
		bad("name", "required")
	}
	t := s.Topology
	switch t.Ledger {
	case LedgerMemory:
		if t.Reservers != 1 {
			bad("topology.reservers", "%d: the memory ledger lives in one reserver, want 1", t.Reservers)
		}
	case LedgerRedis, LedgerEtcd, LedgerSentinel:
		if t.Reservers < 1 || t.Reservers > 8 {
			bad("topology.reservers", "%d: want 1..8", t.Reservers)
		}
	default:
		bad("topology.ledger", "%q: want memory, redis, etcd or redis-sentinel", t.Ledger)
	}
	if t.Ledger != LedgerSentinel && (t.RedisReplicas != 0 || t.WaitReplicas != 0) {
		bad("topology.redis_replicas", "redis_replicas %d, wait_replicas %d: only with ledger redis-sentinel", t.RedisReplicas, t.WaitReplicas)
	}
	if t.Ledger == LedgerSentinel && (t.RedisReplicas < 1 || t.RedisReplicas > 4 || t.WaitReplicas < 0 || t.WaitReplicas > t.RedisReplicas) {
		bad("topology.redis_replicas", "redis_replicas %d, wait_replicas %d: want 1..4 replicas, wait_replicas 0..redis_replicas", t.RedisReplicas, t.WaitReplicas)
	}
	if t.Routers < 1 || t.Routers > 64 {
		bad("topology.routers", "%d: want 1..64", t.Routers)
	}
	if t.Admission != AdmissionLedger && t.Admission != AdmissionLocal && t.Admission != AdmissionDirect {
		bad("topology.admission", "%q: want ledger, local or direct", t.Admission)
	}
	if t.Admission == AdmissionDirect && len(s.Faults) > 0 {
		bad("faults", "admission direct runs no ledger or router to fault")
	}
	if h := t.GrowthHeadroom; h != nil && (*h < 0 || *h >= 1) {
		bad("topology.growth_headroom", "%g: want [0, 1)", *h)
	}
	if t.Reserve != string(ledger.ReserveElastic) && t.Reserve != string(ledger.ReserveWorstCase) {
		bad("topology.reserve", "%q: want elastic or worst_case", t.Reserve)
	}
	if len(t.Engines) == 0 {
		bad("topology.engines", "at least one engine group is required")
	}
	for i, g := range t.Engines {
		p := fmt.Sprintf("topology.engines[%d]", i)
		if g.Count < 1 || g.Count > 64 {
			bad(p+".count", "%d: want 1..64", g.Count)
		}
		if g.KVTokens < 1024 {
			bad(p+".kv_tokens", "%d: want >= 1024", g.KVTokens)
		}
		if g.KVTokens%16 != 0 {
			bad(p+".kv_tokens", "%d: want a multiple of the 16-token block", g.KVTokens)
		}
		if g.Slots < 1 {
			bad(p+".slots", "%d: want >= 1", g.Slots)
		}
		if !slices.Contains([]string{"vllm", "sglang", "tgi"}, g.Format) {
			bad(p+".format", "%q: want vllm, sglang or tgi", g.Format)
		}
		if g.Speed <= 0 || g.Speed > 1000 {
			bad(p+".speed", "%g: want (0, 1000]", g.Speed)
		}
		if g.OutputTokens < 0 {
			bad(p+".output_tokens", "%d: want >= 1 (0: enginesim's)", g.OutputTokens)
		}
		if g.OutputDist != "" && g.OutputDist != "uniform" && g.OutputDist != "lognormal" {
			bad(p+".output_dist", "%q: want uniform or lognormal", g.OutputDist)
		}
		if g.OutputSigma < 0 || g.OutputSigma > 5 {
			bad(p+".output_sigma", "%g: want (0, 5] (0: enginesim's)", g.OutputSigma)
		}
		if g.MaxModelLen < 0 || int64(g.MaxModelLen) > g.KVTokens {
			bad(p+".max_model_len", "%d: want 16..kv_tokens (0: enginesim's)", g.MaxModelLen)
		}
	}
	if len(t.Tenants) == 0 {
		bad("topology.tenants", "at least one tenant is required")
	}
	tenants := map[string]bool{}
	for i, tn := range t.Tenants {
		if tn.Name == "" {
			bad(fmt.Sprintf("topology.tenants[%d].name", i), "required")
		}
		if tn.TokensPerMinute < 0 || tn.RequestsPerMinute < 0 {
			bad(fmt.Sprintf("topology.tenants[%d]", i), "tokens_per_minute %d, requests_per_minute %d: want >= 0 (0: none)", tn.TokensPerMinute, tn.RequestsPerMinute)
		}
		tenants[tn.Name] = true
	}
	prios := map[string]bool{}
	slo := false
	for i, p := range t.Priorities {
		prios[p.Name] = true
		if p.TTFTSLO < 0 {
			bad(fmt.Sprintf("topology.priorities[%d].ttft_slo", i), "%s: want >= 0 (0: none)", p.TTFTSLO)
		}
		slo = slo || p.TTFTSLO > 0
	}
	if b := t.Breaker; b != nil {
		if b.Failures < -1 {
			bad("topology.breaker.failures", "%d: want >= 1, or -1 (off), or 0 (the fleet's default)", b.Failures)
		}
		if b.Cooldown < 0 || b.Probes < 0 || b.Successes < 0 {
			bad("topology.breaker", "cooldown %s, probes %d, successes %d: want each >= 0 (0: the fleet's default)", b.Cooldown, b.Probes, b.Successes)
		}
	}
	if t.FirstByteTimeout < 0 {
		bad("topology.first_byte_timeout", "%s: want >= 0 (0: the fleet's default)", t.FirstByteTimeout)
	}
	if t.SessionTTL.D() < time.Second {
		bad("topology.session_ttl", "%s: want >= 1s", t.SessionTTL)
	}
	if t.OrphanHold < 0 {
		bad("topology.orphan_hold", "%s: want >= 0", t.OrphanHold)
	}
	w := s.Workload
	if w.Duration <= 0 {
		bad("workload.duration", "required, > 0")
	}
	if (w.Concurrency > 0) == (w.Rate > 0) {
		bad("workload", "set exactly one of concurrency and rate")
	}
	if w.Concurrency < 0 || w.Concurrency > 4096 {
		bad("workload.concurrency", "%d: want 1..4096", w.Concurrency)
	}
	if w.Rate < 0 || w.Rate > 10000 {
		bad("workload.rate", "%g: want (0, 10000]", w.Rate)
	}
	for _, d := range []struct {
		p string
		d Dist
	}{{"workload.prompt_tokens", w.PromptTokens}, {"workload.output_tokens", w.OutputTokens}} {
		if d.d.Min < 1 || (d.d.Max != 0 && d.d.Max < d.d.Min) {
			bad(d.p, "min %d max %d: want 1 <= min <= max (max 0: fixed)", d.d.Min, d.d.Max)
		}
	}
	for name := range w.Tenants {
		if !tenants[name] {
			bad("workload.tenants", "%q is not a topology tenant", name)
		}
	}
	for name := range w.Priorities {
		if !prios[name] {
			bad("workload.priorities", "%q is not a topology priority", name)
		}
	}
	if sp := w.Spike; sp != nil {
		switch {
		case w.Rate <= 0:
			bad("workload.spike", "needs open-loop arrivals (workload.rate)")
		case sp.Factor <= 0 || sp.Factor > 100:
			bad("workload.spike.factor", "%g: want (0, 100]", sp.Factor)
		case sp.At < 0 || sp.For <= 0:
			bad("workload.spike", "at %s for %s: want at >= 0, for > 0", sp.At, sp.For)
		case sp.At+sp.For > w.Duration:
			bad("workload.spike", "at %s for %s ends after workload.duration %s", sp.At, sp.For, w.Duration)
		case w.Rate*sp.Factor > 10000:
			bad("workload.spike.factor", "%g: the spike's rate %g is over 10000", sp.Factor, w.Rate*sp.Factor)
		}
	}
	if w.FirstTokenTimeout < 0 {
		bad("workload.first_token_timeout", "%s: want >= 0 (0: none)", w.FirstTokenTimeout)
	}
	if w.NoMaxTokens < 0 || w.NoMaxTokens > 1 {
		bad("workload.no_max_tokens", "%g: want [0, 1]", w.NoMaxTokens)
	}
	if w.Stream < 0 || w.Stream > 1 {
		bad("workload.stream", "%g: want [0, 1]", w.Stream)
	}
	if *w.Chat < 0 || *w.Chat > 1 {
		bad("workload.chat", "%g: want [0, 1]", *w.Chat)
	}
	errs = append(errs, validateFaults("faults", s.Faults, s)...)
	if s.Short != nil {
		errs = append(errs, validateFaults("short.faults", s.Short.Faults, s)...)
	}
	for i, c := range s.Checks {
		if !slices.Contains(checkNames, c) {
			bad(fmt.Sprintf("checks[%d]", i), "%q: want one of %s", c, strings.Join(checkNames, ", "))
		}
		switch {
		case c == CheckHangBounded && t.FirstByteTimeout <= 0:
			bad(fmt.Sprintf("checks[%d]", i), "%s judges against topology.first_byte_timeout: set it", c)
		case c == CheckTTFTSLOHeld && !slo:
			bad(fmt.Sprintf("checks[%d]", i), "%s needs a topology.priorities[].ttft_slo", c)
		case c == CheckColdStart && (!t.ColdStart || t.Admission != AdmissionLedger):
			bad(fmt.Sprintf("checks[%d]", i), "%s needs topology.cold_start and ledger admission", c)
		case c == CheckGrantsResume && w.Stream <= 0:
			bad(fmt.Sprintf("checks[%d]", i), "%s judges streamed requests' first bytes: set workload.stream", c)
		}
	}
	for i, b := range s.Baselines {
		p := fmt.Sprintf("baselines[%d]", i)
		switch {
		case !slices.Contains(baselinePaths, b):
			bad(p, "%q: want one of %s", b, strings.Join(baselinePaths, ", "))
		case b == BaselineNoSLO && !slo:
			bad(p, "%s needs a topology.priorities[].ttft_slo to leave out", b)
		}
	}
	if len(s.Baselines) > 0 && (len(s.Faults) > 0 || s.Compare != nil || t.Admission != AdmissionLedger) {
		bad("baselines", "want a fault-free ledger-admission scenario without compare (the baselines run its load along other paths)")
	}
	if c := s.Compare; c != nil {
		if len(c.Routers) == 0 {
			bad("compare.routers", "at least one router count")
		}
		for _, n := range c.Routers {
			if n < 1 || n > 64 {
				bad("compare.routers", "%d: want 1..64", n)
			}
		}
		for _, a := range c.Admission {
			if a != AdmissionLedger && a != AdmissionLocal {
				bad("compare.admission", "%q: want ledger or local", a)
			}
		}
		if len(c.Admission) == 0 {
			bad("compare.admission", "at least one of ledger, local")
		}
	}
	return errors.Join(errs...)
}

func validateFaults(path string, faults []Fault, s *Scenario) []error {
	var errs []error
	bad := func(i int, field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: %s[%d].%s: %s", ErrScenario, path, i, field, fmt.Sprintf(format, a...)))
	}
	for i, f := range faults {
		if !slices.Contains(faultKinds, f.Kind) {
			bad(i, "kind", "%q: want one of %s", f.Kind, strings.Join(faultKinds, ", "))
			continue
		}
		if f.At < 0 {
			bad(i, "at", "%s: want >= 0", f.At)
		}
		switch f.Kind {
		case FaultKillRouter, FaultStopRouter, FaultContRouter, FaultClockOffset:
			if !validTarget(f.Target, "router", s.Topology.Routers) {
				bad(i, "target", "%q: want router-0..router-%d or all", f.Target, s.Topology.Routers-1)
			}
		case FaultKillReserver:
			if !validTarget(f.Target, "reserver", s.Topology.Reservers) {
				bad(i, "target", "%q: want reserver-0..reserver-%d or all", f.Target, s.Topology.Reservers-1)
			}
		case FaultRestartRedis:
			if s.Topology.Ledger != LedgerRedis {
				bad(i, "kind", "restart_redis needs topology.ledger: redis")
			}
		case FaultFailoverRedis:
			if s.Topology.Ledger != LedgerSentinel {
				bad(i, "kind", "failover_redis needs topology.ledger: redis-sentinel")
			}
			if f.For < 0 || f.For.D() >= sentinelDownAfter {
				bad(i, "for", "%s: the replicas' stall before the kill must be in [0, %s): the Sentinels would deem a longer-stalled replica down", f.For, sentinelDownAfter)
			}
		case FaultStaleTelemetry, FaultEngineCrash, FaultEngineKill, FaultEngineHang, FaultEngineErrors:
			if !validTarget(f.Target, "engine", s.engineCount()) {
				bad(i, "target", "%q: want engine-0..engine-%d or all", f.Target, s.engineCount()-1)
			}
			if f.For <= 0 {
				bad(i, "for", "required, > 0")
			}
		case FaultPartition:
			if !validTarget(f.Target, "router", s.Topology.Routers) {
				bad(i, "target", "%q: want router-0..router-%d or all", f.Target, s.Topology.Routers-1)
			}
			if f.Link != LinkLedger && f.Link != LinkEngine {
				bad(i, "link", "%q: want ledger or engine", f.Link)
			}
			if f.Link == LinkLedger && s.Topology.Ledger == LedgerSentinel {
				bad(i, "link", "ledger: the Sentinels hand out the primary's own address, which no proxy sits in front of")
			}
			if !slices.Contains([]string{ModeDrop, ModeLatency, ModeReset}, f.Mode) {
				bad(i, "mode", "%q: want drop, latency or reset", f.Mode)
			}
			if f.Mode == ModeLatency && f.Latency <= 0 {
				bad(i, "latency", "required with mode latency")
			}
			if f.For <= 0 {
				bad(i, "for", "required, > 0")
			}
		case FaultDuplicateRetries:
			if f.For <= 0 {
				bad(i, "for", "required, > 0")
			}
		}
	}
	return errs
}

func validTarget(t, kind string, n int) bool {
	if t == "" || t == "all" {
		return true
	}
	for i := range n {
		if t == fmt.Sprintf("%s-%d", kind, i) {
			return true
		}
	}
	return false
}
