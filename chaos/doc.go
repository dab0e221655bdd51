// Package chaos runs Leasehold fleets as real processes on loopback, drives
// OpenAI traffic through them, injects faults on a schedule and checks the
// guarantees of docs/design.md against the engines' own ground truth.
//
// It is shaped like etcd's tests/robustness:
//
//   - scenario.go: the YAML scenario (topology, workload, fault timeline,
//     checks) and its short CI variant;
//   - cluster.go: builds the binaries once and starts the topology
//     (reserver, redis-server, enginesims, routers) on free loopback ports;
//   - proxy.go: the in-process TCP fault proxy that partitions a router
//     from the ledger or an engine (drop, latency, reset);
//   - traffic.go: the client pool (closed loop or open arrival rate);
//   - failpoint.go: the fault timeline (kill/stop/cont a router, kill the
//     reserver, restart Redis, partitions, stale telemetry, engine crash,
//     clock offset, duplicate retries);
//   - enginefail.go: engines killed, hung or answering 500s, the breaker
//     transitions logged from the audit, and their checks;
//   - spike.go: a step in open-loop arrivals, the ttft_slo check and the
//     baselines run beside a scenario (seed 002's table);
//   - ratecheck.go: token_rate, tenants' fleet-wide rate budgets judged
//     from the engines' usage of every answered request;
//   - recovery.go: how soon grants come after a cold start and after the
//     ledger restarts empty (cold_start, recovery_resumes);
//   - sentinel.go, checks_failover.go: topology.ledger redis-sentinel (a
//     primary, replicas and three Sentinels), the failover_redis fault
//     and the grants_resume check;
//   - record.go: the JSONL event log (requests, faults, samples of every
//     engine's /admin/stats and the reserver audit);
//   - validate.go: the checks, each a verdict with its figure;
//   - report.go: the table, the JSON report and the usage chart.
//
// Every run writes its resolved scenario (seed included), event log, report
// and chart under a run directory; Replay reruns the same schedule from it.
// The chaos package owns the processes it starts and stops every one of them
// before Run returns.
//
// From the command line (cmd/chaos):
//
//	go run ./cmd/chaos quickstart              # embedded ledger, nothing to install
//	go run ./cmd/chaos --short all             # every scenario's CI variant
//	go run ./cmd/chaos --ledger redis --json kill-routers
//	go run ./cmd/chaos spike                   # the SLO run and its three baselines, one table
//	go run ./cmd/chaos --ledger etcd --etcd 127.0.0.1:2379 kill-routers
//	go run ./cmd/chaos replay $TMPDIR/leasehold-chaos/kill-routers-memory-…
//
// The runner starts redis-server itself but runs no etcd: topology.ledger
// etcd uses the one at Options.Etcd (--etcd), each run under a key prefix
// of its own, and allows etcd's late expiry (whole-second lease TTLs,
// checked every 0.5 s: 1.5 s) on top of every reclaim bound. The tests run
// every scenario but redis-restart on an embedded etcd. clock_offset restarts the router with LEASEHOLD_CLOCK_OFFSET
// (its --clock-offset) in its environment, so its wall clock, lease
// manager included, is really skewed; the clock-skew scenario shows that
// skew between routers has no effect, since the ledger decides by its own
// clock.
package chaos
