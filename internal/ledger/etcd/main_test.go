package etcd_test

import (
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testutil/etcdserver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(etcdserver.IgnoreLeaks(), goleak.Cleanup(func(code int) {
		etcdserver.RemoveBinaries() // the etcdmember binary of StartCluster
		os.Exit(code)
	}))...)
}

// shared is one etcd member for the tests that isolate themselves by key
// prefix; tests that restart or wipe etcd start their own.
var (
	sharedOnce sync.Once
	sharedDir  string
)

// sharedDataDir is a directory for the shared member that outlives any one
// test (t.TempDir would be removed with the test that created it).
func sharedDataDir(t testing.TB) string {
	sharedOnce.Do(func() {
		d, err := os.MkdirTemp("", "leasehold-etcd-")
		if err != nil {
			t.Fatalf("temp dir: %v", err)
		}
		sharedDir = d
	})
	return sharedDir
}
