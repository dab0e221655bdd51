package chaos

// The project's binaries, built once into a directory per run.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrNoRouter: the router binary is not available (cmd/router has not
// landed and no stand-in was given).
var ErrNoRouter = errors.New("chaos: no router binary (cmd/router is not in this checkout)")

// Binaries are the executables a run starts.
type Binaries struct {
	Reserver  string
	Enginesim string
	// Router is the router executable; RouterEnv is added to its
	// environment (tests use it to run a stand-in).
	Router    string
	RouterEnv []string
	// RedisServer is redis-server (default: REDIS_SERVER or PATH).
	RedisServer string
}

// Build compiles cmd/reserver, cmd/enginesim and, if present, cmd/router of
// the module containing the working directory into dir. Router is empty
// when cmd/router does not exist yet.
func Build(ctx context.Context, dir string) (Binaries, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return Binaries{}, fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	if root == "." || root == "" || strings.TrimSpace(string(out)) == os.DevNull {
		return Binaries{}, errors.New("chaos: run inside the leasehold module (go env GOMOD is empty)")
	}
	pkgs := []string{"./cmd/reserver", "./cmd/enginesim"}
	hasRouter := false
	if _, err := os.Stat(filepath.Join(root, "cmd", "router", "main.go")); err == nil {
		pkgs, hasRouter = append(pkgs, "./cmd/router"), true
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, err
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", dir + string(os.PathSeparator)}, pkgs...)...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("go build %s: %w\n%s", strings.Join(pkgs, " "), err, b)
	}
	b := Binaries{Reserver: filepath.Join(dir, "reserver"), Enginesim: filepath.Join(dir, "enginesim")}
	if hasRouter {
		b.Router = filepath.Join(dir, "router")
	}
	return b, nil
}
