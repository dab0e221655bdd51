package route

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"
	"github.com/leasehold/leasehold/internal/ledger"
	lhredis "github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// The N-router tests run the real binaries: 4 routers in front of 3
// simulated engines (4096 KV tokens, 16 slots each; each image of a chat
// request takes 400 prompt tokens there), with a real Redis ledger, under
// 200 concurrent clients for a few seconds (one chat request in four
// carries one or two images), and read each engine's ground truth. With the ledger no engine's admitted demand
// (Σ (prompt + max_tokens) × n of accepted, unfinished requests) or
// accepted sequences ever exceed its capacity; with --admission=local,
// the baseline of today's routers, they do.

const (
	clusterRouters  = 4
	clusterEngines  = 3
	clusterKV       = 4096
	clusterSlots    = 16
	clusterClients  = 200
	clusterDuration = 6 * time.Second
	// clusterImage is what an image takes at the engines; the pool
	// reserves clusterImageLease per image (a floor above it).
	clusterImage      = 400
	clusterImageLease = 450
)

func TestNRoutersLedgerHoldsCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process load test")
	}
	// worst_case: what was admitted (prompt + max_tokens) never exceeds
	// capacity. elastic: admitted demand may, by design; what the requests
	// really hold never does, and no engine preempts.
	for _, reserve := range []string{"worst_case", "elastic"} {
		t.Run(reserve, func(t *testing.T) { testNRoutersHold(t, reserve) })
	}
}

func testNRoutersHold(t *testing.T, reserve string) {
	res := runCluster(t, AdmissionLedger, reserve)
	for i, s := range res.stats {
		if reserve == "worst_case" && s.PeakAdmittedDemand > s.KVCapacityTokens {
			t.Errorf("gpu-%d: peak admitted demand %d > KV capacity %d", i, s.PeakAdmittedDemand, s.KVCapacityTokens)
		}
		if reserve == "elastic" && (s.PeakActualDemand > s.KVCapacityTokens || s.Preemptions > 0) {
			t.Errorf("gpu-%d: requests held up to %d KV tokens of %d, %d preemptions", i, s.PeakActualDemand, s.KVCapacityTokens, s.Preemptions)
		}
		if s.PeakAcceptedSequences > s.Slots {
			t.Errorf("gpu-%d: peak accepted sequences %d > slots %d", i, s.PeakAcceptedSequences, s.Slots)
		}
		if s.RequestsCompleted < 20 {
			t.Errorf("gpu-%d completed only %d requests: the load did not exercise it", i, s.RequestsCompleted)
		}
	}
	if res.ok < 200 || res.rejected == 0 {
		t.Errorf("ok %d, rejected %d: want a saturating load (>= 200 answered, some rejected)", res.ok, res.rejected)
	}
	if res.other > 0 {
		t.Errorf("%d answers were neither 200 nor a capacity rejection", res.other)
	}
}

func TestNRoutersLocalBaselineOverAdmits(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process load test")
	}
	res := runCluster(t, AdmissionLocal, "worst_case")
	over := 0
	for _, s := range res.stats {
		if s.PeakAdmittedDemand > s.KVCapacityTokens || s.PeakAcceptedSequences > s.Slots {
			over++
		}
	}
	if over == 0 {
		t.Errorf("the local baseline kept every engine within capacity; the workload does not show the gap")
	}
}

type clusterResult struct {
	stats               []engineStats
	ok, rejected, other int64
}

func runCluster(t *testing.T, mode, reserve string) clusterResult {
	start := time.Now()
	var engines []*proc
	for i := range clusterEngines {
		engines = append(engines, startEngine(t, fmt.Sprintf("gpu-%d", i), engineOpts{kv: clusterKV, slots: clusterSlots, speed: 4, output: 96, media: clusterImage}))
	}
	fleetPath := fleetYAMLPool(t, engines, clusterKV, clusterSlots, fmt.Sprintf("    media_tokens: {image: %d}\n    reserve: %s\n", clusterImageLease, reserve), `tenants:
  - {name: acme, api_keys: ["sk-acme"], kv_share: 1}
lease:
  session_ttl: 3s
  recovery_window: 0s
`)
	var rs *redisserver.Server
	ledgerURL := "memory://"
	if mode == AdmissionLedger {
		rs = redisserver.Start(t)
		ledgerURL = rs.URL()
	}
	var routers []*proc
	for i := range clusterRouters {
		addr := freeport.AddrT(t)
		routers = append(routers, startProc(t, fmt.Sprintf("router-%d", i), "router", addr,
			"--ledger", ledgerURL, "--config", fleetPath, "--listen", addr, "--id", fmt.Sprintf("r%d", i),
			"--admission", mode, "--max-model-len", "2048", "--queue-timeout", "1500ms", "--scrape-interval", "500ms", "--log-level", "warn"))
	}
	for _, r := range routers {
		waitHTTP(t, r.url()+"/readyz", 15*time.Second)
	}
	setup := time.Since(start)

	tr := &http.Transport{MaxIdleConnsPerHost: clusterClients, MaxIdleConns: 2 * clusterClients}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var ok, rejected, other atomic.Int64
	stopAt := time.Now().Add(clusterDuration)
	var wg sync.WaitGroup
	for c := range clusterClients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			base := routers[c%clusterRouters].url()
			for i := 0; time.Now().Before(stopAt); i++ {
				chat := rng.IntN(2) == 0
				stream := rng.IntN(2) == 0
				n := 1
				if rng.IntN(10) == 0 {
					n = 2
				}
				text := fmt.Sprintf("client %d request %d: please summarize the following passage about distributed capacity leasing %s",
					c, i, strings.Repeat("tokens ", 5+rng.IntN(20)))
				body := map[string]any{"model": "m", "max_tokens": 64 + rng.IntN(192), "stream": stream, "n": n}
				path := "/v1/completions"
				if chat {
					path = "/v1/chat/completions"
					var user any = text
					if images := rng.IntN(8); images < 2 { // one in four: one or two images
						parts := []map[string]any{{"type": "text", "text": text}}
						for range images + 1 {
							parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]string{"url": "data:image/png;base64,iVBORw0KGgo="}})
						}
						user = parts
					}
					body["messages"] = []map[string]any{{"role": "system", "content": "You are terse."}, {"role": "user", "content": user}}
				} else {
					body["prompt"] = text
				}
				status, _, data, err := post(context.Background(), client, base+path, "sk-acme", body)
				switch {
				case err == nil && status == http.StatusOK:
					if stream && !strings.Contains(string(data), "[DONE]") {
						other.Add(1)
						t.Errorf("stream without [DONE]: %s", tail(string(data), 300))
					}
					ok.Add(1)
				case err == nil && (status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests):
					if code, _ := errCode(data); !ledger.Reason(code).Valid() {
						other.Add(1)
						t.Errorf("rejection %d with code %q, want a ledger reason", status, code)
					}
					rejected.Add(1)
					time.Sleep(time.Duration(10+rng.IntN(40)) * time.Millisecond)
				default:
					other.Add(1)
					t.Errorf("request: status %d err %v body %s", status, err, tail(string(data), 300))
				}
			}
		})
	}
	wg.Wait()
	load := time.Since(stopAt.Add(-clusterDuration))

	res := clusterResult{ok: ok.Load(), rejected: rejected.Load(), other: other.Load()}
	for _, e := range engines {
		res.stats = append(res.stats, getStats(t, e.url()))
	}
	for i, s := range res.stats {
		t.Logf("[%s] gpu-%d: peak admitted demand %d / KV %d (%.2fx), peak accepted seqs %d / slots %d (%.2fx), peak reqs %d, completed %d, over capacity %.2fs",
			mode, i, s.PeakAdmittedDemand, s.KVCapacityTokens, float64(s.PeakAdmittedDemand)/float64(s.KVCapacityTokens),
			s.PeakAcceptedSequences, s.Slots, float64(s.PeakAcceptedSequences)/float64(s.Slots), s.PeakAcceptedRequests,
			s.RequestsCompleted, s.OverCapacitySeconds)
	}
	t.Logf("[%s] %d clients over %d routers: %d ok, %d rejected, %d other in %s (setup %s)",
		mode, clusterClients, clusterRouters, res.ok, res.rejected, res.other, load.Round(time.Millisecond), setup.Round(time.Millisecond))

	if rs != nil {
		l, err := lhredis.Open(rs.URL(), lhredis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var st ledger.PoolStats
		for {
			st, err = l.Stats(ctx, "m")
			if err != nil {
				t.Fatalf("ledger stats: %v", err)
			}
			if st.Leases == 0 || ctx.Err() != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if st.Leases != 0 {
			t.Errorf("ledger holds %d leases after every request ended, want 0", st.Leases)
		}
		t.Logf("[%s] ledger: grants %d, releases %d, rejections %d", mode, st.Counters[ledger.CounterGrants],
			st.Counters[ledger.CounterReleases], st.Counters[ledger.CounterRejections])
	}
	// Graceful stop: SIGTERM exits 0.
	for _, r := range routers {
		r.stop(10 * time.Second)
		if code := r.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0", r.name, code)
		}
	}
	if mode == AdmissionLocal {
		if out := routers[0].out.String(); !strings.Contains(out, "BASELINE") {
			t.Errorf("local admission did not warn at startup; output:\n%s", tail(out, 500))
		}
	}
	return res
}
