// Package slow gates the tests that start multi-process store topologies
// (Redis Sentinel failovers, a sharded Redis Cluster, a three-member etcd)
// and run load through faults: they take minutes on two cores, so
// `make test` skips them and `make test-scenarios` (run by .ci/run after
// `make test`) runs them. Their names start with TestTopology, which is
// how that target selects them.
package slow

import (
	"os"
	"testing"
)

// Env turns the topology tests on: `make test-scenarios` sets it to 1.
const Env = "LEASEHOLD_TEST_TOPOLOGIES"

// Topologies skips t unless Env is set, saying how to run it.
func Topologies(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("a store topology under load: skipped in -short")
	}
	if os.Getenv(Env) == "" {
		t.Skip("a store topology under load: run `make test-scenarios` (sets " + Env + "=1)")
	}
}
