package chaos

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testutil/etcdserver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(etcdserver.IgnoreLeaks(), goleak.Cleanup(func(code int) {
		if buildDir != "" {
			os.RemoveAll(buildDir)
		}
		os.Exit(code)
	}))...)
}

var (
	buildOnce sync.Once
	builtBins Binaries
	buildErr  error
	buildDir  string
)

// binaries builds the project's binaries once per test binary.
func binaries(t *testing.T) Binaries {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "chaos-test-bin-")
		if buildErr == nil {
			builtBins, buildErr = Build(context.Background(), filepath.Join(buildDir, "bin"))
		}
	})
	if buildErr != nil {
		t.Fatalf("build: %v", buildErr)
	}
	if builtBins.Router == "" {
		t.Fatalf("cmd/router is missing from this checkout: the chaos scenarios need it")
	}
	return builtBins
}
