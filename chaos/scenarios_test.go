package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testutil/etcdserver"
	"github.com/leasehold/leasehold/internal/testutil/slow"
)

// TestScenariosShort runs the short (CI) variant of every built-in scenario
// on the ledger its file names (the embedded ledger, a reserver on
// memory://, or Redis), and with AllLedgersEnv set on both, and asserts
// every check passes; compare scenarios must show local admission over
// capacity and the ledger within it.
func TestScenariosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: the scenario set runs real processes for ~3 minutes; run without -short")
	}
	bins := binaries(t)
	all := os.Getenv(AllLedgersEnv) != ""
	start := time.Now()
	for _, ledger := range []string{LedgerMemory, LedgerRedis} {
		for _, name := range Names() {
			t.Run(ledger+"/"+name, func(t *testing.T) {
				sc, err := Load(name)
				if err != nil {
					t.Fatal(err)
				}
				if sc.Topology.Ledger == LedgerSentinel {
					t.Skip("a Redis Sentinel topology: TestTopologyScenarios runs it")
				}
				if !all && sc.Topology.Ledger != ledger {
					t.Skipf("runs on %s; every scenario on both ledgers: `make test-scenarios` (sets %s=1)", sc.Topology.Ledger, AllLedgersEnv)
				}
				runShort(t, sc, Options{Ledger: ledger, Binaries: bins})
			})
		}
	}
	t.Logf("the scenarios (all on both ledgers: %v): %.1fs", all, time.Since(start).Seconds())
}

// AllLedgersEnv makes TestScenariosShort run every scenario on both the
// memory and the Redis ledger, not only on the one its file names. `make
// test-scenarios` sets it, so that `make test` keeps within its time budget
// while still running every scenario once.
const AllLedgersEnv = "LEASEHOLD_TEST_SCENARIOS_ALL"

// TestScenariosShortEtcd runs the short variant of every built-in scenario
// with the reserver and routers on an embedded etcd (etcd://, a key prefix
// per run), but redis-restart, which has no etcd counterpart.
// EtcdScenariosEnv turns TestScenariosShortEtcd on: `make test-scenarios`
// sets it (and .ci/run runs that target after `make test`), so that
// `make test` stays within its time budget; the etcd ledger itself is
// covered in `make test` by the conformance suite.
const EtcdScenariosEnv = "LEASEHOLD_TEST_SCENARIOS_ETCD"

func TestScenariosShortEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: the scenario set runs real processes for ~90 seconds; run without -short")
	}
	if os.Getenv(EtcdScenariosEnv) == "" {
		t.Skip("chaos on etcd: run `make test-scenarios` (sets " + EtcdScenariosEnv + "=1)")
	}
	bins := binaries(t)
	es := etcdserver.Start(t, t.TempDir())
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			sc, err := Load(name)
			if err != nil {
				t.Fatal(err)
			}
			if slices.ContainsFunc(sc.Faults, func(f Fault) bool { return f.Kind == FaultRestartRedis || f.Kind == FaultFailoverRedis }) {
				t.Skip("restarts or fails over redis-server: no etcd counterpart")
			}
			if raceEnabled {
				// The etcd embedded here runs under the race detector: its
				// latency is not etcd's. Measured on two cores: spike p95
				// TTFT 1.4-2.0 s with -race, 0.4-0.7 s without;
				// engine-failure's p99 first byte 2.0 s with -race.
				sc.Checks = slices.DeleteFunc(slices.Clone(sc.Checks), func(c string) bool {
					if c == CheckTTFTSLOHeld || c == CheckHangBounded {
						t.Logf("%s not judged: it judges latency, and -race slows the embedded etcd", c)
						return true
					}
					return false
				})
			}
			runShort(t, sc, Options{Ledger: LedgerEtcd, Etcd: es.HostPort(), Binaries: bins})
		})
	}
}

// TestTopologyScenarios runs the short variant of every built-in
// scenario that needs a store topology of its own (a Redis primary with
// replicas and three Sentinels, failed over under load) on it. Behind
// slow.Topologies: `make test-scenarios` runs it.
func TestTopologyScenarios(t *testing.T) {
	slow.Topologies(t)
	bins := binaries(t)
	for _, name := range Names() {
		sc, err := Load(name)
		if err != nil {
			t.Fatal(err)
		}
		if sc.Topology.Ledger != LedgerSentinel {
			continue
		}
		t.Run(name, func(t *testing.T) {
			res := runShort(t, sc, Options{Binaries: bins})
			if res != nil && res.Router != nil {
				t.Logf("routers: %.0f grants, %.0f leases re-asserted, %.0f lost", res.Router.Grants, res.Router.Reasserts, res.Router.Lost)
			}
		})
	}
}

// runShort runs sc's short variant with opts and fails t when a check
// failed (keeping the run's logs where CI finds them); a compare scenario
// must also show local admission over capacity and the ledger within it.
func runShort(t *testing.T, sc *Scenario, opts Options) *Result {
	t.Helper()
	opts.Short, opts.RunsDir, opts.NoChart = true, t.TempDir(), true
	began := time.Now()
	res, err := Run(context.Background(), sc, opts)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	var buf bytes.Buffer
	WriteTable(&buf, res)
	t.Logf("%s in %.1fs:%s", sc.Name, time.Since(began).Seconds(), buf.String())
	if !res.Pass {
		t.Errorf("%s on %s failed its checks (run dir %s, logs kept under it)", sc.Name, res.Ledger, res.RunDir)
		keep(t, res.RunDir)
	}
	if sc.Compare != nil {
		checkCompare(t, res)
	}
	return res
}

func checkCompare(t *testing.T, res *Result) {
	t.Helper()
	maxLocal, maxLedger := 0.0, 0.0
	for _, r := range res.Compare {
		if r.Error != "" {
			t.Errorf("%s with %d routers: %s", r.Admission, r.Routers, r.Error)
		}
		worst := max(r.KVRatio, r.SlotRatio)
		if r.Admission == AdmissionLocal {
			maxLocal = max(maxLocal, worst)
		} else {
			maxLedger = max(maxLedger, worst)
		}
	}
	if maxLocal <= 1 {
		t.Errorf("local admission peak/capacity = %.2f, want > 1.00", maxLocal)
	}
	if maxLedger > 1 {
		t.Errorf("ledger peak/capacity = %.2f, want <= 1.00", maxLedger)
	}
}

// keep copies a failed run's directory where CI can find it, when
// CHAOS_KEEP_DIR is set.
func keep(t *testing.T, dir string) {
	dst := os.Getenv("CHAOS_KEEP_DIR")
	if dst == "" {
		return
	}
	to := filepath.Join(dst, filepath.Base(dir))
	if err := os.CopyFS(to, os.DirFS(dir)); err != nil {
		t.Logf("keep %s: %v", dir, err)
	}
}

// TestReplay records a small run, replays it from its directory and gets
// the same scenario, seed and verdicts.
func TestReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: runs real processes; run without -short")
	}
	bins := binaries(t)
	sc, err := Parse([]byte(`
name: tiny
topology:
  engines: [{count: 1, kv_tokens: 20000, slots: 8}]
  tenants: [{name: acme, kv_share: 1}]
workload:
  concurrency: 6
  duration: 1500ms
  prompt_tokens: {min: 100, max: 500}
  output_tokens: {min: 100, max: 800}
  seed: 42
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := Run(ctx, sc, Options{Binaries: bins, RunDir: filepath.Join(t.TempDir(), "run")})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"scenario.yaml", "events.jsonl", "result.json", "usage.png"} {
		if _, err := os.Stat(filepath.Join(first.RunDir, f)); err != nil {
			t.Errorf("run dir lacks %s: %v", f, err)
		}
	}
	again, err := Replay(ctx, first.RunDir, Options{Binaries: bins})
	if err != nil {
		t.Fatal(err)
	}
	if again.Seed != 42 || again.Scenario != "tiny" {
		t.Errorf("replay ran %s seed %d, want tiny seed 42", again.Scenario, again.Seed)
	}
	if fmt.Sprint(verdicts(first)) != fmt.Sprint(verdicts(again)) {
		t.Errorf("replay verdicts %v, recorded %v", verdicts(again), verdicts(first))
	}
	if !first.Pass || !again.Pass {
		t.Errorf("recorded pass=%v, replay pass=%v, want both", first.Pass, again.Pass)
	}
	reqs, _, _, _, _, err := ReadEvents(filepath.Join(first.RunDir, "events.jsonl"))
	if err != nil || len(reqs) == 0 {
		t.Errorf("event log: %d requests, err %v", len(reqs), err)
	}
}

func verdicts(r *Result) map[string]bool {
	m := map[string]bool{}
	for _, c := range r.Checks {
		m[c.Check] = c.Pass
	}
	return m
}
