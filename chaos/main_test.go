package chaos

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testutil/etcdserver"
	"github.com/leasehold/leasehold/internal/testutil/gobuild"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(etcdserver.IgnoreLeaks(), goleak.Cleanup(func(code int) {
		buildDir.Remove()
		os.Exit(code)
	}))...)
}

var (
	buildDir  gobuild.Once
	builtBins Binaries
)

// binaries builds the project's binaries once per test binary.
func binaries(t *testing.T) Binaries {
	t.Helper()
	buildDir.Dir(t, func(dir string) (err error) {
		builtBins, err = Build(context.Background(), filepath.Join(dir, "bin"))
		return err
	})
	if builtBins.Router == "" {
		t.Fatalf("cmd/router is missing from this checkout: the chaos scenarios need it")
	}
	return builtBins
}
