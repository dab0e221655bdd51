// Package gobuild builds the binaries a package's tests run as processes:
// with `go build`, into a temporary directory, before the tests (Main) or
// at most once per test process on first use (Once).
package gobuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// Go builds the main packages pkgs (import paths, or paths relative to the
// working directory) into dir, one binary per package named after its
// last path element; env is added to the environment (e.g. CGO_ENABLED=0).
func Go(dir string, env []string, pkgs ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", strings.Join(pkgs, " "), err, out)
	}
	return nil
}

// Main is the TestMain of tests that run the binaries of pkgs: it builds
// them (see Go) into a new temporary directory, sets *dir to it, runs the
// tests, fails a passing run that leaked goroutines (goleak), removes the
// directory and exits with the tests' status.
func Main(m *testing.M, dir *string, pkgs ...string) {
	os.Exit(run(m, dir, pkgs))
}

func run(m *testing.M, dir *string, pkgs []string) int {
	d, err := os.MkdirTemp("", "leasehold-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(d)
	*dir = d
	if err := Go(d, nil, pkgs...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

// Once is a build run at most once per test process: the first Dir runs
// it, every later call gets the same directory, or fails the same way.
type Once struct {
	once sync.Once
	dir  string
	err  error
}

// Dir returns the directory the build wrote into, running build in a new
// temporary directory on the first call. A failed build fails t.
func (o *Once) Dir(t testing.TB, build func(dir string) error) string {
	t.Helper()
	o.once.Do(func() {
		o.dir, o.err = os.MkdirTemp("", "leasehold-test-bin-")
		if o.err == nil {
			o.err = build(o.dir)
		}
	})
	if o.err != nil {
		t.Fatalf("build binaries: %v", o.err)
	}
	return o.dir
}

// Remove deletes the directory of a build that ran; TestMain calls it
// after the tests.
func (o *Once) Remove() {
	if o.dir != "" {
		os.RemoveAll(o.dir)
	}
}
