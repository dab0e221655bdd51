package route

// Issue 17 against real router processes on a real Redis ledger: SIGHUP
// reloads tenants and keys (a bad file keeps the old ones); a tenant given
// only batch cannot escalate to interactive on any router, refused or
// clamped, and the interactive headroom holds; two tenants backlogged in
// one class share the grants (fairness_test.go).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"
	"github.com/leasehold/leasehold/internal/ledger"
	lhredis "github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
	"github.com/leasehold/leasehold/internal/waitq"
)

// startRouters starts n router processes on one Redis ledger, with args
// added to each command line, and waits until they are ready.
func startRouters(t *testing.T, n int, rs *redisserver.Server, fleetPath string, args ...string) []*proc {
	t.Helper()
	var routers []*proc
	for i := range n {
		addr := freeport.AddrT(t)
		routers = append(routers, startProcEnv(t, fmt.Sprintf("router-%d", i), "router", addr, withoutLeaseholdEnv(),
			append([]string{"--ledger", rs.URL(), "--config", fleetPath, "--listen", addr, "--id", fmt.Sprintf("r%d", i),
				"--max-model-len", "2048"}, args...)...))
	}
	for _, r := range routers {
		waitHTTP(t, r.url()+"/readyz", 15*time.Second)
	}
	return routers
}

// sighup signals every router and waits until each logged want for the
// n-th time.
func sighup(t *testing.T, routers []*proc, want string, n int) {
	t.Helper()
	for _, r := range routers {
		if err := r.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range routers {
		deadline := time.Now().Add(10 * time.Second)
		for strings.Count(r.out.String(), want) < n {
			select {
			case <-r.done:
				t.Fatalf("%s exited on SIGHUP", r.name)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not log %q %d times within 10s", r.name, want, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// ledgerStats reads pool m from the Redis ledger.
func ledgerStats(t *testing.T, rs *redisserver.Server) (ledger.PoolStats, []ledger.Lease) {
	t.Helper()
	l, err := lhredis.Open(rs.URL(), lhredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	st, err := l.Stats(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	ls, err := l.List(ctx, ledger.Filter{Pool: "m"})
	if err != nil {
		t.Fatal(err)
	}
	return st, ls
}

// TestRouterReloadsOnSIGHUP: a router process reloads its fleet file on
// SIGHUP: a changed API key works at once and the old one is refused; a
// new tenant is configured in the ledger and held to its classes; a file
// that does not validate is logged and the previous fleet kept; a file
// that also changes a pool applies its tenants and logs that the pool
// needs a restart. Before, SIGHUP was ignored (and, before that, killed
// the router).
func TestRouterReloadsOnSIGHUP(t *testing.T) {
	engine := startEngine(t, "gpu-0", engineOpts{kv: 4096, slots: 8, speed: 1, output: 16})
	pool := func(kv int) string {
		return fmt.Sprintf("pools:\n  - name: m\n    engines:\n      - {id: gpu-0, url: %q, kv_tokens: %d, slots: 8, stale_after: 0s}\n", engine.url(), kv)
	}
	const tail = "priorities:\n  - {name: interactive, max_fill: 1.0}\n  - {name: batch, max_fill: 0.5}\nlease:\n  recovery_window: 0s\n"
	v1 := pool(4096) + "tenants:\n  - {name: acme, api_keys: [\"sk-old\"], kv_share: 1}\n" + tail
	v2 := pool(4096) + "tenants:\n  - {name: acme, api_keys: [\"sk-new\"], kv_share: 1}\n" +
		"  - {name: beta, api_keys: [\"sk-beta\"], kv_share: 0.5, priorities: [batch]}\n" + tail
	bad := strings.Replace(v2, "kv_share: 0.5", "kv_share: 7", 1)
	v3 := strings.Replace(strings.Replace(v2, "sk-new", "sk-third", 1), pool(4096), pool(2048), 1)
	fleetPath := filepath.Join(t.TempDir(), "fleet.yaml")
	writeFleet(t, fleetPath, v1)
	rs := redisserver.Start(t)
	r := startRouters(t, 1, rs, fleetPath)[0]
	client := &http.Client{Timeout: 10 * time.Second}
	status := func(key string, hdr ...string) (int, string) {
		t.Helper()
		st, _, body, err := post(t.Context(), client, r.url()+"/v1/completions", key, map[string]any{"model": "m", "prompt": "hi", "max_tokens": 4}, hdr...)
		if err != nil {
			t.Fatal(err)
		}
		code, _ := errCode(body)
		return st, code
	}
	expect := func(when, key string, want int, hdr ...string) {
		t.Helper()
		if got, code := status(key, hdr...); got != want {
			t.Errorf("%s: %s %v answered %d %s, want %d", when, key, hdr, got, code, want)
		}
	}
	expect("before", "sk-old", http.StatusOK)
	expect("before", "sk-new", http.StatusUnauthorized)

	writeFleet(t, fleetPath, v2)
	sighup(t, []*proc{r}, "fleet reloaded", 1)
	expect("after the reload", "sk-new", http.StatusOK)
	expect("after the reload", "sk-old", http.StatusUnauthorized)
	// beta is new to the ledger: the fleet applier configures it after
	// the swap, so its first requests may find the ledger without it.
	deadline := time.Now().Add(10 * time.Second)
	for got, code := status("sk-beta"); got != http.StatusOK; got, code = status("sk-beta") {
		if got != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("new tenant beta: %d %s, want 200 once the ledger has it", got, code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got, code := status("sk-beta", "X-Priority", "interactive"); got != http.StatusForbidden || code != "priority_not_allowed" {
		t.Errorf("beta (batch only) asking interactive: %d %s, want 403 priority_not_allowed", got, code)
	}
	if st, _ := ledgerStats(t, rs); len(st.Tenants) != 2 {
		t.Errorf("the ledger has %d tenants after the reload, want 2 (acme, beta)", len(st.Tenants))
	}

	writeFleet(t, fleetPath, bad)
	sighup(t, []*proc{r}, "fleet reload failed; keeping the previous fleet", 1)
	if !strings.Contains(r.out.String(), "tenants[1].kv_share") {
		t.Errorf("the failed reload's log does not name the bad field tenants[1].kv_share")
	}
	expect("after a bad file", "sk-new", http.StatusOK)
	expect("after a bad file", "sk-beta", http.StatusOK)

	writeFleet(t, fleetPath, v3)
	sighup(t, []*proc{r}, "fleet reloaded", 2)
	waitLog(t, r, "apply only at start", 5*time.Second)
	if !strings.Contains(r.out.String(), "kept=[pools]") {
		t.Errorf("the reload that changed a pool did not log kept=[pools]")
	}
	expect("after a reload that also changed a pool", "sk-third", http.StatusOK)
	expect("after a reload that also changed a pool", "sk-new", http.StatusUnauthorized)
	if st, _ := ledgerStats(t, rs); st.CapacityKV != 4096 {
		t.Errorf("the pool's capacity in the ledger is %d after a reload that changed it, want 4096 (pools apply at start)", st.CapacityKV)
	}
	for series, want := range map[string]float64{
		`leasehold_router_fleet_reloads_total{result="ok"}`:                                                                   2,
		`leasehold_router_fleet_reloads_total{result="error"}`:                                                                1,
		`leasehold_router_tenant_refusals_total{pool="m",priority="interactive",reason="priority_not_allowed",tenant="beta"}`: 1,
	} {
		if got := metricSum(r.url(), series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}

// TestEscalation is the "Must show": a tenant given only batch
// asks for interactive on each of three routers on one ledger. Under
// priority_policy refuse every router answers 403 priority_not_allowed
// and the ledger sees no call; reloaded with clamp, every router runs it
// as batch, so it fills no more than batch's max_fill (4 of 8 slots) and
// the interactive headroom stays free for a tenant allowed interactive.
// The engine's own count is the judge. Before, the same request was
// admitted into the headroom.
func TestEscalation(t *testing.T) {
	const slots = 8
	engine := startEngine(t, "gpu-0", engineOpts{kv: 1 << 16, slots: slots, speed: 1, output: 4000})
	tenants := `tenants:
  - {name: bulk, api_keys: ["sk-bulk"], kv_share: 1, priorities: [batch]}
  - {name: live, api_keys: ["sk-live"], kv_share: 1}
priorities:
  - {name: interactive, max_fill: 1.0}
  - {name: batch, max_fill: 0.5}
default_priority: interactive
lease:
  recovery_window: 0s
`
	fleetPath := fleetYAML(t, []*proc{engine}, 1<<16, slots, tenants)
	rs := redisserver.Start(t)
	routers := startRouters(t, 3, rs, fleetPath, "--queue-timeout", "0s")
	client := &http.Client{Timeout: 30 * time.Second}
	body := map[string]any{"model": "m", "prompt": "escalate", "max_tokens": 1000}

	for _, r := range routers {
		for _, c := range []struct {
			name string
			body map[string]any
			hdr  []string
		}{
			{"X-Priority", body, []string{"X-Priority", "interactive"}},
			{"body priority", map[string]any{"model": "m", "prompt": "escalate", "max_tokens": 1000, "priority": "interactive"}, nil},
		} {
			st, _, b, err := post(t.Context(), client, r.url()+"/v1/completions", "sk-bulk", c.body, c.hdr...)
			if code, param := errCode(b); err != nil || st != http.StatusForbidden || code != "priority_not_allowed" || param != "priority" {
				t.Errorf("refuse, %s, %s: %d %s (%v), want 403 priority_not_allowed (param priority)", r.name, c.name, st, b, err)
			}
		}
	}
	if st, _ := ledgerStats(t, rs); st.Leases != 0 || st.Counters[ledger.CounterGrants] != 0 || st.Counters[ledger.CounterRejections] != 0 {
		t.Errorf("after the refusals the ledger has %d leases, %d grants, %d rejections; want none: refused before any lease",
			st.Leases, st.Counters[ledger.CounterGrants], st.Counters[ledger.CounterRejections])
	}

	clamp, err := os.ReadFile(fleetPath)
	if err != nil {
		t.Fatal(err)
	}
	writeFleet(t, fleetPath, string(clamp)+"priority_policy: clamp\n")
	sighup(t, routers, "fleet reloaded", 1)
	var held []*stream
	defer func() {
		for _, s := range held {
			s.close()
		}
	}()
	refused := 0
	for i := range slots {
		r := routers[i%len(routers)]
		s, st, b := (&harness{url: r.url(), client: client}).openStream(t, "sk-bulk", body, "X-Priority", "interactive")
		if s != nil {
			held = append(held, s)
			continue
		}
		refused++
		if code, _ := errCode(b); st != http.StatusServiceUnavailable || code != string(ledger.ReasonPriorityHeadroom) {
			t.Errorf("clamp, %s: bulk's stream %d: %d %s, want 200 or 503 priority_headroom", r.name, i, st, b)
		}
	}
	bulkHeld := len(held)
	if bulkHeld != slots/2 || refused != slots/2 {
		t.Errorf("clamp: bulk asking interactive held %d streams (%d refused), want %d: batch's max_fill of %d slots", bulkHeld, refused, slots/2, slots)
	}
	_, leases := ledgerStats(t, rs)
	for _, l := range leases {
		if l.Tenant == "bulk" && l.Priority != "batch" {
			t.Errorf("bulk's lease %s is %s, want batch (clamped)", l.ID, l.Priority)
		}
	}
	for _, r := range routers { // the headroom is there for interactive traffic, on every router
		s, st, b := (&harness{url: r.url(), client: client}).openStream(t, "sk-live", body, "X-Priority", "interactive")
		if s == nil {
			t.Fatalf("live's interactive stream on %s: %d %s, want 200: the headroom must hold", r.name, st, b)
		}
		held = append(held, s)
	}
	es := getStats(t, engine.url())
	t.Logf("engine: peak accepted sequences %d of %d slots; bulk held %d, live %d", es.PeakAcceptedSequences, es.Slots, bulkHeld, len(held)-bulkHeld)
	if es.PeakAcceptedSequences > es.Slots || es.PeakAcceptedSequences != len(held) {
		t.Errorf("engine peak accepted sequences %d, want %d (the streams held) <= %d slots", es.PeakAcceptedSequences, len(held), es.Slots)
	}
}

// TestEnginePriority: a pool with engine_priority sends each request's
// class to its engines as vLLM's "priority" field, the class's rank
// (interactive 0, batch 1), whatever the client put in the body; a pool
// without it sends none (the router's field is never passed on).
func TestEnginePriority(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("engine_priority %v", on), func(t *testing.T) {
			var mu sync.Mutex
			var seen []string // each upstream body's "priority", "-" when absent
			capture := func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Method != http.MethodPost || r.URL.Path != "/v1/completions" {
						next.ServeHTTP(w, r)
						return
					}
					b, _ := io.ReadAll(r.Body)
					var body map[string]json.RawMessage
					_ = json.Unmarshal(b, &body)
					p, ok := body["priority"]
					mu.Lock()
					seen = append(seen, map[bool]string{true: string(p), false: "-"}[ok])
					mu.Unlock()
					r.Body = io.NopCloser(bytes.NewReader(b))
					next.ServeHTTP(w, r)
				})
			}
			pool := ""
			if on {
				pool = "    engine_priority: true\n"
			}
			h := newHarness(t, harnessOpts{engines: 1, kv: 4096, slots: 8, speed: 100, output: 4, extra: tenants, pool: pool, wrap: capture})
			for _, c := range []struct {
				body map[string]any
				hdr  []string
			}{
				{map[string]any{"model": "m", "prompt": "a", "max_tokens": 4}, nil},                                                        // the default: interactive
				{map[string]any{"model": "m", "prompt": "b", "max_tokens": 4}, []string{"X-Priority", "batch"}},                            // batch
				{map[string]any{"model": "m", "prompt": "c", "max_tokens": 4, "priority": "interactive"}, nil},                             // named in the body
				{map[string]any{"model": "m", "prompt": "d", "max_tokens": 4, "priority": "batch", "stream": true}, nil},                   // streamed
				{map[string]any{"model": "m", "prompt": "e", "max_tokens": 4, "priority": "batch"}, []string{"X-Priority", "interactive"}}, // the header wins
			} {
				if st, _, b, err := post(t.Context(), h.client, h.url+"/v1/completions", "sk-acme", c.body, c.hdr...); err != nil || st != http.StatusOK {
					t.Fatalf("%v %v: %d %s (%v)", c.body, c.hdr, st, b, err)
				}
			}
			want := []string{"0", "1", "0", "1", "0"}
			if !on {
				want = []string{"-", "-", "-", "-", "-"}
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(seen, want) {
				t.Errorf("the engine saw priority %q, want %q", seen, want)
			}
		})
	}
}

// TestQueueBounds: a tenant's max_queued bounds its waiters (429
// queue_full) without touching other tenants'; the pool's --queue-depth
// bounds everyone's (503 queue_full). Each is counted per tenant.
func TestQueueBounds(t *testing.T) {
	h := newHarness(t, harnessOpts{engines: 1, kv: 4096, slots: 1, speed: 1, output: 2000,
		extra: strings.Replace(tenants, `{name: tiny, api_keys: ["sk-tiny"], kv_share: 0.1}`, `{name: tiny, api_keys: ["sk-tiny"], kv_share: 1, max_queued: 1}`, 1),
		cfg:   func(c *Config) { c.QueueDepth, c.QueueTimeout = 2, time.Minute }})
	hold := h.mustStream(t, "the only slot", "sk-acme", map[string]any{"model": "m", "prompt": "hold", "max_tokens": 1000, "ignore_eos": true})
	defer hold.close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	queued := func(key string) {
		go func() {
			_, _, _, _ = post(ctx, h.client, h.url+"/v1/completions", key, map[string]any{"model": "m", "prompt": "wait", "max_tokens": 4})
		}()
	}
	waitDepth := func(n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for h.r.pools["m"].q.Len() != n {
			if time.Now().After(deadline) {
				t.Fatalf("queue depth %d, want %d", h.r.pools["m"].q.Len(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	expect := func(key string, status int) {
		t.Helper()
		st, hdr, b, err := post(t.Context(), h.client, h.url+"/v1/completions", key, map[string]any{"model": "m", "prompt": "one more", "max_tokens": 4})
		if code, _ := errCode(b); err != nil || st != status || code != string(waitq.ReasonQueueFull) || hdr.Get("Retry-After") == "" {
			t.Errorf("%s: %d %s (%v), want %d queue_full with a Retry-After", key, st, b, err, status)
		}
	}
	queued("sk-tiny")
	waitDepth(1)
	expect("sk-tiny", http.StatusTooManyRequests) // its own bound: 1
	queued("sk-acme")                             // another tenant still enters
	waitDepth(2)
	expect("sk-acme", http.StatusServiceUnavailable) // the pool's bound: 2
	for series, want := range map[string]float64{
		`leasehold_router_tenant_refusals_total{pool="m",priority="interactive",reason="queue_full",tenant="tiny"}`: 1,
		`leasehold_router_tenant_refusals_total{pool="m",priority="interactive",reason="queue_full",tenant="acme"}`: 1,
		`leasehold_router_tenant_queued{pool="m",priority="interactive",tenant="tiny"}`:                             1,
		`leasehold_router_tenant_reserved_slots{pool="m",priority="interactive",tenant="acme"}`:                     1,
	} {
		if got := metricSum(h.url, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}
