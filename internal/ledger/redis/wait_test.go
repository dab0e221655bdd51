package redis_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	lhredis "github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// openWaiting starts a primary with one replica and opens a ledger on the
// primary with wait_replicas=1 and the given wait_timeout, under a fresh
// key prefix; the ledger is closed at cleanup.
func openWaiting(t *testing.T, timeout string) (primary, replica *redisserver.Server, prefix string, l *lhredis.Ledger) {
	t.Helper()
	primary = redisserver.Start(t)
	replica = redisserver.StartReplica(t, primary)
	prefix = newPrefix()
	l, err := lhredis.Open(primary.URL()+"?wait_replicas=1&wait_timeout="+timeout, lhredis.Options{Options: noWindow, Prefix: prefix})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return primary, replica, prefix, l
}

// TestWaitReplicas: with wait_replicas=1 a grant is acknowledged once the
// replica has it (the replica holds the lease record when Acquire returns);
// with the replica gone a change fails with ErrNotReplicated but stays on
// the primary, and the idempotent retry succeeds once a replica is back.
func TestWaitReplicas(t *testing.T) {
	primary, replica, prefix, l := openWaiting(t, "1s")
	ctx := ctxT(t)
	mustConfigure(t, l, basicSpec())
	mustKeepAlive(t, l, "llama", "h1", time.Minute)
	g, err := l.Acquire(ctx, req("h1", "r1", 10, 1))
	if err != nil {
		t.Fatalf("Acquire with a replica: %v", err)
	}
	// Read the replica directly: the lease record is there already.
	rc := replica.Client()
	found := false
	keys, err := rc.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if ok, _ := rc.HExists(ctx, k, string(g.Lease.ID)).Result(); ok {
			found = true
		}
	}
	if !found {
		t.Errorf("the replica has no record of lease %s when Acquire returned (keys %v)", g.Lease.ID, keys)
	}

	replica.Kill()
	r2 := req("h1", "r2", 10, 1)
	start := time.Now()
	_, err = l.Acquire(ctx, r2)
	if !errors.Is(err, lhredis.ErrNotReplicated) {
		t.Fatalf("Acquire with the replica gone = %v, want ErrNotReplicated", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Acquire took %s with a 1s wait_timeout", d)
	}
	// The grant is on the primary; Release reports the same way.
	st, err := l.Stats(ctx, "llama")
	if err != nil || st.Leases != 2 {
		t.Errorf("Stats after the unreplicated grant: %d leases, %v; want 2 (it stays on the primary)", st.Leases, err)
	}
	if _, err := l.Release(ctx, g.Lease.Ref(), ledger.Usage{}); !errors.Is(err, lhredis.ErrNotReplicated) {
		t.Errorf("Release with the replica gone = %v, want ErrNotReplicated", err)
	}

	replica = redisserver.StartReplica(t, primary)
	g2, err := l.Acquire(ctx, r2)
	if err != nil || !g2.Replayed {
		t.Fatalf("retry of the same request with a replica back = %+v, %v; want the same lease, replayed", g2, err)
	}
	if rel, err := l.Release(ctx, g.Lease.Ref(), ledger.Usage{}); err != nil || rel.Released {
		t.Errorf("retried Release = %+v, %v; want no error (already released on the primary)", rel, err)
	}
}

func TestWaitURLParameters(t *testing.T) {
	srv := redisserver.Start(t)
	for _, tc := range []struct{ query, want string }{
		{"?wait_replicas=-1", "wait_replicas"},
		{"?wait_replicas=two", "wait_replicas"},
		{"?wait_replicas=1&wait_timeout=0s", "wait_timeout"},
		{"?wait_timeout=soon", "wait_timeout"},
	} {
		l, err := lhredis.Open(srv.URL()+tc.query, lhredis.Options{})
		if err == nil {
			_ = l.Close()
			t.Errorf("Open(%s) = nil error, want one naming %s", tc.query, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%s) = %v, want it to name %s", tc.query, err, tc.want)
		}
	}
	// Without replicas, wait_replicas=0 is the default behaviour.
	l, err := lhredis.Open(srv.URL()+"?wait_replicas=0&wait_timeout=50ms", lhredis.Options{Options: noWindow, Prefix: newPrefix()})
	if err != nil {
		t.Fatalf("Open with wait_replicas=0: %v", err)
	}
	defer l.Close()
	mustConfigure(t, l, basicSpec())
}

// TestWaitSurvivesFailover: every grant acknowledged with wait_replicas=1
// is on the replica, so after the primary dies and the replica is promoted
// the ledger there holds every acknowledged lease, in the same epoch (no
// recovery window, nothing to re-assert), and the holder's session.
func TestWaitSurvivesFailover(t *testing.T) {
	primary, replica, prefix, l := openWaiting(t, "2s")
	ctx := ctxT(t)
	epoch := mustConfigure(t, l, basicSpec())
	mustKeepAlive(t, l, "llama", "h1", time.Minute)
	acked := map[ledger.LeaseID]bool{}
	for i := range 7 { // of 8 slots: one is left for after the failover
		g, err := l.Acquire(ctx, req("h1", fmt.Sprintf("r%d", i), 10, 1))
		if err != nil {
			t.Fatalf("Acquire %d: %v", i, err)
		}
		acked[g.Lease.ID] = true
	}

	primary.Kill()
	rc := replica.Client()
	if err := rc.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatalf("promote the replica: %v", err)
	}
	promoted, err := lhredis.Open(replica.URL(), lhredis.Options{Options: noWindow, Prefix: prefix})
	if err != nil {
		t.Fatalf("Open the promoted replica: %v", err)
	}
	t.Cleanup(func() { _ = promoted.Close() })
	st, err := promoted.Stats(ctx, "llama")
	if err != nil {
		t.Fatalf("Stats on the promoted replica: %v", err)
	}
	if st.Epoch != epoch || st.LiveHolders != 1 {
		t.Errorf("promoted replica: epoch %d, %d live holders; want epoch %d (no ledger loss) and h1's session", st.Epoch, st.LiveHolders, epoch)
	}
	ls, err := promoted.List(ctx, ledger.Filter{Pool: "llama"})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ls {
		delete(acked, x.ID)
	}
	if len(acked) != 0 {
		t.Errorf("%d acknowledged leases missing after the failover: %v", len(acked), acked)
	}
	if _, err := promoted.Acquire(ctx, req("h1", "after", 10, 1)); err != nil {
		t.Errorf("Acquire on the promoted replica: %v", err)
	}
}
