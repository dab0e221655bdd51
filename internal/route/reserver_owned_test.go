package route

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/ledgerurl"
	"github.com/leasehold/leasehold/internal/ledger/memory"
	"github.com/leasehold/leasehold/internal/reserver/rpc"
)

// TestApplyReserverOwnsConfiguration runs a router with its own
// per-router token against an in-process gRPC reserver: it may not
// Configure, so it stays not ready until an admin configures the pool,
// then adopts the ledger's engines that the fleet file also lists and
// serves, never dispatching to a fleet engine the ledger lacks.
func TestApplyReserverOwnsConfiguration(t *testing.T) {
	var urls []string
	for range 2 {
		_, url := serveSim(t, applySim, nil)
		urls = append(urls, url)
	}
	yaml := fmt.Sprintf("pools:\n  - name: m\n    retry_after: 200ms\n    engines:\n"+
		"      - {id: gpu-0, url: %q, kv_tokens: 4096, slots: 16, stale_after: 0s}\n"+
		"      - {id: gpu-1, url: %q, kv_tokens: 4096, slots: 16, stale_after: 0s}\n%s", urls[0], urls[1], applyFleetTail)
	f, err := fleet.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("fleet: %v\n%s", err, yaml)
	}

	// The reserver: a memory ledger behind gRPC on loopback.
	ml := memory.New(f.Lease.LedgerOptions(), ledger.SystemClock{})
	t.Cleanup(func() { ml.Close() })
	gs, err := rpc.NewGRPCServer(ml, rpc.Config{AdminTokens: []string{"admin-tok"}, RouterTokens: map[string]string{"r1": "tok"}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	target := "grpc://" + lis.Addr().String()

	admin, err := ledgerurl.Open(target, ledgerurl.Options{Remote: ledgerurl.Client{Token: "admin-tok"}.RemoteOptions()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	// The router's ledger, as cmd/router opens it with LEASEHOLD_TOKEN=tok.
	rl, err := ledgerurl.Open(target, ledgerurl.Options{Options: f.Lease.LedgerOptions(), Remote: ledgerurl.Client{Token: "tok"}.RemoteOptions()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rl.Close() })

	cfg := Defaults()
	cfg.Listen, cfg.ID, cfg.FleetFile, cfg.Ledger, cfg.MaxModelLen = "127.0.0.1:0", "r1", "fleet.yaml", target, 2048
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	r := startRouter(t, cfg, Options{Fleet: f, Ledger: rl, LeaseConfig: callTimeouts(2 * time.Second)})
	url := "http://" + r.Addr()

	// Before the pool is configured: not ready, and it stays so.
	for range 8 {
		resp, err := client.Get(url + "/readyz")
		if err != nil {
			t.Fatalf("readyz: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("router ready before the reserver configured the pool")
		}
		time.Sleep(150 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := rl.Configure(ctx, ledger.PoolSpec{Name: "m"}); !errors.Is(err, ledger.ErrPermissionDenied) {
		t.Fatalf("Configure with the router token: %v, want permission denied", err)
	}

	// An admin configures the pool: gpu-0 (in the fleet) and gpu-x (not in
	// this router's fleet file); gpu-1 is left out.
	spec, _, err := f.PartialPoolSpec("m", nil)
	if err != nil {
		t.Fatal(err)
	}
	var engines []ledger.EngineSpec
	for _, e := range spec.Engines {
		if e.ID == "gpu-0" {
			engines = append(engines, e)
			x := e
			x.ID, x.KVTokens, x.Slots = "gpu-x", 1<<20, 1024
			engines = append(engines, x)
		}
	}
	spec.Engines = engines
	if _, err := admin.Configure(ctx, spec); err != nil {
		t.Fatalf("admin Configure: %v", err)
	}
	waitHTTP(t, url+"/readyz", 10*time.Second)
	if got := r.adm.(*ledgerAdmitter).candidates("m"); len(got) != 1 || got[0].id != "gpu-0" {
		t.Errorf("candidates %+v, want only gpu-0 (in the ledger and the fleet)", got)
	}

	for i := range 6 {
		body := map[string]any{"model": "m", "max_tokens": 8, "messages": []map[string]string{{"role": "user", "content": fmt.Sprintf("request %d", i)}}}
		status, hdr, data, err := post(context.Background(), client, url+"/v1/chat/completions", "sk-acme", body)
		if err != nil {
			t.Fatalf("chat: %v", err)
		}
		if status != http.StatusOK || hdr.Get("X-Leasehold-Engine") != "gpu-0" {
			t.Fatalf("request %d: status %d engine %q body %s, want 200 on gpu-0", i, status, hdr.Get("X-Leasehold-Engine"), data)
		}
	}
	if s := getStats(t, urls[1]); s.AcceptedRequests != 0 {
		t.Errorf("gpu-1 (not in the ledger) accepted %d requests, want 0", s.AcceptedRequests)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := admin.Stats(ctx, "m")
		if err == nil && st.Leases == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ledger still holds leases (stats %+v, err %v)", st.Leases, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
