package gobuild

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestOnceBuildsOnce(t *testing.T) {
	var o Once
	defer o.Remove()
	calls := 0
	build := func(dir string) error {
		calls++
		return os.WriteFile(filepath.Join(dir, "bin"), []byte("x"), 0o755)
	}
	first, second := o.Dir(t, build), o.Dir(t, build)
	if calls != 1 || first != second {
		t.Errorf("two Dir calls: build ran %d times, dirs %q and %q; want once, one dir", calls, first, second)
	}
	if _, err := os.Stat(filepath.Join(first, "bin")); err != nil {
		t.Errorf("built file: %v", err)
	}
	o.Remove()
	if _, err := os.Stat(first); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Remove: stat %s = %v, want not exist", first, err)
	}
}

func TestGoBuildsNamedBinaries(t *testing.T) {
	dir := t.TempDir()
	if err := Go(dir, []string{"CGO_ENABLED=0"}, "github.com/leasehold/leasehold/cmd/enginesim"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "enginesim")); err != nil {
		t.Errorf("binary: %v", err)
	}
	if err := Go(dir, nil, "github.com/leasehold/leasehold/no/such/pkg"); err == nil {
		t.Error("Go of a missing package succeeded")
	}
}
