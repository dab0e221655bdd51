package main_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/freeport"
	pb "github.com/leasehold/leasehold/internal/gen/leaseholdv1"
	"github.com/leasehold/leasehold/internal/testutil/hostile"
	"github.com/leasehold/leasehold/internal/testutil/syncbuf"
)

// TestHostileClients: a reserver limited to 256 file descriptors keeps
// answering /readyz within the 1s while 300 idle keep-alive
// connections are held, closes them within --http-idle-timeout, and
// refuses a gRPC message over --grpc-max-recv-bytes with ResourceExhausted
// before decoding it.
func TestHostileClients(t *testing.T) {
	const idle = 2 * time.Second
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(path, []byte(fleetYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr := freeport.AddrT(t), freeport.AddrT(t)
	cmd := exec.Command("sh", "-c", `ulimit -n 256 && exec "$0" "$@"`, binary(), "--config", path, "--grpc-listen", grpcAddr,
		"--http-listen", httpAddr, "--http-idle-timeout", idle.String(), "--grpc-max-recv-bytes", "4096")
	cmd.Env = append(os.Environ(), "LEASEHOLD_TOKEN=tok-1")
	stderr := &syncbuf.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("reserver stderr:\n%s", stderr.String())
		}
	}()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	readyz := func() (int, time.Duration, error) {
		start := time.Now()
		resp, err := client.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return 0, time.Since(start), err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, time.Since(start), err
	}
	waitFor(t, func() bool { code, _, _ := readyz(); return code == http.StatusOK }, "ready")
	if !strings.Contains(stderr.String(), "max_conns=96") {
		t.Errorf("the reserver's log does not show the connection limit derived from 256 descriptors (96):\n%s", stderr.String())
	}

	run := hostile.Start(httpAddr, 300, hostile.Attack{Kind: hostile.IdleKeepAlive, Path: "/healthz"})
	held := run.Open()
	for i := range 3 {
		code, took, err := readyz()
		if err != nil || code != http.StatusOK || took > time.Second {
			t.Errorf("round %d: /readyz = %d, %v after %s; want 200 within 1s", i, code, err, took)
		}
	}
	t.Logf("%d of 300 idle connections open when /readyz was asked", held)
	run.Wait(idle + time.Second)
	for i, c := range run.Stop() {
		switch {
		case c.DialErr != nil:
			t.Errorf("idle connection %d: could not connect: %v", i, c.DialErr)
		case !c.ClosedBy || c.ClosedAfter > idle+time.Second:
			t.Errorf("idle connection %d: closed by the reserver %v, after %s; want closed within %s (+1s allowance)", i, c.ClosedBy, c.ClosedAfter, idle)
		}
	}

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok-1")
	lc := pb.NewLedgerClient(conn)
	if _, err := lc.Stats(ctx, &pb.StatsRequest{Pool: strings.Repeat("p", 8192)}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("Stats with an 8 KiB message = %v, want ResourceExhausted", err)
	}
	if _, err := lc.Stats(ctx, &pb.StatsRequest{Pool: "llama"}); err != nil {
		t.Errorf("Stats under the limit: %v", err)
	}
}
