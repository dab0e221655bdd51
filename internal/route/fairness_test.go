package route

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// The fairness measurement (issue 17, "Must show"): two tenants of equal
// weight in one class, both backlogged on a full pool, one sending 10× the
// other (closed loops: 10× the clients, each sending its next request as
// soon as the last is answered). Two router processes on one Redis ledger
// in front of one simulated engine of 4 slots; each tenant's clients are
// split evenly between the routers (fair sharing is per router's queue, so
// the light tenant has enough clients on each to stay backlogged there).
// FIFO gives the light tenant about its share of the clients, 1/11 (0.104
// measured on the code before the flow control); the wait queue's fair
// sharing gives it half of the grants. The share is logged; the test holds
// it to >= 0.45. Grants are counted by answers within the window: after
// the warm-up, before the clients stop.
const (
	fairRouters      = 2
	fairSlots        = 4
	fairLightClients = 10
	fairHeavyClients = 10 * fairLightClients
	fairWarmup       = 2 * time.Second
	fairWindow       = 8 * time.Second
	// fairMinShare is the bound on the light tenant's share.
	fairMinShare = 0.45
)

func TestFairShareBetweenTenants(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process load test")
	}
	// 8 tokens at 50 tokens/s: each request holds its slot for about 160ms.
	engine := startEngine(t, "gpu-0", engineOpts{kv: 1 << 16, slots: fairSlots, speed: 1, output: 4000})
	fleetPath := fleetYAML(t, []*proc{engine}, 1<<16, fairSlots, `tenants:
  - {name: heavy, api_keys: ["sk-heavy"], kv_share: 1}
  - {name: light, api_keys: ["sk-light"], kv_share: 1}
lease:
  recovery_window: 0s
`)
	rs := redisserver.Start(t)
	routers := startRouters(t, fairRouters, rs, fleetPath, "--queue-timeout", "60s", "--queue-depth", "256", "--log-level", "warn")

	tr := &http.Transport{MaxIdleConnsPerHost: 2 * fairHeavyClients}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 90 * time.Second}
	begin := time.Now()
	from, to := begin.Add(fairWarmup), begin.Add(fairWarmup+fairWindow)
	var (
		granted = map[string]*atomic.Int64{"heavy": {}, "light": {}}
		failed  atomic.Int64
		wg      sync.WaitGroup
	)
	run := func(tenant string, c int) {
		base := routers[c%len(routers)].url() + "/v1/completions"
		for i := 0; time.Now().Before(to); i++ {
			st, _, body, err := post(t.Context(), client, base, "sk-"+tenant,
				map[string]any{"model": "m", "prompt": fmt.Sprintf("%s %d %d", tenant, c, i), "max_tokens": 8})
			if err != nil || st != http.StatusOK {
				failed.Add(1)
				t.Errorf("%s client %d: %d %s (%v)", tenant, c, st, body, err)
				return
			}
			// A grant counts when its answer comes within the window:
			// the pool is full and both tenants backlogged by then.
			if now := time.Now(); now.After(from) && now.Before(to) {
				granted[tenant].Add(1)
			}
		}
	}
	for c := range fairHeavyClients {
		wg.Go(func() { run("heavy", c) })
	}
	for c := range fairLightClients {
		wg.Go(func() { run("light", c) })
	}
	wg.Wait()

	light, heavy := granted["light"].Load(), granted["heavy"].Load()
	share := float64(light) / float64(light+heavy)
	es := getStats(t, engine.url())
	t.Logf("fairness: %d light and %d heavy clients over %d routers, %d slots, %s window: light %d, heavy %d grants: light share %.3f (FIFO: about %.3f; want >= %.2f)",
		fairLightClients, fairHeavyClients, len(routers), fairSlots, fairWindow, light, heavy, share,
		float64(fairLightClients)/float64(fairLightClients+fairHeavyClients), fairMinShare)
	t.Logf("engine: peak accepted sequences %d of %d slots, %d completed", es.PeakAcceptedSequences, es.Slots, es.RequestsCompleted)
	if failed.Load() > 0 {
		t.Fatalf("%d requests failed", failed.Load())
	}
	if light+heavy < 100 {
		t.Fatalf("only %d grants in the window: the load did not fill the pool", light+heavy)
	}
	if share < fairMinShare {
		t.Errorf("light tenant's share of grants %.3f, want >= %.2f (equal weights)", share, fairMinShare)
	}
	if es.PeakAcceptedSequences > es.Slots {
		t.Errorf("engine peak accepted sequences %d > %d slots", es.PeakAcceptedSequences, es.Slots)
	}
}
