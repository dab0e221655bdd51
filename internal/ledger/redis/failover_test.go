package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/ledger"
	lhredis "github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// promoteAfterTwoGrants starts a primary with a replica, configures pool
// llama there (its first epoch without a recovery window, then the spec
// again from a ledger with opts, whose window a promoted replica's epoch
// will use), keeps holder h1 alive and grants it two leases (on cands) the
// replica has, then promotes the replica (REPLICAOF NO ONE): what the
// primary grants from then on, the replica never sees. It returns the
// primary's ledger with opts, the pool's first epoch, the two leases and
// the promoted replica.
func promoteAfterTwoGrants(t *testing.T, opts lhredis.Options, cands ...ledger.EngineID) (*lhredis.Ledger, ledger.Epoch, []ledger.Lease, *redisserver.Server) {
	t.Helper()
	ctx := ctxT(t)
	primary := redisserver.Start(t)
	replica := redisserver.StartReplica(t, primary)
	first := opts
	first.RecoveryWindow = -1
	lf := lhredis.New(primary.Client(), first)
	t.Cleanup(func() { _ = lf.Close() })
	epoch := mustConfigure(t, lf, basicSpec())
	l := lhredis.New(primary.Client(), opts)
	t.Cleanup(func() { _ = l.Close() })
	if again := mustConfigure(t, l, basicSpec()); again != epoch {
		t.Fatalf("re-applying the spec moved the epoch from %d to %d", epoch, again)
	}
	mustKeepAlive(t, l, "llama", "h1", time.Minute)
	var kept []ledger.Lease
	for _, id := range []string{"r1", "r2"} {
		g, err := l.Acquire(ctx, req("h1", id, 100, 1, cands...))
		if err != nil {
			t.Fatalf("Acquire %s: %v", id, err)
		}
		kept = append(kept, g.Lease)
	}
	if n, err := primary.Client().Do(ctx, "wait", 1, 2000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v", n, err)
	}
	if err := replica.Client().ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatalf("promote the replica: %v", err)
	}
	return l, epoch, kept, replica
}

// TestFailoverStartsEpoch promotes a replica that missed the primary's
// last grant (REPLICAOF NO ONE before it, as a failover loses the
// replication lag) and opens the ledger there. Without wait_replicas the
// first write starts a new epoch with the pool's recovery window, keeps
// the leases the replica has, lets the holder re-assert the lost one with
// its old fence, and a later grant mints an id in the new epoch, so no
// lost lease's id is ever reused. With wait_replicas=1 the replica has
// every acknowledged grant and keeps the epoch.
func TestFailoverStartsEpoch(t *testing.T) {
	for _, tc := range []struct {
		name         string
		wait         int
		wantNewEpoch bool
	}{
		{"async replication: new epoch", 0, true},
		{"wait_replicas=1: same epoch", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			const window = 2 * time.Second
			opts := lhredis.Options{Options: ledger.Options{RecoveryWindow: window}, Prefix: newPrefix(),
				WaitReplicas: tc.wait, WaitTimeout: 2 * time.Second}
			l, epoch, kept, replica := promoteAfterTwoGrants(t, opts)
			rc := replica.Client()
			var lost ledger.Lease
			if tc.wait == 0 {
				g, err := l.Acquire(ctx, req("h1", "r3", 100, 1))
				if err != nil {
					t.Fatalf("Acquire r3 after the promotion: %v", err)
				}
				lost = g.Lease
			} else {
				// The waiting client cannot get a grant acknowledged now;
				// WAIT needs a replica of the promoted server.
				redisserver.StartReplica(t, replica)
			}

			promoted := lhredis.New(rc, opts)
			t.Cleanup(func() { _ = promoted.Close() })
			before := time.Now()
			s := mustKeepAlive(t, promoted, "llama", "h1", time.Minute)
			st, err := promoted.Stats(ctx, "llama")
			if err != nil {
				t.Fatalf("Stats on the promoted replica: %v", err)
			}
			ls, err := promoted.List(ctx, ledger.Filter{Pool: "llama"})
			if err != nil {
				t.Fatal(err)
			}
			if len(ls) != len(kept) || ls[0].ID != kept[0].ID || ls[1].ID != kept[1].ID {
				t.Errorf("leases on the promoted replica = %v, want the two replicated ones %s, %s", ls, kept[0].ID, kept[1].ID)
			}
			if !tc.wantNewEpoch {
				if s.Epoch != epoch || st.Counters[ledger.CounterFailovers] != 0 || !s.RecoveringUntil.Before(before) {
					t.Errorf("KeepAlive after the promotion: epoch %d (was %d), failovers %d, recovering until %v; want the same epoch, 0, no window",
						s.Epoch, epoch, st.Counters[ledger.CounterFailovers], s.RecoveringUntil)
				}
				if _, err := promoted.Acquire(ctx, req("h1", "r4", 100, 1)); err != nil {
					t.Errorf("Acquire on the promoted replica: %v", err)
				}
				return
			}
			if s.Epoch <= epoch || st.Counters[ledger.CounterFailovers] != 1 {
				t.Fatalf("KeepAlive after the promotion: epoch %d (was %d), failovers %d; want a later epoch, 1", s.Epoch, epoch, st.Counters[ledger.CounterFailovers])
			}
			if s.RecoveringUntil.Before(before.Add(window/2)) || s.RecoveringUntil.After(time.Now().Add(window+time.Second)) {
				t.Errorf("recovering until %v, want about %s after the first write at %v", s.RecoveringUntil, window, before)
			}
			_, err = promoted.Acquire(ctx, req("h1", "r5", 100, 1))
			var rej *ledger.Rejection
			if !errors.As(err, &rej) || rej.Reason != ledger.ReasonRecovering || rej.Epoch != s.Epoch {
				t.Errorf("Acquire in the window = %v, want rejected recovering in epoch %d", err, s.Epoch)
			}
			// The holder re-asserts every lease it holds: the two kept are
			// replayed, the lost one comes back under its own fence.
			for _, x := range append(kept, lost) {
				g, err := promoted.Reassert(ctx, x, time.Minute)
				if err != nil {
					t.Fatalf("Reassert %s: %v", x.ID, err)
				}
				if want := x.ID != lost.ID; g.Replayed != want || g.Lease.Fence != x.Fence {
					t.Errorf("Reassert %s = replayed %v, fence %v; want replayed %v, fence %v", x.ID, g.Replayed, g.Lease.Fence, want, x.Fence)
				}
			}
			again := mustKeepAlive(t, promoted, "llama", "h1", time.Minute)
			if again.Epoch != s.Epoch {
				t.Errorf("a second KeepAlive moved the epoch to %d from %d: the failover is counted once", again.Epoch, s.Epoch)
			}
			time.Sleep(time.Until(s.RecoveringUntil) + 10*time.Millisecond)
			g, err := promoted.Acquire(ctx, req("h1", "r6", 100, 1))
			if err != nil {
				t.Fatalf("Acquire after the window: %v", err)
			}
			if g.Lease.Fence.Epoch != s.Epoch || g.Lease.ID == lost.ID {
				t.Errorf("grant after the failover %s (fence %v), want one of epoch %d, never the lost lease's id %s", g.Lease.ID, g.Lease.Fence, s.Epoch, lost.ID)
			}
			if st, err := promoted.Stats(ctx, "llama"); err != nil || st.Leases != 4 || st.Counters[ledger.CounterFailovers] != 1 {
				t.Errorf("Stats at the end: %d leases, failovers %d, %v; want 4 (2 kept, 1 re-asserted, 1 new), 1", st.Leases, st.Counters[ledger.CounterFailovers], err)
			}
		})
	}
}

// TestFailoverSeenAfterReleaseAndGrow promotes a replica that missed a
// grant and runs a growth, a shrinking resize and a release there before
// anything else: none admits capacity, so none looks for the failover
// (lib.lua's open_lease), and none may hide it. The first acquire after
// them still starts the new epoch and is refused while the window is
// open, and the engine holds what the grown, then shrunk, lease holds.
func TestFailoverSeenAfterReleaseAndGrow(t *testing.T) {
	ctx := ctxT(t)
	opts := lhredis.Options{Options: ledger.Options{RecoveryWindow: 2 * time.Second}, Prefix: newPrefix()}
	l, epoch, kept, replica := promoteAfterTwoGrants(t, opts, "gpu-0")
	rc := replica.Client()
	if _, err := l.Acquire(ctx, req("h1", "r3", 100, 1, "gpu-0")); err != nil {
		t.Fatalf("Acquire r3, which the promoted replica never sees: %v", err)
	}

	promoted := lhredis.New(rc, opts)
	t.Cleanup(func() { _ = promoted.Close() })
	if _, err := promoted.Grow(ctx, kept[0].Ref(), 300); err != nil {
		t.Fatalf("Grow on the promoted replica: %v", err)
	}
	if _, err := promoted.Resize(ctx, kept[0].Ref(), 250); err != nil {
		t.Fatalf("Resize (shrink) on the promoted replica: %v", err)
	}
	if r, err := promoted.Release(ctx, kept[1].Ref(), ledger.Usage{PromptTokens: 10, CompletionTokens: 10, Finished: true,
		Outcome: ledger.OutcomeOK}); err != nil || !r.Released {
		t.Fatalf("Release on the promoted replica = %+v, %v", r, err)
	}
	_, err := promoted.Acquire(ctx, req("h1", "r4", 100, 1, "gpu-0"))
	var rej *ledger.Rejection
	if !errors.As(err, &rej) || rej.Reason != ledger.ReasonRecovering || rej.Epoch <= epoch {
		t.Fatalf("first Acquire after the growth and the release = %v, want rejected recovering in an epoch after %d", err, epoch)
	}
	st, err := promoted.Stats(ctx, "llama")
	if err != nil {
		t.Fatal(err)
	}
	if st.Epoch != rej.Epoch || st.Counters[ledger.CounterFailovers] != 1 || st.Leases != 1 {
		t.Errorf("Stats after it: epoch %d, failovers %d, %d leases; want %d, 1, 1 (the resized one)",
			st.Epoch, st.Counters[ledger.CounterFailovers], st.Leases, rej.Epoch)
	}
	for _, e := range st.Engines {
		if e.Spec.ID == "gpu-0" && e.ReservedKV != 250 {
			t.Errorf("gpu-0 reserves %d KV tokens, want the resized lease's 250", e.ReservedKV)
		}
	}
}

// TestFailoverSeenByGrowingResize promotes a replica that missed a grant
// and grows a lease there with Resize before anything else: a growth
// admits capacity, so unlike a shrink it looks for the failover first,
// starts the new epoch and is refused while its recovery window is open;
// the lease keeps what it held.
func TestFailoverSeenByGrowingResize(t *testing.T) {
	ctx := ctxT(t)
	opts := lhredis.Options{Options: ledger.Options{RecoveryWindow: 2 * time.Second}, Prefix: newPrefix()}
	l, epoch, kept, replica := promoteAfterTwoGrants(t, opts, "gpu-0")
	if _, err := l.Acquire(ctx, req("h1", "r3", 100, 1, "gpu-0")); err != nil {
		t.Fatalf("Acquire r3, which the promoted replica never sees: %v", err)
	}
	promoted := lhredis.New(replica.Client(), opts)
	t.Cleanup(func() { _ = promoted.Close() })
	_, err := promoted.Resize(ctx, kept[0].Ref(), 200)
	var rej *ledger.Rejection
	if !errors.As(err, &rej) || rej.Reason != ledger.ReasonRecovering || rej.Epoch <= epoch {
		t.Fatalf("Resize 100 -> 200 on the promoted replica = %v, want rejected recovering in an epoch after %d", err, epoch)
	}
	st, err := promoted.Stats(ctx, "llama")
	if err != nil {
		t.Fatal(err)
	}
	if st.Epoch != rej.Epoch || st.Counters[ledger.CounterFailovers] != 1 {
		t.Errorf("Stats after it: epoch %d, failovers %d; want %d, 1", st.Epoch, st.Counters[ledger.CounterFailovers], rej.Epoch)
	}
	for _, e := range st.Engines {
		if e.Spec.ID == "gpu-0" && e.ReservedKV != 200 {
			t.Errorf("gpu-0 reserves %d KV tokens, want the two kept leases' 200", e.ReservedKV)
		}
	}
}

// TestFailoverMigrationKeepsEpoch moves a pool's slot to another master of
// a Redis Cluster: MIGRATE moves keys whole, so the pool keeps its epoch
// and the next write only records the new node.
func TestFailoverMigrationKeepsEpoch(t *testing.T) {
	c := redisserver.StartShardedCluster(t, 2)
	ctx := ctxT(t)
	cc := c.Client()
	l, prefix := newLedgerOn(t, cc, noWindow)
	epoch := mustConfigure(t, l, basicSpec())
	mustKeepAlive(t, l, "llama", "h1", time.Minute)
	g, err := l.Acquire(ctx, req("h1", "r1", 100, 1))
	if err != nil {
		t.Fatal(err)
	}
	slot := int(cc.ClusterKeySlot(ctx, prefix+":{llama}:state").Val())
	from, err := c.MasterOf(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.MigrateSlot(ctx, slot, 1-from, 0); err != nil {
		t.Fatalf("MigrateSlot: %v", err)
	}
	cc.ReloadState(ctx)
	g2 := acquireRetrying(t, ctx, l, req("h1", "r2", 100, 1))
	st, err := l.Stats(ctx, "llama")
	if err != nil {
		t.Fatal(err)
	}
	if g2.Epoch != epoch || st.Counters[ledger.CounterFailovers] != 0 || st.Leases != 2 {
		t.Errorf("after the migration: epoch %d (was %d), failovers %d, %d leases; want the same epoch, 0, 2", g2.Epoch, epoch, st.Counters[ledger.CounterFailovers], st.Leases)
	}
	if g2.Lease.Fence.Seq != g.Lease.Fence.Seq+1 {
		t.Errorf("fence after the migration %v, want the sequence after %v", g2.Lease.Fence, g.Lease.Fence)
	}
}

// acquireRetrying retries req while the cluster client has not caught up
// with a slot's move (MOVED, ASK, TRYAGAIN reach the caller once the
// client's own redirects are spent).
func acquireRetrying(t testing.TB, ctx context.Context, l ledger.Ledger, req ledger.AcquireRequest) ledger.Grant {
	t.Helper()
	for {
		g, err := l.Acquire(ctx, req)
		if err == nil {
			return g
		}
		var rerr goredis.Error
		if !errors.As(err, &rerr) || ctx.Err() != nil {
			t.Fatalf("Acquire %s: %v", req.RequestID, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
