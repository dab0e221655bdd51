package redis_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// TestOrphanChargeField checks the e:<id>:o field behind Options.OrphanHold:
// a lease the ledger ends on an observed engine is kept there with the
// latest end plus the hold, survives an observation within the hold,
// counts with the correction (dropped with it by stale policy ignore), and
// goes with the engine's other fields when the engine is forgotten.
func TestOrphanChargeField(t *testing.T) {
	srv := redisserver.Start(t)
	client := srv.Client()
	ctx := ctxT(t)
	const hold = time.Hour
	l, p := newLedgerOn(t, client, ledger.Options{RecoveryWindow: -1, OrphanHold: hold})
	spec := basicSpec()
	spec.Engines[0].StaleAfter, spec.Engines[0].StalePolicy = 300*time.Millisecond, ledger.StaleIgnore
	mustConfigure(t, l, spec)
	state, field := p+":{llama}:state", "e:gpu-0:o"
	observe := func(kv, running int64) {
		t.Helper()
		o, err := l.Observe(ctx, ledger.Observation{Pool: "llama", Engine: "gpu-0", KVTokensUsed: kv, Running: running, ObservedAt: time.Now()})
		if err != nil || !o.Applied {
			t.Fatalf("Observe = %+v, %v; want applied", o, err)
		}
	}
	wantCorrection := func(kv, slots int64) {
		t.Helper()
		st, err := l.Stats(ctx, "llama")
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		if e := st.Engines[0]; e.CorrectionKV != kv || e.CorrectionSlots != slots {
			t.Errorf("gpu-0 correction kv=%d slots=%d, want kv=%d slots=%d", e.CorrectionKV, e.CorrectionSlots, kv, slots)
		}
	}
	observe(0, 0)
	mustKeepAlive(t, l, "llama", "hx", 100*time.Millisecond)
	if _, err := l.Acquire(ctx, req("hx", "orphan", 600, 2, "gpu-0")); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	mustKeepAlive(t, l, "llama", "h1", time.Minute)
	time.Sleep(150 * time.Millisecond)
	if sw, err := l.Sweep(ctx, "llama", 0); err != nil || sw.Revoked != 1 {
		t.Fatalf("Sweep = %+v, %v; want the orphan revoked", sw, err)
	}
	ended := time.Now()
	v, err := client.HGet(ctx, state, field).Result()
	if err != nil {
		t.Fatalf("HGET %s %s: %v", state, field, err)
	}
	parts := strings.Fields(v)
	var until int64
	if len(parts) == 3 {
		until, _ = strconv.ParseInt(parts[2], 10, 64)
	}
	if len(parts) != 3 || parts[0] != "600" || parts[1] != "2" ||
		until < ended.Add(hold-time.Second).UnixMilli() || until > ended.Add(hold).UnixMilli() {
		t.Fatalf("%s = %q, want \"600 2 <end + %s>\" (end about %d)", field, v, hold, ended.UnixMilli())
	}
	// An observation within the hold sets the correction and keeps the charge.
	observe(100, 1)
	wantCorrection(700, 3)
	if _, err := l.Acquire(ctx, req("h1", "r1", 301, 1, "gpu-0")); !errors.Is(err, ledger.ErrRejected) {
		t.Fatalf("Acquire 301 over correction and charge: error = %v, want a rejection", err)
	}
	// Stale under policy ignore: both are dropped.
	time.Sleep(350 * time.Millisecond)
	g, err := l.Acquire(ctx, req("h1", "r2", 1000, 4, "gpu-0"))
	if err != nil {
		t.Fatalf("Acquire the whole stale engine under policy ignore: %v", err)
	}
	if _, err := l.Release(ctx, g.Lease.Ref(), ledger.Usage{}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// Removing the engine forgets its orphan charge with its other fields.
	spec.Engines = spec.Engines[1:]
	mustConfigure(t, l, spec)
	if err := client.HGet(ctx, state, field).Err(); !errors.Is(err, goredis.Nil) {
		t.Errorf("HGET %s %s after the engine was removed: error = %v, want redis.Nil", state, field, err)
	}
}
