package redis_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// TestSpecsKeptByMeta checks what acquire keeps of a pool's specs (the
// engines', tenants' and priorities', kept by the pool's meta: specs in
// lib_admit.lua) against every change Configure and SetDraining make: each
// writes a new configuration generation into meta, later than the last,
// and the next Acquire admits by the new specs (a drained, undrained,
// removed, forgotten and re-added engine, a tenant's smaller share, a
// removed priority, a shorter breaker cooldown). It also checks that specs are read once per
// configuration: an Acquire after the first of a generation reads none,
// the first reads each it needs.
func TestSpecsKeptByMeta(t *testing.T) {
	srv := redisserver.Start(t)
	client := srv.Client()
	ctx := ctxT(t)
	l, p := newLedgerOn(t, client, noWindow)
	state := p + ":{llama}:state"
	gen := func() int64 {
		t.Helper()
		f := strings.Fields(client.HGet(ctx, state, "meta").Val())
		if len(f) != 8 {
			t.Fatalf("meta = %q, want 8 fields", f)
		}
		n, err := strconv.ParseInt(f[7], 10, 64)
		if err != nil {
			t.Fatalf("meta's generation %q: %v", f[7], err)
		}
		return n
	}
	last := int64(0)
	newGen := func(what string) {
		t.Helper()
		if g := gen(); g <= last {
			t.Fatalf("after %s the generation is %d, want more than %d", what, g, last)
		} else {
			last = g
		}
	}
	spec := basicSpec()
	mustConfigure(t, l, spec)
	newGen("Configure")
	mustKeepAlive(t, l, "llama", "h1", time.Minute)
	n := 0
	acquire := func(kv int64, cands ...ledger.EngineID) (ledger.Grant, error) {
		n++
		return l.Acquire(ctx, req("h1", "r"+strconv.Itoa(n), kv, 1, cands...))
	}
	reason := func(err error) ledger.Reason {
		if r := ledger.AsRejection(err); r != nil {
			return r.Reason
		}
		return ""
	}

	if g, err := acquire(100, "gpu-0", "gpu-1"); err != nil || g.Lease.Engine != "gpu-0" {
		t.Fatalf("Acquire(gpu-0, gpu-1) = %+v, %v; want a lease on gpu-0", g.Lease, err)
	}
	// reads is how many HMGETs and HGETs the server has run.
	reads := func() [2]int64 {
		return [2]int64{commandCalls(t, ctx, client, "hmget"), commandCalls(t, ctx, client, "hget")}
	}
	since := func(r [2]int64) [2]int64 { now := reads(); return [2]int64{now[0] - r[0], now[1] - r[1]} }
	h := reads()
	keep, err := acquire(100, "gpu-1")
	if err != nil {
		t.Fatalf("Acquire on gpu-1: %v", err)
	}
	if got := since(h); got != [2]int64{1, 1} {
		t.Errorf("an Acquire of a configuration whose specs were read made %d HMGETs and %d HGETs, "+
			"want 1 and 1 (the state, the request index)", got[0], got[1])
	}

	if err := l.SetDraining(ctx, "llama", "gpu-0", true); err != nil {
		t.Fatalf("SetDraining: %v", err)
	}
	newGen("SetDraining(true)")
	h = reads()
	if _, err := acquire(100, "gpu-0"); reason(err) != ledger.ReasonDraining {
		t.Fatalf("Acquire on drained gpu-0 error = %v, want %s", err, ledger.ReasonDraining)
	}
	if got := since(h); got != [2]int64{1, 4} {
		t.Errorf("the first Acquire of a new generation made %d HMGETs and %d HGETs, want 1 and 4 "+
			"(the state; the request index, then the tenant's, the priority's and gpu-0's specs)", got[0], got[1])
	}
	if g, err := acquire(100, "gpu-0", "gpu-1"); err != nil || g.Lease.Engine != "gpu-1" {
		t.Fatalf("Acquire(gpu-0, gpu-1) with gpu-0 drained = %+v, %v; want a lease on gpu-1", g.Lease, err)
	}
	if err := l.SetDraining(ctx, "llama", "gpu-0", false); err != nil {
		t.Fatalf("SetDraining: %v", err)
	}
	newGen("SetDraining(false)")
	if _, err := acquire(100, "gpu-0"); err != nil {
		t.Fatalf("Acquire on undrained gpu-0: %v", err)
	}

	// gpu-1 left out: marked removed while it holds leases, then forgotten.
	spec.Engines = spec.Engines[:1]
	spec.Tenants[0].KVShare = 0.5 // of 1,000 KV tokens
	spec.Priorities = spec.Priorities[:1]
	mustConfigure(t, l, spec)
	newGen("Configure without gpu-1")
	if _, err := acquire(10, "gpu-1"); !errors.Is(err, ledger.ErrUnknownEngine) {
		t.Fatalf("Acquire on removed gpu-1 error = %v, want ErrUnknownEngine", err)
	}
	if _, err := acquire(600, "gpu-0"); reason(err) != ledger.ReasonTooLarge {
		t.Fatalf("Acquire(600) of a tenant with half of 1,000 error = %v, want %s", err, ledger.ReasonTooLarge)
	}
	b := req("h1", "batch", 10, 1, "gpu-0")
	b.Priority = "batch"
	if _, err := l.Acquire(ctx, b); !errors.Is(err, ledger.ErrUnknownPriority) {
		t.Fatalf("Acquire at removed priority batch error = %v, want ErrUnknownPriority", err)
	}
	for _, g := range []ledger.Grant{keep} {
		if _, err := l.Release(ctx, g.Lease.Ref(), ledger.Usage{}); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	ls, err := l.List(ctx, ledger.Filter{Pool: "llama"})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, x := range ls {
		if x.Engine == "gpu-1" {
			if _, err := l.Release(ctx, x.Ref(), ledger.Usage{}); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
	}
	if client.HExists(ctx, state, "e:gpu-1").Val() {
		t.Fatalf("e:gpu-1 still stored after its last lease ended")
	}
	if _, err := acquire(10, "gpu-1"); !errors.Is(err, ledger.ErrUnknownEngine) {
		t.Fatalf("Acquire on forgotten gpu-1 error = %v, want ErrUnknownEngine", err)
	}

	mustConfigure(t, l, basicSpec())
	newGen("Configure with gpu-1 again")
	if _, err := acquire(600, "gpu-1"); err != nil {
		t.Fatalf("Acquire(600) on re-added gpu-1 with the whole share again: %v", err)
	}
	b.RequestID, b.Candidates = "batch-again", []ledger.EngineID{"gpu-1"}
	if _, err := l.Acquire(ctx, b); err != nil {
		t.Fatalf("Acquire at re-added priority batch: %v", err)
	}

	// The breaker spec, kept by meta too: an open breaker within an hour's
	// cooldown refuses, and after a Configure with a millisecond's lets a
	// probe through.
	spec = basicSpec()
	spec.Breaker.Cooldown = time.Hour
	mustConfigure(t, l, spec)
	newGen("Configure with an hour's cooldown")
	opened := strconv.FormatInt(time.Now().UnixMilli(), 10)
	client.HSet(ctx, state, "e:gpu-0:b", "open 0 0 "+opened+" 0 "+opened)
	if _, err := acquire(10, "gpu-0"); reason(err) != ledger.ReasonBreakerOpen {
		t.Fatalf("Acquire on an engine opened now, an hour's cooldown: error = %v, want %s", err, ledger.ReasonBreakerOpen)
	}
	spec.Breaker.Cooldown = time.Millisecond
	mustConfigure(t, l, spec)
	newGen("Configure with a millisecond's cooldown")
	time.Sleep(5 * time.Millisecond)
	if g, err := acquire(10, "gpu-0"); err != nil || !g.Lease.Probe {
		t.Fatalf("Acquire after the cooldown shrank = %+v, %v; want a probe lease", g.Lease, err)
	}
}
