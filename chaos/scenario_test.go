package chaos

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

const minimal = `
name: m
topology:
  engines: [{count: 2, kv_tokens: 20000, slots: 8}]
  tenants: [{name: acme, kv_share: 1}]
workload:
  concurrency: 4
  duration: 2s
  prompt_tokens: {min: 10, max: 20}
  output_tokens: {min: 10}
`

func TestBuiltinScenariosParse(t *testing.T) {
	names := Names()
	for _, want := range []string{"quickstart", "kill-routers", "redis-restart", "partition", "stale-telemetry", "tenant-quota", "priority-headroom", "compare", "engine-failure", "spike"} {
		if !contains(names, want) {
			t.Errorf("built-in scenarios %v lack %s", names, want)
		}
	}
	for _, n := range names {
		sc, err := Load(n)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if sc.Short == nil {
			t.Errorf("%s has no short variant", n)
			continue
		}
		for _, ledger := range []string{LedgerMemory, LedgerRedis} {
			s, err := Prepare(sc, Options{Short: true, Ledger: ledger})
			if err != nil {
				t.Errorf("%s short on %s: %v", n, ledger, err)
				continue
			}
			if s.Workload.Duration.D() > 8*time.Second && sc.Topology.Ledger != LedgerSentinel {
				t.Errorf("%s short runs %s, want <= 8s to keep CI under ~3 minutes", n, s.Workload.Duration)
			}
		}
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		name, edit, want string
	}{
		{"unknown field", "name: m\nbogus: 1\n", `field bogus not found`},
		{"ledger", "topology:\n  ledger: zookeeper\n", "topology.ledger"},
		{"kv block", "topology:\n  engines: [{kv_tokens: 20001, slots: 8}]\n", "topology.engines[0].kv_tokens"},
		{"both loads", "workload:\n  rate: 5\n", "set exactly one of concurrency and rate"},
		{"fault kind", "faults: [{at: 1s, kind: meteor}]\n", "faults[0].kind"},
		{"fault target", "faults: [{at: 1s, kind: kill_router, target: router-9}]\n", "faults[0].target"},
		{"partition mode", "faults: [{at: 1s, kind: partition, link: ledger, mode: fuzz, for: 1s}]\n", "faults[0].mode"},
		{"redis only", "faults: [{at: 1s, kind: restart_redis}]\n", "restart_redis needs topology.ledger: redis"},
		{"check", "checks: [vibes]\n", "checks[0]"},
		{"duration", "workload:\n  duration: soon\n", "is not a duration"},
		{"tenant weight", "workload:\n  tenants: {nobody: 1}\n", "workload.tenants"},
		{"admission", "topology:\n  admission: yolo\n", "topology.admission"},
		{"direct faults", "topology:\n  admission: direct\nfaults: [{at: 1s, kind: kill_router}]\n", "admission direct runs no ledger or router to fault"},
		{"growth headroom", "topology:\n  growth_headroom: 1\n", "topology.growth_headroom"},
		{"output dist", "topology:\n  engines: [{kv_tokens: 20000, slots: 8, output_dist: pareto}]\n", "topology.engines[0].output_dist"},
		{"output sigma", "topology:\n  engines: [{kv_tokens: 20000, slots: 8, output_sigma: 6}]\n", "topology.engines[0].output_sigma"},
		{"max model len", "topology:\n  engines: [{kv_tokens: 20000, slots: 8, max_model_len: 30000}]\n", "topology.engines[0].max_model_len"},
		{"no max tokens", "workload:\n  no_max_tokens: 1.5\n", "workload.no_max_tokens"},
		{"engine fault target", "faults: [{at: 1s, kind: engine_hang, target: engine-7, for: 1s}]\n", "faults[0].target"},
		{"engine fault for", "faults: [{at: 1s, kind: engine_kill, target: engine-0}]\n", "faults[0].for"},
		{"ttft_slo", "topology:\n  priorities: [{name: interactive, max_fill: 1, ttft_slo: -1s}]\n", "topology.priorities[0].ttft_slo"},
		{"breaker", "topology:\n  breaker: {failures: -2}\n", "topology.breaker.failures"},
		{"first byte timeout", "topology:\n  first_byte_timeout: -1s\n", "topology.first_byte_timeout"},
		{"hang check without a timeout", "checks: [hang_bounded]\n", "judges against topology.first_byte_timeout"},
		{"slo check without a slo", "checks: [ttft_slo_held]\n", "needs a topology.priorities[].ttft_slo"},
		{"spike closed loop", "workload:\n  spike: {at: 1s, for: 1s, factor: 10}\n", "needs open-loop arrivals"},
		{"spike past the load", "workload:\n  concurrency: 0\n  rate: 5\n  spike: {at: 1s, for: 5s, factor: 10}\n", "ends after workload.duration"},
		{"spike factor", "workload:\n  concurrency: 0\n  rate: 5\n  spike: {at: 0s, for: 1s, factor: 0}\n", "workload.spike.factor"},
		{"baseline path", "baselines: [carrier_pigeon]\n", "baselines[0]"},
		{"baseline without a slo", "baselines: [no_slo]\n", "needs a topology.priorities[].ttft_slo to leave out"},
		{"baselines with faults", "baselines: [direct]\nfaults: [{at: 1s, kind: kill_router}]\n", "want a fault-free ledger-admission scenario"},
		{"first token timeout", "workload:\n  first_token_timeout: -1s\n", "workload.first_token_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(merge(t, minimal, tc.edit)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
			if !errors.Is(err, ErrScenario) {
				t.Errorf("err = %v, want ErrScenario", err)
			}
		})
	}
}

// merge overlays edit on base, map by map (a scalar or list replaces).
func merge(t *testing.T, base, edit string) string {
	t.Helper()
	var b, e map[string]any
	if err := yaml.Unmarshal([]byte(base), &b); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(edit), &e); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(mergeMaps(b, e))
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func mergeMaps(b, e map[string]any) map[string]any {
	for k, v := range e {
		if em, ok := v.(map[string]any); ok {
			if bm, ok := b[k].(map[string]any); ok {
				b[k] = mergeMaps(bm, em)
				continue
			}
		}
		b[k] = v
	}
	return b
}

func TestDefaultsAndShort(t *testing.T) {
	sc, err := Parse([]byte(minimal + `
faults:
  - {at: 1s, kind: kill_router, target: router-0}
short:
  duration: 1s
  concurrency: 2
  faults: []
`))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Topology.Ledger != LedgerMemory || sc.Topology.Routers != 1 || sc.Topology.Admission != AdmissionLedger {
		t.Errorf("topology defaults = %+v", sc.Topology)
	}
	if sc.Topology.RecoveryWindow == nil || *sc.Topology.RecoveryWindow != 0 {
		t.Errorf("recovery window = %v, want 0 without a ledger-loss fault", sc.Topology.RecoveryWindow)
	}
	if len(sc.Checks) != len(DefaultChecks) {
		t.Errorf("checks = %v, want the defaults", sc.Checks)
	}
	short := sc.WithShort()
	if short.Workload.Duration.D() != time.Second || short.Workload.Concurrency != 2 || len(short.Faults) != 0 {
		t.Errorf("short = duration %s, concurrency %d, faults %v", short.Workload.Duration, short.Workload.Concurrency, short.Faults)
	}
	if len(sc.Faults) != 1 {
		t.Errorf("WithShort changed the original's faults: %v", sc.Faults)
	}
}

func TestPrepareMapsRedisRestartOnMemory(t *testing.T) {
	sc, err := Load("redis-restart")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Prepare(sc, Options{Short: true, Ledger: LedgerMemory})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Faults) != 1 || s.Faults[0].Kind != FaultKillReserver || s.Faults[0].RestartAfter == nil {
		t.Fatalf("faults = %+v, want one kill_reserver with restart_after", s.Faults)
	}
	if *s.Topology.RecoveryWindow == 0 {
		t.Errorf("recovery window off in a ledger-loss scenario")
	}
}
