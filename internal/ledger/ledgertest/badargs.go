package ledgertest

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// testBadArguments calls every method with one bad argument at a time and
// wants the matching sentinel and no change to the pool.
func (s *suite) testBadArguments(t *testing.T) {
	spec := poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4))
	f := s.setup(t, spec, noWindow)
	held := f.acquire(f.req(h1, 100, 1, e1), e1)
	ctx := f.ctx
	l := f.l

	// acq returns an Acquire call on a valid request changed by edit.
	acq := func(edit func(r *ledger.AcquireRequest)) func() error {
		return func() error {
			r := f.req(h1, 10, 1, e1, e2)
			edit(&r)
			_, err := l.Acquire(ctx, r)
			return err
		}
	}
	ref := func(edit func(r *ledger.LeaseRef)) ledger.LeaseRef {
		r := held.Ref()
		edit(&r)
		return r
	}
	cfg := func(edit func(s *ledger.PoolSpec)) func() error {
		return func() error {
			s := poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4))
			edit(&s)
			_, err := l.Configure(ctx, s)
			return err
		}
	}
	reassert := func(edit func(l *ledger.Lease)) func() error {
		return func() error {
			x := f.fabricate(h1, e1, 10, 1, ledger.Fence{Epoch: f.epoch, Seq: 999})
			edit(&x)
			_, err := l.Reassert(ctx, x, longTTL)
			return err
		}
	}
	observe := func(edit func(o *ledger.Observation)) func() error {
		return func() error {
			o := ledger.Observation{Pool: pool, Engine: e1, KVTokensUsed: 1, ObservedAt: time.Now()}
			edit(&o)
			_, err := l.Observe(ctx, o)
			return err
		}
	}
	long := strings.Repeat("x", ledger.MaxIDLen+1)
	many := make([]ledger.EngineID, ledger.MaxCandidates+1)
	for i := range many {
		many[i] = ledger.EngineID(fmt.Sprintf("c%d", i))
	}
	bad := ledger.ErrInvalidArgument
	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"acquire zero kv", acq(func(r *ledger.AcquireRequest) { r.KVTokens = 0 }), bad},
		{"acquire negative kv", acq(func(r *ledger.AcquireRequest) { r.KVTokens = -5 }), bad},
		{"acquire huge kv", acq(func(r *ledger.AcquireRequest) { r.KVTokens = ledger.MaxAmount + 1 }), bad},
		{"acquire max kv is too large, not invalid", acq(func(r *ledger.AcquireRequest) { r.KVTokens = ledger.MaxAmount }), ledger.ErrRejected},
		{"acquire min int64 kv", acq(func(r *ledger.AcquireRequest) { r.KVTokens = math.MinInt64 }), bad},
		{"acquire zero slots", acq(func(r *ledger.AcquireRequest) { r.Slots = 0 }), bad},
		{"acquire negative slots", acq(func(r *ledger.AcquireRequest) { r.Slots = -1 }), bad},
		{"acquire huge slots", acq(func(r *ledger.AcquireRequest) { r.Slots = math.MaxInt64 }), bad},
		{"acquire no candidates", acq(func(r *ledger.AcquireRequest) { r.Candidates = nil }), bad},
		{"acquire duplicate candidates", acq(func(r *ledger.AcquireRequest) { r.Candidates = on(e1, e2, e1) }), bad},
		{"acquire too many candidates", acq(func(r *ledger.AcquireRequest) { r.Candidates = many }), bad},
		{"acquire empty candidate", acq(func(r *ledger.AcquireRequest) { r.Candidates = on(e1, "") }), bad},
		{"acquire empty pool", acq(func(r *ledger.AcquireRequest) { r.Pool = "" }), bad},
		{"acquire unknown pool", acq(func(r *ledger.AcquireRequest) { r.Pool = "nope" }), ledger.ErrUnknownPool},
		{"acquire unknown engine", acq(func(r *ledger.AcquireRequest) { r.Candidates = on("nope") }), ledger.ErrUnknownEngine},
		{"acquire unknown tenant", acq(func(r *ledger.AcquireRequest) { r.Tenant = "nope" }), ledger.ErrUnknownTenant},
		{"acquire unknown priority", acq(func(r *ledger.AcquireRequest) { r.Priority = "nope" }), ledger.ErrUnknownPriority},
		{"acquire empty tenant", acq(func(r *ledger.AcquireRequest) { r.Tenant = "" }), bad},
		{"acquire empty priority", acq(func(r *ledger.AcquireRequest) { r.Priority = "" }), bad},
		{"acquire empty holder", acq(func(r *ledger.AcquireRequest) { r.Holder = "" }), bad},
		{"acquire empty request id", acq(func(r *ledger.AcquireRequest) { r.RequestID = "" }), bad},
		{"acquire request id with space", acq(func(r *ledger.AcquireRequest) { r.RequestID = "a b" }), bad},
		{"acquire overlong holder", acq(func(r *ledger.AcquireRequest) { r.Holder = ledger.HolderID(long) }), bad},
		{"acquire zero ttl", acq(func(r *ledger.AcquireRequest) { r.TTL = 0 }), bad},
		{"acquire negative ttl", acq(func(r *ledger.AcquireRequest) { r.TTL = -time.Second }), bad},
		{"acquire sub-millisecond ttl", acq(func(r *ledger.AcquireRequest) { r.TTL = time.Microsecond }), bad},
		{"acquire ttl over 24h", acq(func(r *ledger.AcquireRequest) { r.TTL = 25 * time.Hour }), bad},

		{"keepalive zero ttl", func() error { _, err := l.KeepAlive(ctx, pool, h1, 0); return err }, bad},
		{"keepalive empty holder", func() error { _, err := l.KeepAlive(ctx, pool, "", time.Minute); return err }, bad},
		{"keepalive empty pool", func() error { _, err := l.KeepAlive(ctx, "", h1, time.Minute); return err }, bad},
		{"keepalive unknown pool", func() error { _, err := l.KeepAlive(ctx, "nope", h1, time.Minute); return err }, ledger.ErrUnknownPool},

		{"renew malformed id", func() error {
			_, err := l.Renew(ctx, ref(func(r *ledger.LeaseRef) { r.ID = "nope" }), time.Minute)
			return err
		}, bad},
		{"renew empty id", func() error {
			_, err := l.Renew(ctx, ref(func(r *ledger.LeaseRef) { r.ID = ledger.NoLease }), time.Minute)
			return err
		}, bad},
		{"renew non-hex id", func() error {
			_, err := l.Renew(ctx, ref(func(r *ledger.LeaseRef) { r.ID = "xyz-1" }), time.Minute)
			return err
		}, bad},
		{"renew empty holder", func() error {
			_, err := l.Renew(ctx, ref(func(r *ledger.LeaseRef) { r.Holder = ledger.NoHolder }), time.Minute)
			return err
		}, bad},
		{"renew zero ttl", func() error { _, err := l.Renew(ctx, held.Ref(), 0); return err }, bad},
		{"resize zero kv", func() error { _, err := l.Resize(ctx, held.Ref(), 0); return err }, bad},
		{"resize negative kv", func() error { _, err := l.Resize(ctx, held.Ref(), -1); return err }, bad},
		{"resize huge kv", func() error { _, err := l.Resize(ctx, held.Ref(), ledger.MaxAmount+1); return err }, bad},
		{"resize malformed id", func() error {
			_, err := l.Resize(ctx, ref(func(r *ledger.LeaseRef) { r.ID = "12" }), 10)
			return err
		}, bad},
		{"grow zero kv", func() error { _, err := l.Grow(ctx, held.Ref(), 0); return err }, bad},
		{"grow negative kv", func() error { _, err := l.Grow(ctx, held.Ref(), -1); return err }, bad},
		{"grow min int64 kv", func() error { _, err := l.Grow(ctx, held.Ref(), math.MinInt64); return err }, bad},
		{"grow huge kv", func() error { _, err := l.Grow(ctx, held.Ref(), ledger.MaxAmount+1); return err }, bad},
		{"grow max kv is above the engine, invalid", func() error { _, err := l.Grow(ctx, held.Ref(), ledger.MaxAmount); return err }, bad},
		{"grow above the engine", func() error { _, err := l.Grow(ctx, held.Ref(), 1001); return err }, bad},
		{"grow below the lease", func() error { _, err := l.Grow(ctx, held.Ref(), held.KVTokens-1); return err }, bad},
		{"grow malformed id", func() error {
			_, err := l.Grow(ctx, ref(func(r *ledger.LeaseRef) { r.ID = "12" }), 200)
			return err
		}, bad},
		{"grow empty holder", func() error {
			_, err := l.Grow(ctx, ref(func(r *ledger.LeaseRef) { r.Holder = ledger.NoHolder }), 200)
			return err
		}, bad},
		{"grow empty pool", func() error {
			_, err := l.Grow(ctx, ref(func(r *ledger.LeaseRef) { r.Pool = "" }), 200)
			return err
		}, bad},
		{"grow unknown pool", func() error {
			_, err := l.Grow(ctx, ref(func(r *ledger.LeaseRef) { r.Pool = "nope" }), 200)
			return err
		}, ledger.ErrUnknownPool},
		{"grow another holder's lease", func() error {
			_, err := l.Grow(ctx, ref(func(r *ledger.LeaseRef) { r.Holder = h2 }), 200)
			return err
		}, ledger.ErrNotHolder},
		{"grow unknown lease", func() error {
			_, err := l.Grow(ctx, ref(func(r *ledger.LeaseRef) { r.ID = ledger.MakeLeaseID(ledger.Fence{Epoch: f.epoch, Seq: 999}) }), 200)
			return err
		}, ledger.ErrLeaseNotFound},
		{"release malformed id", func() error {
			_, err := l.Release(ctx, ref(func(r *ledger.LeaseRef) { r.ID = "-" }), ledger.Usage{})
			return err
		}, bad},
		{"release empty pool", func() error {
			_, err := l.Release(ctx, ref(func(r *ledger.LeaseRef) { r.Pool = "" }), ledger.Usage{})
			return err
		}, bad},
		{"release negative usage", func() error {
			_, err := l.Release(ctx, held.Ref(), ledger.Usage{PromptTokens: -1})
			return err
		}, bad},

		{"reassert zero kv", reassert(func(x *ledger.Lease) { x.KVTokens = 0 }), bad},
		{"reassert zero slots", reassert(func(x *ledger.Lease) { x.Slots = 0 }), bad},
		{"reassert malformed id", reassert(func(x *ledger.Lease) { x.ID = "nope" }), bad},
		{"reassert empty request id", reassert(func(x *ledger.Lease) { x.RequestID = "" }), bad},
		{"reassert empty engine", reassert(func(x *ledger.Lease) { x.Engine = "" }), bad},
		{"reassert unknown pool", reassert(func(x *ledger.Lease) { x.Pool = "nope" }), ledger.ErrUnknownPool},

		{"observe unknown engine", observe(func(o *ledger.Observation) { o.Engine = "nope" }), ledger.ErrUnknownEngine},
		{"observe unknown pool", observe(func(o *ledger.Observation) { o.Pool = "nope" }), ledger.ErrUnknownPool},
		{"observe negative kv", observe(func(o *ledger.Observation) { o.KVTokensUsed = -1 }), bad},
		{"observe negative running", observe(func(o *ledger.Observation) { o.Running = -1 }), bad},
		{"observe zero time", observe(func(o *ledger.Observation) { o.ObservedAt = time.Time{} }), bad},

		{"drain unknown engine", func() error { return l.SetDraining(ctx, pool, "nope", true) }, ledger.ErrUnknownEngine},
		{"drain unknown pool", func() error { return l.SetDraining(ctx, "nope", e1, true) }, ledger.ErrUnknownPool},
		{"sweep unknown pool", func() error { _, err := l.Sweep(ctx, "nope", 10); return err }, ledger.ErrUnknownPool},
		{"drain empty engine", func() error { return l.SetDraining(ctx, pool, "", true) }, bad},
		{"drain empty pool", func() error { return l.SetDraining(ctx, "", e1, true) }, bad},
		{"sweep negative max", func() error { _, err := l.Sweep(ctx, pool, -1); return err }, bad},
		{"sweep empty pool", func() error { _, err := l.Sweep(ctx, "", 10); return err }, bad},
		{"stats empty pool", func() error { _, err := l.Stats(ctx, ""); return err }, bad},
		{"list negative limit", func() error { _, err := l.List(ctx, ledger.Filter{Limit: -1}); return err }, bad},
		{"list filter with space", func() error { _, err := l.List(ctx, ledger.Filter{Holder: "a b"}); return err }, bad},

		{"configure empty name", cfg(func(s *ledger.PoolSpec) { s.Name = "" }), bad},
		{"configure no engines", cfg(func(s *ledger.PoolSpec) { s.Engines = nil }), bad},
		{"configure duplicate engine", cfg(func(s *ledger.PoolSpec) { s.Engines[1].ID = e1 }), bad},
		{"configure empty engine id", cfg(func(s *ledger.PoolSpec) { s.Engines[1].ID = "" }), bad},
		{"configure zero kv", cfg(func(s *ledger.PoolSpec) { s.Engines[0].KVTokens = 0 }), bad},
		{"configure huge kv", cfg(func(s *ledger.PoolSpec) { s.Engines[0].KVTokens = ledger.MaxAmount + 1 }), bad},
		{"configure zero slots", cfg(func(s *ledger.PoolSpec) { s.Engines[1].Slots = 0 }), bad},
		{"configure negative stale_after", cfg(func(s *ledger.PoolSpec) { s.Engines[0].StaleAfter = -time.Second }), bad},
		{"configure bad stale policy", cfg(func(s *ledger.PoolSpec) { s.Engines[0].StalePolicy = "bogus" }), bad},
		{"configure duplicate tenant", cfg(func(s *ledger.PoolSpec) { s.Tenants = append(s.Tenants, s.Tenants[0]) }), bad},
		{"configure zero kv_share", cfg(func(s *ledger.PoolSpec) { s.Tenants[0].KVShare = 0 }), bad},
		{"configure kv_share above 1", cfg(func(s *ledger.PoolSpec) { s.Tenants[0].KVShare = 1.5 }), bad},
		{"configure NaN kv_share", cfg(func(s *ledger.PoolSpec) { s.Tenants[0].KVShare = math.NaN() }), bad},
		{"configure negative slot_share", cfg(func(s *ledger.PoolSpec) { s.Tenants[0].SlotShare = -0.1 }), bad},
		{"configure zero max_fill", cfg(func(s *ledger.PoolSpec) { s.Priorities[0].MaxFill = 0 }), bad},
		{"configure max_fill above 1", cfg(func(s *ledger.PoolSpec) { s.Priorities[0].MaxFill = 1.01 }), bad},
		{"configure duplicate priority", cfg(func(s *ledger.PoolSpec) { s.Priorities = append(s.Priorities, s.Priorities[0]) }), bad},
		{"configure negative retry_after", cfg(func(s *ledger.PoolSpec) { s.RetryAfter = -time.Second }), bad},
		{"configure unknown reserve mode", cfg(func(s *ledger.PoolSpec) { s.Reserve = "optimistic" }), bad},
		{"configure negative growth_headroom", cfg(func(s *ledger.PoolSpec) { s.GrowthHeadroom = -0.1 }), bad},
		{"configure growth_headroom above the bound", cfg(func(s *ledger.PoolSpec) { s.GrowthHeadroom = ledger.MaxGrowthHeadroom + 0.01 }), bad},
		{"configure NaN growth_headroom", cfg(func(s *ledger.PoolSpec) { s.GrowthHeadroom = math.NaN() }), bad},
		{"configure worst_case with growth_headroom", cfg(func(s *ledger.PoolSpec) {
			s.Reserve, s.GrowthHeadroom = ledger.ReserveWorstCase, 0.1
		}), bad},
	}
	before := snapshot(f.stats())
	pools, err := l.Pools(ctx)
	if err != nil {
		t.Fatalf("Pools() error = %v", err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			wantErr(t, tc.name, err, tc.want)
			if got := snapshot(f.stats()); got.String() != before.String() {
				t.Errorf("%s changed the pool:\n got %s\nwant %s", tc.name, got, before)
				before = got // report each change once
			}
		})
	}
	if got, err := l.Pools(ctx); err != nil || fmt.Sprint(got) != fmt.Sprint(pools) {
		t.Errorf("Pools() after bad calls = %v, %v; want %v", got, err, pools)
	}
	if ls := f.list(ledger.Filter{}); len(ls) != 1 || ls[0].ID != held.ID || ls[0].KVTokens != held.KVTokens || !ls[0].Deadline.Equal(held.Deadline) {
		t.Errorf("List after bad calls = %v, want only %s unchanged", ls, held.ID)
	}
}
