package redteam_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/internal/audit"
	"github.com/leasehold/leasehold/internal/freeport"
	pb "github.com/leasehold/leasehold/internal/gen/leaseholdv1"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/gobuild"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
	"github.com/leasehold/leasehold/internal/testutil/syncbuf"
)

// bins are the reserver, router and enginesim, built once per process.
var bins gobuild.Once

func TestMain(m *testing.M) {
	code := m.Run()
	bins.Remove()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func binDir(t *testing.T) string {
	t.Helper()
	return bins.Dir(t, func(dir string) error {
		const mod = "github.com/leasehold/leasehold/"
		return gobuild.Go(dir, nil, mod+"cmd/reserver", mod+"cmd/router", mod+"cmd/enginesim")
	})
}

// proc is a started process; its output is kept for failure messages.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  syncbuf.Buffer
	done chan struct{}
}

// start runs bin with args and env and stops it (SIGINT, then SIGKILL) at
// cleanup, logging its output if the test failed.
func start(t *testing.T, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- %s output ---\n%s", name, p.out.String())
		}
	})
	return p
}

var httpClient = &http.Client{Timeout: 60 * time.Second}

// waitReady polls url until it answers 200.
func waitReady(t *testing.T, p *proc, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := httpClient.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited before %s answered:\n%s", p.name, url, p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s not ready within 30s (last error %v)", p.name, url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// getJSON decodes the JSON url serves, sent with token as a bearer
// token unless it is empty.
func getJSON(t *testing.T, url, token string, v any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: decode: %v", url, err)
	}
}

// engineTruth is the part of enginesim's /admin/stats the test judges.
type engineTruth struct {
	KVCapacityTokens      int64   `json:"kv_capacity_tokens"`
	Slots                 int     `json:"slots"`
	PeakAdmittedDemand    int64   `json:"peak_admitted_demand_tokens"`
	PeakAcceptedSequences int     `json:"peak_accepted_sequences"`
	OverCapacitySeconds   float64 `json:"over_capacity_seconds"`
	RequestsCompleted     int64   `json:"requests_completed"`
	Preemptions           int64   `json:"preemptions"`
}

const fleet = `
pools:
  - name: llama
    engines:
      - {id: gpu-0, url: "http://%s", format: vllm, kv_tokens: 20000, slots: 16, stale_after: 5s}
tenants:
  - {name: acme, api_keys: [sk-acme], kv_share: 1}
priorities:
  - {name: standard, max_fill: 1}
lease:
  session_ttl: 5s
  recovery_window: 0s
`

const (
	routerName  = "router-a"
	routerToken = "router-a-secret"
	adminToken  = "admin-secret"
)

// TestReassertAttack replays the red team's Reassert attack (issue 15,
// Why 1) on a reserver on Redis over gRPC with per-router tokens, an
// enginesim of 20,000 KV tokens and 16 slots, and a router: with the
// router's own token, a throwaway client on the generated pb package
// re-asserts, while six requests run through the router, a lease at
// sequence 2^53-1 of the current epoch (which made every later grant
// reuse one id), one from a later epoch, one whose id is not its fence's,
// one of 2^40 KV tokens (which blocked a tenant everywhere), one larger
// than the engine, and the id of another holder's lease. Each is refused
// and none does harm: every request through the router succeeds (no 503
// lease_lost), the engine is never over capacity by its own /admin/stats,
// and the ledger's totals equal its lease rows. A plausible lie (an old
// epoch's lease the engine can hold) is accepted, but Unconfirmed, capped
// and reported by the audit as reassert_unconfirmed.
func TestReassertAttack(t *testing.T) {
	bin := binDir(t)
	rs := redisserver.Start(t)

	engAddr := freeport.AddrT(t)
	eng := start(t, "enginesim", filepath.Join(bin, "enginesim"), nil,
		"--listen", engAddr, "--kv-tokens", "20000", "--slots", "16", "--format", "vllm", "--model", "llama",
		"--output-tokens", "100", "--decode-tokens-per-sec", "100")
	waitReady(t, eng, "http://"+engAddr+"/health")

	dir := t.TempDir()
	fleetFile := filepath.Join(dir, "fleet.yaml")
	tokens := filepath.Join(dir, "router-tokens")
	for path, body := range map[string]string{fleetFile: fmt.Sprintf(fleet, engAddr), tokens: routerName + ": " + routerToken + "\n"} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	grpcAddr, httpAddr := freeport.AddrT(t), freeport.AddrT(t)
	res := start(t, "reserver", filepath.Join(bin, "reserver"), []string{"LEASEHOLD_TOKEN=" + adminToken},
		"--ledger", rs.URL(), "--config", fleetFile, "--grpc-listen", grpcAddr, "--http-listen", httpAddr,
		"--router-tokens-file", tokens, "--reconcile-interval", "200ms")
	waitReady(t, res, "http://"+httpAddr+"/readyz")
	routerAddr := freeport.AddrT(t)
	rt := start(t, "router", filepath.Join(bin, "router"), []string{"LEASEHOLD_TOKEN=" + routerToken},
		"--ledger", "grpc://"+grpcAddr, "--config", fleetFile, "--listen", routerAddr, "--id", routerName,
		"--queue-depth", "16", "--queue-timeout", "20s")
	waitReady(t, rt, "http://"+routerAddr+"/readyz")

	// The attacker: the router's own token on a plain gRPC client.
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewLedgerClient(conn)
	// A router credential may create holder sessions of its own: a holder
	// key of the attacker's and a holder id derived from it, as
	// internal/ledger/holderkey defines them (a reserver that does not
	// check holder keys ignores the metadata).
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		t.Fatal(err)
	}
	tag := sha256.Sum256(append([]byte("leasehold holder key v1\x00"), key[:]...))
	evil := routerName + "/" + hex.EncodeToString(tag[:])[:32] + ".e0e0e0e0e0e0e0e0"
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+routerToken,
		"x-leasehold-holder-key", hex.EncodeToString(key[:]))
	ka, err := c.KeepAlive(ctx, &pb.KeepAliveRequest{Pool: "llama", Holder: evil, Ttl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatalf("KeepAlive with the router's token: %v", err)
	}
	epoch := ka.GetSession().GetEpoch()
	// The engine must have been observed, so that a plausible lie is
	// checked against its telemetry.
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := c.Stats(ctx, &pb.StatsRequest{Pool: "llama"})
		if err == nil && st.GetStats().GetEngines()[0].GetObservedAt() != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gpu-0 not observed within 20s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The attack.
	lease := func(fence *pb.Fence, edit func(l *pb.Lease)) *pb.Lease {
		l := &pb.Lease{
			Id: string(ledger.MakeLeaseID(ledger.Fence{Epoch: ledger.Epoch(fence.GetEpoch()), Seq: fence.GetSeq()})), Pool: "llama",
			Engine: "gpu-0", Tenant: "acme", Priority: "standard", KvTokens: 1000, Slots: 1, Holder: evil, RequestId: "evil", Fence: fence,
		}
		if edit != nil {
			edit(l)
		}
		return l
	}
	type attack struct {
		name  string
		lease *pb.Lease
		want  codes.Code
	}
	reassert := func(phase string, attacks []attack) {
		t.Helper()
		for _, a := range attacks {
			_, err := c.Reassert(ctx, &pb.ReassertRequest{Lease: a.lease, Ttl: durationpb.New(time.Hour)})
			if status.Code(err) != a.want {
				t.Errorf("%s: Reassert of %s with the router's token: %v, want %s", phase, a.name, err, a.want)
			}
		}
	}
	// First what made every later grant reuse one id.
	fences := []attack{
		{"sequence 2^53-1 of the current epoch", lease(&pb.Fence{Epoch: epoch, Seq: 1<<53 - 1}, nil), codes.InvalidArgument},
		{"an epoch from the future", lease(&pb.Fence{Epoch: epoch + 1, Seq: 1}, nil), codes.InvalidArgument},
		{"an id that is not its fence's", lease(&pb.Fence{Epoch: epoch, Seq: 3}, func(l *pb.Lease) {
			l.Id = string(ledger.MakeLeaseID(ledger.Fence{Epoch: ledger.Epoch(epoch), Seq: 1<<53 - 1}))
		}), codes.InvalidArgument},
	}
	reassert("before the requests", fences)

	// Six requests through the router, as the red team sent.
	type result struct {
		code int
		body string
	}
	results := make([]result, 6)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body := complete(t, routerAddr, fmt.Sprint("request ", i))
			results[i] = result{code: code, body: body}
		}()
	}

	// Then, while they run, the lot again, the amounts and the id of a
	// lease the router holds.
	var victim *pb.Lease
	for victim == nil && time.Now().Before(deadline.Add(20*time.Second)) {
		ls, err := c.List(ctx, &pb.ListRequest{Pool: "llama"})
		if err == nil && len(ls.GetLeases()) > 0 {
			victim = ls.GetLeases()[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	if victim == nil {
		t.Fatalf("no lease of the router's requests listed")
	}
	all := append(fences,
		attack{"2^40 KV tokens", lease(&pb.Fence{Epoch: epoch - 1, Seq: 7}, func(l *pb.Lease) { l.KvTokens = 1 << 40 }), codes.InvalidArgument},
		attack{"more KV tokens than the engine", lease(&pb.Fence{Epoch: epoch - 1, Seq: 8}, func(l *pb.Lease) { l.KvTokens = 20001 }), codes.InvalidArgument},
		attack{"more slots than the engine", lease(&pb.Fence{Epoch: epoch - 1, Seq: 9}, func(l *pb.Lease) { l.Slots = 17 }), codes.InvalidArgument},
		attack{"the router's own lease's id", lease(victim.GetFence(), func(l *pb.Lease) { l.KvTokens = 20000 }), codes.PermissionDenied},
	)
	for round := range 2 {
		reassert(fmt.Sprint("during the requests, round ", round), all)
	}
	// A plausible lie: accepted, but unconfirmed and capped.
	lie, err := c.Reassert(ctx, &pb.ReassertRequest{Lease: lease(&pb.Fence{Epoch: epoch - 1, Seq: 10}, func(l *pb.Lease) { l.KvTokens, l.Slots = 2000, 2 }),
		Ttl: durationpb.New(time.Hour)})
	if err != nil {
		t.Fatalf("Reassert of a plausible old-epoch lease: %v", err)
	}
	lg := lie.GetGrant().GetLease()
	if !lg.GetUnconfirmed() || lg.GetDeadline().AsTime().After(time.Now().Add(ledger.DefaultConfirmWithin+5*time.Second)) {
		t.Errorf("plausible lie = unconfirmed %v deadline %s, want unconfirmed and within %s",
			lg.GetUnconfirmed(), lg.GetDeadline().AsTime(), ledger.DefaultConfirmWithin)
	}

	wg.Wait()
	for i, r := range results {
		if r.code != http.StatusOK {
			t.Errorf("request %d through the router: %d %s, want 200 (the red team saw 503 lease_lost)", i, r.code, r.body)
		}
	}

	// The engine's own ground truth: never over capacity.
	var truth engineTruth
	getJSON(t, "http://"+engAddr+"/admin/stats", "", &truth)
	if truth.PeakAdmittedDemand > truth.KVCapacityTokens || truth.PeakAcceptedSequences > truth.Slots ||
		truth.OverCapacitySeconds > 0 || truth.Preemptions > 0 {
		t.Errorf("engine ground truth: peak demand %d of %d KV tokens, peak %d of %d sequences, %.3fs over capacity, %d preemptions; want within capacity",
			truth.PeakAdmittedDemand, truth.KVCapacityTokens, truth.PeakAcceptedSequences, truth.Slots, truth.OverCapacitySeconds, truth.Preemptions)
	}
	if truth.RequestsCompleted < int64(len(results)) {
		t.Errorf("engine completed %d requests, want the %d sent", truth.RequestsCompleted, len(results))
	}

	// No reserved totals without lease rows: the atomic check, and Stats
	// against List (only the plausible lie is left).
	ct, err := c.CheckTotals(ctx, &pb.CheckTotalsRequest{Pool: "llama"})
	if err != nil || len(ct.GetMismatches()) != 0 {
		t.Errorf("CheckTotals = %v, %v; want none", ct.GetMismatches(), err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		st, err1 := c.Stats(ctx, &pb.StatsRequest{Pool: "llama"})
		ls, err2 := c.List(ctx, &pb.ListRequest{Pool: "llama"})
		if err1 != nil || err2 != nil {
			t.Fatalf("Stats, List: %v, %v", err1, err2)
		}
		var kv, slots int64
		for _, l := range ls.GetLeases() {
			kv, slots = kv+l.GetKvTokens(), slots+l.GetSlots()
		}
		e := st.GetStats().GetEngines()[0]
		if e.GetReservedKv() == kv && e.GetReservedSlots() == slots && len(ls.GetLeases()) == 1 && ls.GetLeases()[0].GetId() == lg.GetId() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gpu-0 reserves %d KV tokens and %d slots; its %d lease rows sum to %d and %d; want equal, the lie alone",
				e.GetReservedKv(), e.GetReservedSlots(), len(ls.GetLeases()), kv, slots)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var rep audit.Report
	getJSON(t, "http://"+httpAddr+"/v1/audit", adminToken, &rep)
	var flagged, mismatched int
	for _, a := range rep.Anomalies {
		switch a.Kind {
		case audit.KindReassertUnconfirmed:
			if a.Lease == ledger.LeaseID(lg.GetId()) {
				flagged++
			}
		case audit.KindTotalsMismatch:
			mismatched++
		}
	}
	if flagged != 1 || mismatched != 0 {
		t.Errorf("audit: %d reassert_unconfirmed for the lie and %d totals_mismatch, want 1 and 0; anomalies %+v", flagged, mismatched, rep.Anomalies)
	}
	// And the pool still grants: a request after the attack succeeds.
	if code, body := complete(t, routerAddr, "after"); code != http.StatusOK {
		t.Errorf("request after the attack: %d %s, want 200", code, body)
	}
}

// complete sends one completion through the router.
func complete(t *testing.T, routerAddr, prompt string) (int, string) {
	body := fmt.Sprintf(`{"model":"llama","prompt":%q,"max_tokens":400}`, prompt)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+routerAddr+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-acme")
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
