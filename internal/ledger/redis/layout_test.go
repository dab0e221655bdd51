package redis_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/ledger"
	lhredis "github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// TestLayoutBeforeReservationModes checks the scripts read what the
// layout before reservation modes wrote (see the package doc): a meta
// without reserve and growth_headroom reads as elastic with no headroom,
// a lease record without overgrown as not overgrown, and a Grow past
// capacity writes the flag into the record, where List finds it.
func TestLayoutBeforeReservationModes(t *testing.T) {
	srv := redisserver.Start(t)
	client := srv.Client()
	ctx := ctxT(t)
	l, p := newLedgerOn(t, client, noWindow)
	spec := basicSpec()
	spec.Reserve = ledger.ReserveWorstCase
	mustConfigure(t, l, spec)
	mustKeepAlive(t, l, "llama", "h1", time.Minute)
	g, err := l.Acquire(ctx, req("h1", "a", 600, 1, "gpu-0"))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	state, leases := p+":{llama}:state", p+":{llama}:leases"
	// Rewrite both as the earlier scripts wrote them.
	meta := client.HGet(ctx, state, "meta").Val()
	if f := strings.Fields(meta); len(f) != 8 || f[5] != "worst_case" || f[6] != "0" || f[7] == "0" {
		t.Fatalf("meta = %q, want 8 fields: worst_case 0, then the configuration generation", meta)
	}
	rec := client.HGet(ctx, leases, string(g.Lease.ID)).Val()
	if f := strings.Fields(rec); len(f) != 17 || f[14] != "0" || f[15] != "0" || f[16] != "0" {
		t.Fatalf("lease record = %q, want 17 fields ending in overgrown 0, since 0, probe 0", rec)
	}
	client.HSet(ctx, state, "meta", strings.Join(strings.Fields(meta)[:5], " "))
	client.HSet(ctx, leases, string(g.Lease.ID), strings.Join(strings.Fields(rec)[:14], " "))

	st, err := l.Stats(ctx, "llama")
	if err != nil || st.Reserve != ledger.ReserveElastic || st.GrowthHeadroom != 0 {
		t.Fatalf("Stats of the old meta = reserve %q headroom %v, %v; want elastic, 0", st.Reserve, st.GrowthHeadroom, err)
	}
	if ls, err := l.List(ctx, ledger.Filter{Pool: "llama"}); err != nil || len(ls) != 1 || ls[0] != g.Lease {
		t.Fatalf("List of the old record = %+v, %v; want %+v", ls, err, g.Lease)
	}
	// Another lease fills gpu-0 to 900 of 1000: growing a by 200 passes it.
	if _, err := l.Acquire(ctx, req("h1", "b", 300, 1, "gpu-0")); err != nil {
		t.Fatalf("Acquire b: %v", err)
	}
	r, err := l.Grow(ctx, g.Lease.Ref(), 800)
	if err != nil || r.Lease.KVTokens != 800 || !r.Lease.Overgrown {
		t.Fatalf("Grow(a to 800 past gpu-0's capacity) = %+v, %v; want 800, overgrown", r.Lease, err)
	}
	if f := strings.Fields(client.HGet(ctx, leases, string(g.Lease.ID)).Val()); len(f) != 17 || f[14] != "1" || f[15] != "0" {
		t.Errorf("lease record after the overgrowth = %q, want overgrown 1 then since 0", f)
	}
	if ls, err := l.List(ctx, ledger.Filter{Pool: "llama", Engine: "gpu-0"}); err != nil || len(ls) != 2 || ls[0] != r.Lease {
		t.Errorf("List after the overgrowth = %+v, %v; want %+v first", ls, err, r.Lease)
	}
	if rn, err := l.Renew(ctx, r.Lease.Ref(), time.Minute); err != nil || !rn.Lease.Overgrown {
		t.Errorf("Renew of the overgrown lease = %+v, %v; want the flag kept", rn.Lease, err)
	}
}

// TestLayoutBeforeUnconfirmed checks the scripts read the lease records
// written before unconfirmed reasserts (see the package doc): a record of
// 15 fields (no since) reads as confirmed, keeps its overgrown flag, and
// a Renew writes it back with since 0; a Reassert on an observed engine
// writes its since, which List reports as Unconfirmed.
func TestLayoutBeforeUnconfirmed(t *testing.T) {
	srv := redisserver.Start(t)
	client := srv.Client()
	ctx := ctxT(t)
	l, p := newLedgerOn(t, client, noWindow)
	mustConfigure(t, l, basicSpec())
	mustKeepAlive(t, l, "llama", "h1", time.Minute)
	g, err := l.Acquire(ctx, req("h1", "a", 600, 1, "gpu-0"))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	leases := p + ":{llama}:leases"
	f := strings.Fields(client.HGet(ctx, leases, string(g.Lease.ID)).Val())
	f[14] = "1" // overgrown, as a Grow before this layout left it
	client.HSet(ctx, leases, string(g.Lease.ID), strings.Join(f[:15], " "))
	want := g.Lease
	want.Overgrown = true
	if ls, err := l.List(ctx, ledger.Filter{Pool: "llama"}); err != nil || len(ls) != 1 || ls[0] != want {
		t.Fatalf("List of the 15-field record = %+v, %v; want %+v", ls, err, want)
	}
	rn, err := l.Renew(ctx, g.Lease.Ref(), time.Minute)
	if err != nil || rn.Lease.Unconfirmed || !rn.Lease.Overgrown {
		t.Fatalf("Renew of the 15-field record = %+v, %v; want confirmed and overgrown", rn.Lease, err)
	}
	if f := strings.Fields(client.HGet(ctx, leases, string(g.Lease.ID)).Val()); len(f) != 17 || f[14] != "1" || f[15] != "0" {
		t.Errorf("lease record after Renew = %q, want overgrown 1 then since 0", f)
	}

	if _, err := l.Observe(ctx, ledger.Observation{Pool: "llama", Engine: "gpu-0", Running: 1, ObservedAt: time.Now()}); err != nil {
		t.Fatalf("Observe: %v", err)
	}
	fence := ledger.Fence{Epoch: g.Epoch, Seq: g.Lease.Fence.Seq + 1}
	x := ledger.Lease{ID: ledger.MakeLeaseID(fence), Fence: fence, Pool: "llama", Engine: "gpu-0", Tenant: g.Lease.Tenant,
		Priority: g.Lease.Priority, KVTokens: 100, Slots: 1, Holder: "h1", RequestID: "lost"}
	ra, err := l.Reassert(ctx, x, time.Minute)
	if err != nil || !ra.Lease.Unconfirmed {
		t.Fatalf("Reassert on an observed engine = %+v, %v; want Unconfirmed", ra.Lease, err)
	}
	f = strings.Fields(client.HGet(ctx, leases, string(x.ID)).Val())
	if len(f) != 17 || f[15] == "0" || f[16] != "0" {
		t.Errorf("lease record of the reasserted lease = %q, want 17 fields: its since (ms), then probe 0", f)
	}
	if ls, err := l.List(ctx, ledger.Filter{Pool: "llama", Holder: "h1"}); err != nil || len(ls) != 2 || !ls[1].Unconfirmed || ls[0].Unconfirmed {
		t.Errorf("List = %+v, %v; want the reasserted lease (second) Unconfirmed, the other not", ls, err)
	}
}

// TestLayoutBeforeBreakers checks the scripts read what the layout before
// circuit breakers wrote (see the package doc): a pool with no breaker
// field reads the default spec, an engine with no e:<id>:b is closed, a
// lease record of 16 fields (no probe) is not a probe, and a Renew writes
// it back with probe 0. A probe lease writes probe 1, which List and
// Release read.
func TestLayoutBeforeBreakers(t *testing.T) {
	srv := redisserver.Start(t)
	client := srv.Client()
	ctx := ctxT(t)
	l, p := newLedgerOn(t, client, noWindow)
	spec := basicSpec()
	spec.Breaker = ledger.BreakerSpec{Failures: 1, Cooldown: time.Millisecond}
	mustConfigure(t, l, spec)
	mustKeepAlive(t, l, "llama", "h1", time.Minute)
	state, leases := p+":{llama}:state", p+":{llama}:leases"
	if got := client.HGet(ctx, state, "breaker").Val(); got != "1 1 1 2" {
		t.Fatalf("breaker field = %q, want \"1 1 1 2\" (failures, cooldown ms, probes, successes; defaults filled in)", got)
	}
	g, err := l.Acquire(ctx, req("h1", "a", 100, 1, "gpu-0"))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	f := strings.Fields(client.HGet(ctx, leases, string(g.Lease.ID)).Val())
	client.HSet(ctx, leases, string(g.Lease.ID), strings.Join(f[:16], " "))
	if ls, err := l.List(ctx, ledger.Filter{Pool: "llama"}); err != nil || len(ls) != 1 || ls[0] != g.Lease {
		t.Fatalf("List of the 16-field record = %+v, %v; want %+v", ls, err, g.Lease)
	}
	if rn, err := l.Renew(ctx, g.Lease.Ref(), time.Minute); err != nil || rn.Lease.Probe {
		t.Fatalf("Renew of the 16-field record = %+v, %v; want not a probe", rn.Lease, err)
	}
	if f := strings.Fields(client.HGet(ctx, leases, string(g.Lease.ID)).Val()); len(f) != 17 || f[16] != "0" {
		t.Errorf("lease record after Renew = %q, want 17 fields ending in probe 0", f)
	}

	// Without the breaker field the pool reads the defaults: one failure
	// no longer opens gpu-0 (five do).
	client.HDel(ctx, state, "breaker")
	if _, err := l.Release(ctx, g.Lease.Ref(), ledger.Usage{Outcome: ledger.OutcomeConnect}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	st, err := l.Stats(ctx, "llama")
	if err != nil || len(st.Engines) == 0 || st.Engines[0].Breaker.State != ledger.BreakerClosed || st.Engines[0].Breaker.Failures != 1 {
		t.Fatalf("Stats = %+v, %v; want gpu-0's breaker closed with one failure", st.Engines, err)
	}
	failed := st.Engines[0].Breaker.LastFailureAt
	if want := fmt.Sprintf("closed 1 0 0 0 %d", failed.UnixMilli()); failed.IsZero() || client.HGet(ctx, state, "e:gpu-0:b").Val() != want {
		t.Errorf("e:gpu-0:b after one failure under the default spec = %q (Stats LastFailureAt %s), want %q",
			client.HGet(ctx, state, "e:gpu-0:b").Val(), failed, want)
	}

	// A probe lease's record ends in probe 1. The breaker as written
	// before failed_ms (five fields) reads no failure counted.
	client.HSet(ctx, state, "e:gpu-0:b", "open 0 0 1 0")
	mustConfigure(t, l, spec)
	pr, err := l.Acquire(ctx, req("h1", "b", 100, 1, "gpu-0"))
	if err != nil || !pr.Lease.Probe {
		t.Fatalf("Acquire on the half-open gpu-0 = %+v, %v; want a probe", pr.Lease, err)
	}
	if f := strings.Fields(client.HGet(ctx, leases, string(pr.Lease.ID)).Val()); len(f) != 17 || f[16] != "1" {
		t.Errorf("probe lease record = %q, want 17 fields ending in probe 1", f)
	}
	if got := client.HGet(ctx, state, "e:gpu-0:b").Val(); got != "half_open 0 0 1 1 0" {
		t.Errorf("e:gpu-0:b after the probe's grant = %q, want \"half_open 0 0 1 1 0\"", got)
	}
	if ls, err := l.List(ctx, ledger.Filter{Pool: "llama"}); err != nil || len(ls) != 1 || !ls[0].Probe {
		t.Errorf("List = %+v, %v; want the probe lease", ls, err)
	}
}

// TestLayoutBreakerFailedMs checks e:<id>:b's sixth field, failed_ms (the
// latest counted failure, ledger.Breaker.LastFailureAt), and the
// millisecond release.lua compares a success's lease Created with: a
// lease created in the failure's millisecond is stale (no reset), one a
// millisecond later fresh (ledger.Breaker.Fresh). A breaker of five
// fields, written before failed_ms, reads no failure counted: the next
// success resets it.
func TestLayoutBreakerFailedMs(t *testing.T) {
	srv := redisserver.Start(t)
	client := srv.Client()
	ctx := ctxT(t)
	l, p := newLedgerOn(t, client, noWindow)
	spec := basicSpec()
	spec.Breaker = ledger.BreakerSpec{Failures: 5, Cooldown: time.Hour}
	mustConfigure(t, l, spec)
	mustKeepAlive(t, l, "llama", "h1", time.Minute)
	state := p + ":{llama}:state"
	grant := func(id string) ledger.Lease {
		t.Helper()
		g, err := l.Acquire(ctx, req("h1", id, 10, 1, "gpu-0"))
		if err != nil {
			t.Fatalf("Acquire(%s): %v", id, err)
		}
		return g.Lease
	}
	release := func(x ledger.Lease, o ledger.Outcome) {
		t.Helper()
		if rel, err := l.Release(ctx, x.Ref(), ledger.Usage{Outcome: o}); err != nil || !rel.Released {
			t.Fatalf("Release(%s, %q) = %+v, %v; want released", x.ID, o, rel, err)
		}
	}
	for _, tc := range []struct {
		name   string
		stored func(created int64) string // e:gpu-0:b before the success
		want   func(created int64) string // after
	}{
		{"failure in the lease's millisecond: stale",
			func(c int64) string { return fmt.Sprintf("closed 2 0 0 0 %d", c) },
			func(c int64) string { return fmt.Sprintf("closed 2 0 0 0 %d", c) }},
		{"failure a millisecond before the lease: fresh",
			func(c int64) string { return fmt.Sprintf("closed 2 0 0 0 %d", c-1) },
			func(c int64) string { return fmt.Sprintf("closed 0 0 0 0 %d", c-1) }},
		{"failure after the lease: stale",
			func(c int64) string { return fmt.Sprintf("closed 3 0 0 0 %d", c+50) },
			func(c int64) string { return fmt.Sprintf("closed 3 0 0 0 %d", c+50) }},
		{"five fields, written before failed_ms: fresh",
			func(int64) string { return "closed 2 0 0 0" },
			func(int64) string { return "closed 0 0 0 0 0" }},
	} {
		x := grant(strings.ReplaceAll(tc.name, " ", "-"))
		c := x.Created.UnixMilli()
		client.HSet(ctx, state, "e:gpu-0:b", tc.stored(c))
		release(x, ledger.OutcomeOK)
		if got, want := client.HGet(ctx, state, "e:gpu-0:b").Val(), tc.want(c); got != want {
			t.Errorf("%s: e:gpu-0:b after a success on a lease created at %d = %q, want %q", tc.name, c, got, want)
		}
	}
	st, err := l.Stats(ctx, "llama")
	if err != nil || len(st.Engines) == 0 || st.Engines[0].Breaker.Failures != 0 || !st.Engines[0].Breaker.LastFailureAt.IsZero() {
		t.Fatalf("Stats = %+v, %v; want gpu-0's breaker read from \"closed 0 0 0 0 0\": no failures, none counted", st.Engines, err)
	}

	// A failure stamps failed_ms with the script's time, which Stats reads.
	x := grant("failure")
	before := time.Now().Add(-time.Second) // Redis's clock is this machine's
	release(x, ledger.OutcomeStatus5xx)
	st, err = l.Stats(ctx, "llama")
	if err != nil || len(st.Engines) == 0 {
		t.Fatalf("Stats = %+v, %v", st, err)
	}
	b := st.Engines[0].Breaker
	if b.Failures != 1 || b.LastFailureAt.Before(before) || b.LastFailureAt.After(st.Now) {
		t.Errorf("breaker after a failure = %+v, want 1 failure stamped between %s and %s", b, before, st.Now)
	}
	if got, want := client.HGet(ctx, state, "e:gpu-0:b").Val(), fmt.Sprintf("closed 1 0 0 0 %d", b.LastFailureAt.UnixMilli()); got != want {
		t.Errorf("e:gpu-0:b after a failure = %q, want %q", got, want)
	}
}

// TestLayoutBeforeRateBudgets checks the scripts read what the layout
// before rate budgets wrote (see the package doc): a t:<name> of three
// fields has no budget (nothing charged, Stats reports none), a pool with
// no rate_window counts a minute. A charged lease's record gains tokens as
// an 18th field, which List, Renew and Release read; an uncharged one
// keeps 17.
func TestLayoutBeforeRateBudgets(t *testing.T) {
	srv := redisserver.Start(t)
	client := srv.Client()
	ctx := ctxT(t)
	l, p := newLedgerOn(t, client, noWindow)
	spec := basicSpec()
	spec.Tenants[0].TokensPerMinute = 1000
	mustConfigure(t, l, spec)
	mustKeepAlive(t, l, "llama", "h1", time.Minute)
	state, leases := p+":{llama}:state", p+":{llama}:leases"
	if got := client.HGet(ctx, state, "t:acme").Val(); got != "1 1 0 1000 0" {
		t.Fatalf("t:acme = %q, want \"1 1 0 1000 0\" (configured, shares, token and request budgets)", got)
	}
	if client.HExists(ctx, state, "rate_window").Val() {
		t.Fatalf("rate_window written for the default window, want it absent")
	}
	a := req("h1", "a", 100, 1)
	a.Tokens = 700
	g, err := l.Acquire(ctx, a)
	if err != nil || g.Lease.Tokens != 700 {
		t.Fatalf("Acquire(700 tokens of acme's 1000) = %+v, %v; want a lease charging 700", g.Lease, err)
	}
	if f := strings.Fields(client.HGet(ctx, leases, string(g.Lease.ID)).Val()); len(f) != 18 || f[17] != "700" {
		t.Fatalf("charged lease record = %q, want 18 fields ending in tokens 700", f)
	}
	if ls, err := l.List(ctx, ledger.Filter{Pool: "llama"}); err != nil || len(ls) != 1 || ls[0] != g.Lease {
		t.Fatalf("List = %+v, %v; want %+v", ls, err, g.Lease)
	}
	if rn, err := l.Renew(ctx, g.Lease.Ref(), time.Minute); err != nil || rn.Lease.Tokens != 700 {
		t.Fatalf("Renew = %+v, %v; want Tokens 700 kept", rn.Lease, err)
	}
	b := req("h1", "b", 100, 1)
	b.Tokens = 400
	if _, err := l.Acquire(ctx, b); ledger.AsRejection(err) == nil || ledger.AsRejection(err).Reason != ledger.ReasonTenantTokenRate {
		t.Fatalf("Acquire(400 more) error = %v, want %s", err, ledger.ReasonTenantTokenRate)
	}
	if _, err := l.Release(ctx, g.Lease.Ref(), ledger.Usage{PromptTokens: 100, CompletionTokens: 100}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// 200 used of 700 charged: 400 more fit.
	if _, err := l.Acquire(ctx, b); err != nil {
		t.Fatalf("Acquire(400) after the true-up to 200: %v", err)
	}

	// The tenant field as written before budgets: three fields, by a
	// Configure that wrote meta without a configuration generation.
	meta := strings.Fields(client.HGet(ctx, state, "meta").Val())
	client.HSet(ctx, state, "t:acme", "1 1 0", "meta", strings.Join(meta[:7], " "))
	st, err := l.Stats(ctx, "llama")
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	for _, ts := range st.Tenants {
		if ts.Spec.Name == "acme" && (ts.Spec.TokensPerMinute != 0 || ts.Spec.RequestsPerMinute != 0) {
			t.Errorf("Stats of a three-field t:acme = budgets %d, %d; want none", ts.Spec.TokensPerMinute, ts.Spec.RequestsPerMinute)
		}
	}
	c := req("h1", "c", 100, 1)
	c.Tokens = 5000
	g, err = l.Acquire(ctx, c)
	if err != nil || g.Lease.Tokens != 0 {
		t.Fatalf("Acquire(5000 tokens) with no budget = %+v, %v; want a lease charging nothing", g.Lease, err)
	}
	if f := strings.Fields(client.HGet(ctx, leases, string(g.Lease.ID)).Val()); len(f) != 17 {
		t.Errorf("uncharged lease record = %q, want 17 fields", f)
	}
}

// TestStateHashIsHashTable checks Configure leaves the pool's state hash a
// hash table, not a listpack (field hashtable, lib.lua), both on a fresh
// pool and on one an earlier version configured (a listpack with no
// hashtable field), and that the field outlives a re-Configure.
func TestStateHashIsHashTable(t *testing.T) {
	srv := redisserver.Start(t)
	client := srv.Client()
	ctx := ctxT(t)
	l, p := newLedgerOn(t, client, noWindow)
	state := p + ":{llama}:state"
	encoding := func() string {
		t.Helper()
		enc, err := client.ObjectEncoding(ctx, state).Result()
		if err != nil {
			t.Fatalf("OBJECT ENCODING %s: %v", state, err)
		}
		return enc
	}
	mustConfigure(t, l, basicSpec())
	if got := encoding(); got != "hashtable" {
		t.Fatalf("state hash encoding after Configure = %q, want hashtable", got)
	}
	// An earlier version's pool: the same fields without hashtable, which
	// Redis stores as a listpack.
	fields := client.HGetAll(ctx, state).Val()
	delete(fields, "hashtable")
	client.Del(ctx, state)
	client.HSet(ctx, state, fields)
	if got := encoding(); got != "listpack" {
		t.Fatalf("state hash encoding of the earlier layout = %q, want listpack", got)
	}
	mustConfigure(t, l, basicSpec())
	if got := encoding(); got != "hashtable" {
		t.Errorf("state hash encoding after re-Configure = %q, want hashtable", got)
	}
	if n := len(client.HGet(ctx, state, "hashtable").Val()); n <= 64 {
		t.Errorf("hashtable field is %d bytes, want more than hash-max-listpack-value's default 64", n)
	}
}

// layoutPool starts a Redis with pool llama (basicSpec, no recovery
// window) and holder h1 alive: for a test to write what earlier scripts
// left into the pool's state hash, whose key it returns with the ledger
// and the client.
func layoutPool(t *testing.T) (*lhredis.Ledger, *goredis.Client, string) {
	t.Helper()
	srv := redisserver.Start(t)
	client := srv.Client()
	l, p := newLedgerOn(t, client, noWindow)
	mustConfigure(t, l, basicSpec())
	mustKeepAlive(t, l, "llama", "h1", time.Minute)
	return l, client, p + ":{llama}:state"
}

// TestLayoutBeforeCounterGroups checks Stats counts what both layouts
// wrote: the four counters a release adds to are kept in one field
// (g:release, lib.lua's GROUPS), and a pool whose scripts wrote them as
// c:<name> before keeps those counts, added to the group's.
func TestLayoutBeforeCounterGroups(t *testing.T) {
	ctx := ctxT(t)
	l, client, state := layoutPool(t)
	// What the scripts before groups left: every counter in a field of its own.
	client.HSet(ctx, state, "c:releases", 3, "c:released_kv_tokens", 900, "c:actual_prompt_tokens", 30,
		"c:actual_completion_tokens", 40)
	release := func(id string, kv int64, u ledger.Usage) {
		t.Helper()
		g, err := l.Acquire(ctx, req("h1", id, kv, 1))
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		if rel, err := l.Release(ctx, g.Lease.Ref(), u); err != nil || !rel.Released {
			t.Fatalf("Release = %+v, %v", rel, err)
		}
	}
	release("a", 170, ledger.Usage{PromptTokens: 7, CompletionTokens: 9})
	release("b", 200, ledger.Usage{PromptTokens: 1, CompletionTokens: 2})
	if got := client.HGet(ctx, state, "g:release").Val(); got != "2 370 8 11" {
		t.Errorf("g:release = %q, want \"2 370 8 11\"", got)
	}
	st, err := l.Stats(ctx, "llama")
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	for name, want := range map[string]int64{
		ledger.CounterReleases: 5, ledger.CounterReleasedKV: 1270, ledger.CounterActualPrompt: 38,
		ledger.CounterActualComplete: 51,
	} {
		if got := st.Counters[name]; got != want {
			t.Errorf("Stats counter %s = %d, want %d (the old field's count plus the group's)", name, got, want)
		}
	}
	// A group field shorter than GROUPS (a later version may append a
	// counter; here, one of an earlier one): the missing counters read 0.
	client.HSet(ctx, state, "g:release", "4")
	release("c", 100, ledger.Usage{PromptTokens: 3, CompletionTokens: 4})
	if got := client.HGet(ctx, state, "g:release").Val(); got != "5 100 3 4" {
		t.Errorf("g:release after a release on a one-counter g:release = %q, want \"5 100 3 4\"", got)
	}
}

// TestLayoutBeforeTenantCompletionCounters checks the completion-length
// counters (ledger.CompletionCounters): a release adds to the tenant's
// n:<name> field alone, Stats counts it for the tenant's counter and the
// pool's, and the c:<name> fields of both that earlier scripts wrote
// still count, once each.
func TestLayoutBeforeTenantCompletionCounters(t *testing.T) {
	ctx := ctxT(t)
	l, client, state := layoutPool(t)
	done := ledger.Usage{CompletionTokens: 70, Finished: true}
	names := ledger.CompletionCounters(done, "acme") // the pool's, the tenant's
	other := ledger.CompletionCounters(done, "small")[1]
	// What earlier scripts left: both counters in c: fields, for two tenants.
	client.HSet(ctx, state, "c:"+names[0], 5, "c:"+names[1], 3, "c:"+other, 2)
	for i, tenant := range []ledger.TenantID{"acme", "acme", "small"} {
		r := req("h1", "r"+strconv.Itoa(i), 10, 1)
		r.Tenant = tenant
		g, err := l.Acquire(ctx, r)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		if rel, err := l.Release(ctx, g.Lease.Ref(), done); err != nil || !rel.Released {
			t.Fatalf("Release = %+v, %v", rel, err)
		}
	}
	if got := client.HGet(ctx, state, "n:"+names[1]).Val(); got != "2" {
		t.Errorf("n:%s = %q, want \"2\"", names[1], got)
	}
	if got := client.HGet(ctx, state, "c:"+names[0]).Val(); got != "5" {
		t.Errorf("c:%s = %q, want the earlier scripts' \"5\" left as it was", names[0], got)
	}
	st, err := l.Stats(ctx, "llama")
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	for name, want := range map[string]int64{names[0]: 8, names[1]: 5, other: 3} {
		if got := st.Counters[name]; got != want {
			t.Errorf("Stats counter %s = %d, want %d", name, got, want)
		}
	}
}

// TestLayoutBeforeReasonOnlyRejections counts rejections on a pool whose
// earlier scripts kept the total, c:rejections, beside each reason's: the
// scripts now count only the reason, and Stats reports the total as the
// reasons' sum, so the old total is neither lost nor counted twice.
func TestLayoutBeforeReasonOnlyRejections(t *testing.T) {
	ctx := ctxT(t)
	l, client, state := layoutPool(t)
	client.HSet(ctx, state, "c:rejections", 3, "c:rejections:engine_kv", 2, "c:rejections:draining", 1)
	var rej *ledger.Rejection
	for i := 0; i < 2; i++ {
		if _, err := l.Acquire(ctx, req("h1", "big"+strconv.Itoa(i), 5000, 1)); !errors.As(err, &rej) || rej.Reason != ledger.ReasonTooLarge {
			t.Fatalf("Acquire of more than any engine holds = %v, want rejected too_large", err)
		}
	}
	if got := client.HGet(ctx, state, "c:rejections").Val(); got != "3" {
		t.Errorf("c:rejections = %q, want the earlier scripts' \"3\" left as it was", got)
	}
	st, err := l.Stats(ctx, "llama")
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	for name, want := range map[string]int64{"rejections": 5, "rejections:engine_kv": 2, "rejections:draining": 1,
		"rejections:too_large": 2} {
		if got := st.Counters[name]; got != want {
			t.Errorf("Stats counter %s = %d, want %d", name, got, want)
		}
	}
}

// TestAcquireRecord checks the lease record acquire writes field by field
// (acquire.lua builds it in one concatenation, not through lease_record)
// and that the lease decoded from its reply (the record) is the one List reads from the
// record and a replay answers in full: for a tenant with a token budget
// (the record ends in the tokens charged) and one without.
func TestAcquireRecord(t *testing.T) {
	srv := redisserver.Start(t)
	client := srv.Client()
	ctx := ctxT(t)
	l, p := newLedgerOn(t, client, noWindow)
	spec := basicSpec()
	spec.Tenants[0].TokensPerMinute = 1000
	mustConfigure(t, l, spec)
	mustKeepAlive(t, l, "llama", "h1", time.Minute)
	rated := req("h1", "rated", 100, 1)
	rated.Tokens = 300
	plain := req("h1", "plain", 50, 2, "gpu-1")
	plain.Tenant = "small"
	for _, r := range []ledger.AcquireRequest{rated, plain} {
		g, err := l.Acquire(ctx, r)
		if err != nil {
			t.Fatalf("Acquire(%s): %v", r.RequestID, err)
		}
		x := g.Lease
		want := []string{string(x.ID), string(x.Engine), string(r.Tenant), string(r.Priority), fmt.Sprint(r.KVTokens),
			fmt.Sprint(r.Slots), string(r.Holder), string(r.RequestID), fmt.Sprint(x.Created.UnixMilli()),
			fmt.Sprint(x.Deadline.UnixMilli()), fmt.Sprint(uint64(g.Epoch)), fmt.Sprint(x.Fence.Seq),
			"0", "1", "0", "0", "0"}
		if r.Tokens > 0 {
			want = append(want, fmt.Sprint(r.ChargedTokens()))
		}
		rec := client.HGet(ctx, p+":{llama}:leases", string(x.ID)).Val()
		if got := strings.Join(strings.Fields(rec), " "); got != strings.Join(want, " ") || got != rec {
			t.Errorf("record of %s = %q, want %q", r.RequestID, rec, strings.Join(want, " "))
		}
		ls, err := l.List(ctx, ledger.Filter{Pool: "llama", Holder: "h1"})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		found := false
		for _, y := range ls {
			if y.ID == x.ID {
				found = true
				if y != x {
					t.Errorf("List's lease %+v, the grant's %+v", y, x)
				}
			}
		}
		if !found {
			t.Errorf("List has no lease %s", x.ID)
		}
		if again, err := l.Acquire(ctx, r); err != nil || !again.Replayed || again.Lease != x {
			t.Errorf("replayed Acquire(%s) = %+v, %v; want the grant's lease %+v", r.RequestID, again, err, x)
		}
	}
}
