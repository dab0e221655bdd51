package chaos

// The fault timeline: each fault runs at its offset from load start in its
// own goroutine, records an inject event and, for timed faults, a heal
// event. A killed router's holders (read from the audit just before the
// kill) are watched until their leases are gone, for the reclaim checks.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"
)

type failpoints struct {
	sc  *Scenario
	c   *cluster
	rec *recorder
	tr  *traffic

	wg sync.WaitGroup // fault goroutines and reclaim watchers
}

// run schedules every fault relative to start; wait waits for all of them,
// heals included.
func (f *failpoints) run(ctx context.Context, start time.Time) {
	for _, ft := range f.sc.Faults {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(start.Add(ft.At.D()))):
			}
			f.inject(ctx, ft)
		}()
	}
}

func (f *failpoints) wait() { f.wg.Wait() }

// note records a fault step that began at at.
func (f *failpoints) note(at time.Time, ft Fault, target, phase, detail string, err error) {
	e := FaultEvent{T: f.rec.since(at), Kind: ft.Kind, Target: target, Phase: phase, Detail: detail}
	if err != nil {
		e.Err = err.Error()
	}
	f.rec.fault(e)
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func (f *failpoints) routers(target string) []*routerNode { return targets(f.c.routers, target) }

func (f *failpoints) engines(target string) []*engineNode { return targets(f.c.engines, target) }

// targets are the nodes a fault's target names: one by name, or every
// one for "" and "all".
func targets[N node](nodes []N, target string) []N {
	var out []N
	for _, n := range nodes {
		if target == "" || target == "all" || target == n.process().name {
			out = append(out, n)
		}
	}
	return out
}

func (f *failpoints) inject(ctx context.Context, ft Fault) {
	// Cleanup-style steps (heal, restart) run under their own context so a
	// cancelled run still leaves the topology whole for its stop.
	bg := context.WithoutCancel(ctx)
	switch ft.Kind {
	case FaultKillRouter:
		for _, r := range f.routers(ft.Target) {
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				f.killRouter(ctx, bg, ft, r)
			}()
		}
	case FaultStopRouter:
		for _, r := range f.routers(ft.Target) {
			a, aerr := f.c.fetchAudit(bg)
			r.down.Store(true)
			at := time.Now()
			f.note(at, ft, r.id, "inject", "SIGSTOP", errors.Join(r.signal(syscall.SIGSTOP), aerr))
			if aerr == nil && f.silentPastTTL(ft) {
				f.watch(bg, at, a, r.id, ft.Kind, false)
			}
		}
		if ft.For > 0 {
			sleep(ctx, ft.For.D())
			for _, r := range f.routers(ft.Target) {
				err := r.signal(syscall.SIGCONT)
				r.down.Store(false)
				f.note(time.Now(), ft, r.id, "heal", "SIGCONT", err)
			}
		}
	case FaultContRouter:
		for _, r := range f.routers(ft.Target) {
			err := r.signal(syscall.SIGCONT)
			r.down.Store(false)
			f.note(time.Now(), ft, r.id, "inject", "SIGCONT", err)
		}
	case FaultKillReserver:
		for _, r := range f.c.reservers {
			if ft.Target != "" && ft.Target != "all" && ft.Target != r.name {
				continue
			}
			at := time.Now()
			r.kill()
			f.note(at, ft, r.name, "inject", "SIGKILL", nil)
			if ft.RestartAfter != nil {
				sleep(ctx, ft.RestartAfter.D())
				f.note(time.Now(), ft, r.name, "heal", "restarted", f.c.restartReserver(bg, r))
			}
		}
	case FaultRestartRedis:
		at := time.Now()
		f.c.redis.kill()
		f.note(at, ft, "redis", "inject", "SIGKILL", nil)
		sleep(ctx, ft.For.D())
		f.note(time.Now(), ft, "redis", "heal", "restarted empty", f.c.restartRedis(bg))
	case FaultFailoverRedis:
		old, promoted, killed, at, err := f.c.sentinel.failover(bg, ft.For.D())
		detail := "SIGKILL primary " + old.addr
		if ft.For > 0 {
			detail += fmt.Sprintf(" after its replicas stalled %s", ft.For)
		}
		f.note(killed, ft, old.name, "inject", detail, nil)
		if err != nil {
			f.note(time.Now(), ft, old.name, "heal", "no replica promoted", err)
			return
		}
		// The heal is the promotion; grants_resume measures from it.
		f.note(at, ft, old.name, "heal", "promoted "+promoted.name+" "+promoted.addr, nil)
	case FaultPartition:
		rs := f.routers(ft.Target)
		for _, r := range rs {
			a, aerr := f.c.fetchAudit(bg)
			at := time.Now()
			for _, p := range f.proxies(r, ft.Link) {
				p.Set(ft.Mode, ft.Latency.D())
			}
			if aerr == nil && ft.Link == LinkLedger && ft.Mode != ModeLatency && f.silentPastTTL(ft) {
				f.watch(bg, at, a, r.id, ft.Kind, false)
			}
			f.note(at, ft, r.id, "inject", fmt.Sprintf("%s %s %s", ft.Link, ft.Mode, ft.Latency), nil)
		}
		sleep(ctx, ft.For.D())
		for _, r := range rs {
			for _, p := range f.proxies(r, ft.Link) {
				p.Set("pass", 0)
			}
			f.note(time.Now(), ft, r.id, "heal", ft.Link+" pass", nil)
		}
	case FaultStaleTelemetry:
		f.engineFail(ctx, bg, ft, map[string]any{"metrics_off": true}, map[string]any{"metrics_off": false})
	case FaultEngineCrash:
		f.engineFail(ctx, bg, ft, map[string]any{"abort": true, "errors": true}, map[string]any{"errors": false})
	case FaultClockOffset:
		// The router reads LEASEHOLD_CLOCK_OFFSET as --clock-offset: its
		// wall clock (lease manager included) is skewed by the offset from
		// the restart on. It logs the offset it runs with; a router that
		// does not is a failed fault step (check faults_applied).
		for _, r := range f.routers(ft.Target) {
			at := time.Now()
			r.down.Store(true)
			r.terminate(10 * time.Second)
			env := "LEASEHOLD_CLOCK_OFFSET=" + ft.Offset.String()
			err := f.c.restartRouter(bg, r, env)
			if err == nil && ft.Offset != 0 {
				want := "clock_offset=" + ft.Offset.String()
				if line := r.servingLine(); !strings.Contains(line, want) {
					err = fmt.Errorf("router did not report %s at start (serving line %q)", want, line)
				}
			}
			r.down.Store(err != nil)
			f.note(at, ft, r.id, "inject", "restarted with "+env, err)
		}
	case FaultEngineKill, FaultEngineHang, FaultEngineErrors:
		f.engineFault(ctx, bg, ft)
	case FaultDuplicateRetries:
		f.tr.dupUntil.Store(time.Now().Add(ft.For.D()).UnixNano())
		f.note(time.Now(), ft, "clients", "inject", "each request sent twice with one X-Request-Id", nil)
		sleep(ctx, ft.For.D())
		f.note(time.Now(), ft, "clients", "heal", "", nil)
	}
}

func (f *failpoints) proxies(r *routerNode, link string) []*Proxy {
	if link == LinkLedger {
		if r.ledgerProxy == nil {
			return nil
		}
		return []*Proxy{r.ledgerProxy}
	}
	return r.engineProxies
}

func (f *failpoints) engineFail(ctx, bg context.Context, ft Fault, on, off map[string]any) {
	es := f.engines(ft.Target)
	for _, e := range es {
		f.note(time.Now(), ft, e.id, "inject", fmt.Sprint(on), postJSON(bg, "http://"+e.addr+"/admin/fail", on))
	}
	sleep(ctx, ft.For.D())
	for _, e := range es {
		f.note(time.Now(), ft, e.id, "heal", fmt.Sprint(off), postJSON(bg, "http://"+e.addr+"/admin/fail", off))
	}
}

// killRouter SIGKILLs r, watches its holders' leases drain from the audit
// and restarts it if asked.
func (f *failpoints) killRouter(ctx, bg context.Context, ft Fault, r *routerNode) {
	a, aerr := f.c.fetchAudit(bg)
	r.down.Store(true)
	killed := time.Now()
	r.kill()
	detail := "SIGKILL"
	if aerr == nil {
		holders, leases := holdersOf(a, r.id)
		detail = fmt.Sprintf("SIGKILL holding %d leases (%s)", leases, strings.Join(holders, ","))
		f.watch(bg, killed, a, r.id, ft.Kind, true)
	}
	f.note(killed, ft, r.id, "inject", detail, aerr)
	if ft.RestartAfter != nil {
		if sleep(ctx, ft.RestartAfter.D()) {
			err := f.c.restartRouter(bg, r)
			r.down.Store(err != nil)
			f.note(time.Now(), ft, r.id, "heal", "restarted", err)
		}
	}
}

// silentPastTTL reports whether ft keeps a router from its ledger long
// enough that its session must expire and its leases be reclaimed while
// the fault lasts (TTL + 1 s, with half a second to observe it).
func (f *failpoints) silentPastTTL(ft Fault) bool {
	return ft.For.D() >= f.sc.Topology.SessionTTL.D()+1500*time.Millisecond
}

// watch starts a reclaim watcher of router id's holders in a, as of at.
func (f *failpoints) watch(ctx context.Context, at time.Time, a *auditJSON, id, cause string, dead bool) {
	ev := ReclaimEvent{T: f.rec.since(at), Router: id, Cause: cause, Dead: dead, Seconds: -1}
	ev.Holders, ev.Leases = holdersOf(a, id)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.watchReclaim(ctx, at, ev)
	}()
}

// watchReclaim polls the audit every 100 ms until none of ev's holders
// holds a lease, for at most the session TTL + 5 s.
func (f *failpoints) watchReclaim(ctx context.Context, killed time.Time, ev ReclaimEvent) {
	if len(ev.Holders) == 0 {
		ev.Seconds = 0
		f.rec.reclaim(ev)
		return
	}
	held := map[string]bool{}
	for _, h := range ev.Holders {
		held[h] = true
	}
	limit := killed.Add(f.sc.Topology.SessionTTL.D() + 5*time.Second)
	for time.Now().Before(limit) {
		a, err := f.c.fetchAudit(ctx)
		if err == nil {
			left := 0
			for _, l := range a.Leases {
				if held[l.Holder] {
					left++
				}
			}
			if left == 0 {
				ev.Seconds = time.Since(killed).Seconds()
				break
			}
		}
		if !sleep(ctx, 100*time.Millisecond) {
			break
		}
	}
	f.rec.reclaim(ev)
}
