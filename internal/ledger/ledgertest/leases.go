package ledgertest

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

func (s *suite) testIdempotence(t *testing.T) {
	t.Run("AcquireReplay", s.testAcquireReplay)
	t.Run("SameRequestOtherHolder", s.testSameRequestOtherHolder)
	t.Run("RequestIDAfterRelease", s.testRequestIDAfterRelease)
	t.Run("ReleaseTwice", s.testReleaseTwice)
	t.Run("ReleaseWrongHolder", s.testReleaseWrongHolder)
	t.Run("ReleaseUnknown", s.testReleaseUnknown)
	t.Run("ReleaseUsage", s.testReleaseUsage)
	t.Run("Counters", s.testCounters)
}

func (s *suite) testLeases(t *testing.T) {
	t.Run("Renew", s.testRenew)
	t.Run("RenewResizeWrongHolder", s.testRenewResizeWrongHolder)
	t.Run("RenewResizeUnknown", s.testRenewResizeUnknown)
	t.Run("RenewResizeExpired", s.testRenewResizeExpired)
	t.Run("ExpiryFreesOnSweep", s.testExpiryOnSweep)
	t.Run("ExpiryFreesOnNextAcquire", s.testExpiryOnAcquire)
	t.Run("Resize", s.testResize)
}

// sameLease compares the identity and amounts of two leases.
func sameLease(t testing.TB, op string, got, want ledger.Lease) {
	t.Helper()
	if got.ID != want.ID || got.Fence != want.Fence || got.Engine != want.Engine || got.KVTokens != want.KVTokens ||
		got.Slots != want.Slots || got.Holder != want.Holder || got.RequestID != want.RequestID || !got.Created.Equal(want.Created) {
		t.Errorf("%s lease = %s fence %s on %s kv=%d slots=%d holder=%s req=%s created %s,\n want %s fence %s on %s kv=%d slots=%d holder=%s req=%s created %s",
			op, got.ID, got.Fence, got.Engine, got.KVTokens, got.Slots, got.Holder, got.RequestID, got.Created.Format(time.StampMilli),
			want.ID, want.Fence, want.Engine, want.KVTokens, want.Slots, want.Holder, want.RequestID, want.Created.Format(time.StampMilli))
	}
}

func (s *suite) testAcquireReplay(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4)), noWindow)
	r := f.req(h1, 1000, 1, e1, e2)
	first := f.acquire(r, e1)
	// A retry of the same (holder, request id) returns the same lease even
	// though e1 is now full, and reserves nothing more.
	for i := range 2 {
		g, err := f.l.Acquire(f.ctx, r)
		if err != nil {
			t.Fatalf("retry %d Acquire(%s) error = %v, want the first grant replayed", i, describe(r), err)
		}
		if !g.Replayed {
			t.Errorf("retry %d Acquire Replayed = false, want true", i)
		}
		sameLease(t, "replayed Acquire", g.Lease, first)
		if g.Epoch != f.epoch {
			t.Errorf("replayed Acquire epoch = %d, want %d", g.Epoch, f.epoch)
		}
	}
	f.wantReserved(e1, 1000, 1, 1)
	f.wantReserved(e2, 0, 0, 0)
	if n := len(f.list(ledger.Filter{Pool: pool})); n != 1 {
		t.Errorf("List after replays has %d leases, want 1", n)
	}
}

func (s *suite) testSameRequestOtherHolder(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4)), noWindow)
	r := f.req(h1, 300, 1, e1)
	a := f.acquire(r, e1)
	r.Holder = h2
	b := f.acquire(r, e1)
	if a.ID == b.ID {
		t.Errorf("same request id from another holder got lease %s again, want a new lease", a.ID)
	}
	f.wantReserved(e1, 600, 2, 2)
}

func (s *suite) testRequestIDAfterRelease(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4)), noWindow)
	r := f.req(h1, 300, 1, e1)
	a := f.acquire(r, e1)
	f.release(a)
	// Only an outstanding lease is replayed: after release the request id
	// acquires anew.
	b := f.acquire(r, e1)
	if a.ID == b.ID {
		t.Errorf("Acquire after release returned released lease %s, want a new lease", a.ID)
	}
	f.wantReserved(e1, 300, 1, 1)
}

func (s *suite) testReleaseTwice(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4)), noWindow)
	a := f.acquire(f.req(h1, 1000, 4, e1), e1)
	f.release(a)
	f.wantReserved(e1, 0, 0, 0)
	b := f.acquire(f.req(h2, 1000, 4, e1), e1)
	for i := range 2 {
		rel, err := f.l.Release(f.ctx, a.Ref(), ledger.Usage{PromptTokens: 1})
		if err != nil {
			t.Fatalf("release %d of released lease error = %v, want nil", i+2, err)
		}
		if rel.Released {
			t.Errorf("release %d of released lease Released = true, want false", i+2)
		}
		if rel.Epoch != f.epoch {
			t.Errorf("Release epoch = %d, want %d", rel.Epoch, f.epoch)
		}
	}
	// No double free: b's reservation is intact and the engine still full.
	f.wantReserved(e1, 1000, 4, 1)
	f.reject(f.req(h1, 1, 1, e1), ledger.ReasonEngineKV, e1)
	f.release(b)
	f.wantReserved(e1, 0, 0, 0)
	f.wantCounters("repeated releases not counted", map[string]int64{ledger.CounterReleases: 2})
}

func (s *suite) testReleaseWrongHolder(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4)), noWindow)
	a := f.acquire(f.req(h1, 500, 1, e1), e1)
	ref := a.Ref()
	ref.Holder = h2
	_, err := f.l.Release(f.ctx, ref, ledger.Usage{})
	wantErr(t, "Release by another holder", err, ledger.ErrNotHolder)
	f.wantReserved(e1, 500, 1, 1)
	f.release(a)
}

func (s *suite) testReleaseUnknown(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4)), noWindow)
	a := f.acquire(f.req(h1, 500, 1, e1), e1)
	ghost := a.Ref()
	ghost.ID = ledger.MakeLeaseID(ledger.Fence{Epoch: f.epoch, Seq: a.Fence.Seq + 1000})
	rel, err := f.l.Release(f.ctx, ghost, ledger.Usage{})
	if err != nil || rel.Released {
		t.Errorf("Release(never granted %s) = Released %v, error %v; want Released false, nil error", ghost.ID, rel.Released, err)
	}
	f.wantReserved(e1, 500, 1, 1)
}

func (s *suite) testReleaseUsage(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4)), noWindow)
	a := f.acquire(f.req(h1, 500, 1, e1), e1)
	b := f.acquire(f.req(h1, 200, 1, e1), e1)
	for _, rel := range []struct {
		l ledger.Lease
		u ledger.Usage
	}{{a, ledger.Usage{PromptTokens: 120, CompletionTokens: 30}}, {b, ledger.Usage{PromptTokens: 7, CompletionTokens: 0}}, {a, ledger.Usage{PromptTokens: 1000, CompletionTokens: 1000}}} {
		if _, err := f.l.Release(f.ctx, rel.l.Ref(), rel.u); err != nil {
			t.Fatalf("Release(%s, %+v) error = %v, want nil", rel.l.ID, rel.u, err)
		}
	}
	f.wantCounters("the repeated release adds nothing", map[string]int64{
		ledger.CounterReleases:       2,
		ledger.CounterReleasedKV:     700,
		ledger.CounterActualPrompt:   127,
		ledger.CounterActualComplete: 30,
	})
}

func (s *suite) testCounters(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4)), noWindow)
	r := f.req(h1, 600, 1, e1)
	a := f.acquire(r, e1)
	if _, err := f.l.Acquire(f.ctx, r); err != nil {
		t.Fatalf("replay error = %v", err)
	}
	f.acquire(f.req(h1, 400, 1, e1), e1)
	f.reject(f.req(h1, 1, 1, e1), ledger.ReasonEngineKV, e1)
	f.reject(f.req(h1, 1001, 1, e1), ledger.ReasonTooLarge, "")
	f.release(a)
	f.wantCounters("", map[string]int64{
		ledger.CounterGrants:     2,
		ledger.CounterReplays:    1,
		ledger.CounterRejections: 2,
		ledger.CounterRejections + ":" + string(ledger.ReasonEngineKV): 1,
		ledger.CounterRejections + ":" + string(ledger.ReasonTooLarge): 1,
		ledger.CounterReleases: 1,
		ledger.CounterExpired:  0,
		ledger.CounterRevoked:  0,
	})
}

func (s *suite) testRenew(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4)), noWindow)
	r := f.shortReq(300*time.Millisecond, h1, 500, 1, e1)
	a := f.acquire(r, e1)
	ext := r.TTL + 2*time.Second + f.slack()
	before := f.ledgerNow()
	rn, err := f.l.Renew(f.ctx, a.Ref(), ext)
	after := f.ledgerNow()
	if err != nil {
		t.Fatalf("Renew(%s, %s) error = %v, want nil", a.ID, ext, err)
	}
	if rn.Epoch != f.epoch {
		t.Errorf("Renew epoch = %d, want %d", rn.Epoch, f.epoch)
	}
	if rn.Lease.ID != a.ID || rn.Lease.KVTokens != a.KVTokens {
		t.Errorf("Renew lease = %s kv=%d, want %s kv=%d", rn.Lease.ID, rn.Lease.KVTokens, a.ID, a.KVTokens)
	}
	lo, hi := before.Add(ext-time.Millisecond), after.Add(ext+time.Millisecond)
	if d := rn.Lease.Deadline; d.Before(lo) || d.After(hi) {
		t.Errorf("Renew deadline = %s, want now+%s in [%s, %s]", d.Format(time.StampMilli), ext, lo.Format(time.StampMilli), hi.Format(time.StampMilli))
	}
	// Past the original deadline the renewed lease survives a sweep.
	f.waitPast(a.Deadline)
	f.sweepAll()
	ls := f.list(ledger.Filter{Pool: pool})
	if len(ls) != 1 || ls[0].ID != a.ID {
		t.Fatalf("List past the original deadline = %d leases, want the renewed lease %s", len(ls), a.ID)
	}
	if !ls[0].Deadline.Equal(rn.Lease.Deadline) {
		t.Errorf("List deadline = %s, want the renewed %s", ls[0].Deadline.Format(time.StampMilli), rn.Lease.Deadline.Format(time.StampMilli))
	}
	f.wantReserved(e1, 500, 1, 1)
	// Renew may also shorten.
	rn2, err := f.l.Renew(f.ctx, a.Ref(), r.TTL)
	if err != nil || !rn2.Lease.Deadline.Before(rn.Lease.Deadline) {
		t.Errorf("Renew(1s) = deadline %s, error %v; want an earlier deadline than %s", rn2.Lease.Deadline.Format(time.StampMilli), err, rn.Lease.Deadline.Format(time.StampMilli))
	}
}

func (s *suite) testRenewResizeWrongHolder(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4)), noWindow)
	a := f.acquire(f.req(h1, 500, 1, e1), e1)
	ref := a.Ref()
	ref.Holder = h2
	_, err := f.l.Renew(f.ctx, ref, time.Second)
	wantErr(t, "Renew by another holder", err, ledger.ErrNotHolder)
	_, err = f.l.Resize(f.ctx, ref, 100)
	wantErr(t, "Resize by another holder", err, ledger.ErrNotHolder)
	f.wantReserved(e1, 500, 1, 1)
	ls := f.list(ledger.Filter{Pool: pool})
	if len(ls) != 1 || !ls[0].Deadline.Equal(a.Deadline) {
		t.Errorf("List after foreign Renew = %v, want the lease with its deadline unchanged %s", ls, a.Deadline)
	}
}

func (s *suite) testRenewResizeUnknown(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4)), noWindow)
	a := f.acquire(f.req(h1, 500, 1, e1), e1)
	ghost := a.Ref()
	ghost.ID = ledger.MakeLeaseID(ledger.Fence{Epoch: f.epoch, Seq: a.Fence.Seq + 1000})
	_, err := f.l.Renew(f.ctx, ghost, time.Second)
	wantErr(t, "Renew(never granted)", err, ledger.ErrLeaseNotFound)
	_, err = f.l.Resize(f.ctx, ghost, 10)
	wantErr(t, "Resize(never granted)", err, ledger.ErrLeaseNotFound)
	f.release(a)
	_, err = f.l.Renew(f.ctx, a.Ref(), time.Second)
	wantErr(t, "Renew(released)", err, ledger.ErrLeaseNotFound)
	_, err = f.l.Resize(f.ctx, a.Ref(), 10)
	wantErr(t, "Resize(released)", err, ledger.ErrLeaseNotFound)
	f.wantReserved(e1, 0, 0, 0)
}

func (s *suite) testRenewResizeExpired(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4)), noWindow)
	r := f.shortReq(150*time.Millisecond, h1, 500, 1, e1)
	a := f.acquire(r, e1)
	b := f.acquire(f.req(h1, 100, 1, e1), e1)
	f.waitPast(a.Deadline)
	// Expired but perhaps not swept: renewing cannot revive it.
	_, err := f.l.Renew(f.ctx, a.Ref(), time.Minute)
	wantErr(t, "Renew(expired)", err, ledger.ErrLeaseNotFound)
	_, err = f.l.Resize(f.ctx, a.Ref(), 10)
	wantErr(t, "Resize(expired)", err, ledger.ErrLeaseNotFound)
	f.sweepAll()
	f.wantReserved(e1, 100, 1, 1)
	ls := f.list(ledger.Filter{Pool: pool})
	if len(ls) != 1 || ls[0].ID != b.ID {
		t.Errorf("List after expiry = %d leases, want only %s", len(ls), b.ID)
	}
}

func (s *suite) testExpiryOnSweep(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4)), noWindow)
	r := f.shortReq(200*time.Millisecond, h1, 1000, 4, e1)
	a := f.acquire(r, e1)
	f.waitPast(a.Deadline)
	// Until swept an expired lease may still count; after it must not.
	sw := f.sweepAll()
	switch {
	case !f.bg && sw.Expired != 1:
		t.Errorf("Sweep after the deadline Expired = %d, want 1", sw.Expired)
	case f.bg && sw.Expired > 1:
		t.Errorf("Sweep after the deadline Expired = %d, want at most 1 (the background sweeper may have ended it)", sw.Expired)
	}
	if sw.Revoked != 0 {
		t.Errorf("Sweep after the deadline Revoked = %d, want 0 (the holder is live)", sw.Revoked)
	}
	f.wantReserved(e1, 0, 0, 0)
	if ls := f.list(ledger.Filter{Pool: pool}); len(ls) != 0 {
		t.Errorf("List after expiry sweep = %d leases, want 0", len(ls))
	}
	f.wantCounters("", map[string]int64{ledger.CounterExpired: 1})
	f.acquire(f.req(h1, 1000, 4, e1), e1)
	rel, err := f.l.Release(f.ctx, a.Ref(), ledger.Usage{})
	if err != nil || rel.Released {
		t.Errorf("Release(expired) = Released %v, error %v; want false, nil", rel.Released, err)
	}
	f.wantReserved(e1, 1000, 4, 1)
}

func (s *suite) testExpiryOnAcquire(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4)), noWindow)
	r := f.shortReq(200*time.Millisecond, h1, 1000, 4, e1)
	a := f.acquire(r, e1)
	f.waitPast(a.Deadline)
	// The sweep at the start of the next mutating call frees the capacity.
	f.acquire(f.req(h2, 1000, 4, e1), e1)
	f.wantReserved(e1, 1000, 4, 1)
}

// resizeSpec has a tenant "small" with quota 500 and a priority batch with
// max_fill 0.7 over two engines of 1000 KV tokens.
func resizeSpec() ledger.PoolSpec {
	s := poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4))
	s.Tenants = append(s.Tenants, ledger.TenantSpec{Name: tenantSmall, KVShare: 0.25})
	s.Priorities = append(s.Priorities, ledger.PrioritySpec{Name: prioBatch, MaxFill: 0.7})
	return s
}

func (s *suite) testResize(t *testing.T) {
	cases := []struct {
		name       string
		lease      ask   // the lease resized, held by h1
		others     []ask // held by h2
		drain      bool  // drain e1 before resizing
		kv         int64
		wantReason ledger.Reason // "" wants success
		wantOn     ledger.EngineID
	}{
		{name: "shrink", lease: ask{kv: 400, slots: 1, cands: on(e1)}, kv: 100},
		{name: "shrink when full", lease: ask{kv: 400, slots: 1, cands: on(e1)}, others: []ask{{kv: 600, slots: 1, cands: on(e1)}}, kv: 1},
		{name: "same size", lease: ask{kv: 400, slots: 1, cands: on(e1)}, kv: 400},
		{name: "grow fits exactly", lease: ask{kv: 400, slots: 1, cands: on(e1)}, others: []ask{{kv: 300, slots: 1, cands: on(e1)}}, kv: 700},
		{name: "grow engine kv", lease: ask{kv: 400, slots: 1, cands: on(e1)}, others: []ask{{kv: 300, slots: 1, cands: on(e1)}},
			kv: 701, wantReason: ledger.ReasonEngineKV, wantOn: e1},
		{name: "grow too large", lease: ask{kv: 400, slots: 1, cands: on(e1)}, kv: 1001, wantReason: ledger.ReasonTooLarge},
		{name: "grow priority headroom", lease: ask{kv: 400, slots: 1, cands: on(e1), prio: prioBatch}, others: []ask{{kv: 300, slots: 1, cands: on(e1)}},
			kv: 401, wantReason: ledger.ReasonPriorityHeadroom, wantOn: e1},
		{name: "grow priority too large", lease: ask{kv: 400, slots: 1, cands: on(e1), prio: prioBatch}, kv: ledger.Fill(1000, 0.7) + 1,
			wantReason: ledger.ReasonTooLarge},
		{name: "grow tenant quota", lease: ask{kv: 400, slots: 1, cands: on(e1), tenant: tenantSmall}, others: []ask{{kv: 100, slots: 1, cands: on(e2), tenant: tenantSmall}},
			kv: 401, wantReason: ledger.ReasonTenantKV},
		{name: "grow tenant too large", lease: ask{kv: 400, slots: 1, cands: on(e1), tenant: tenantSmall}, kv: 501, wantReason: ledger.ReasonTooLarge},
		{name: "grow on draining engine", lease: ask{kv: 400, slots: 1, cands: on(e1)}, drain: true, kv: 401, wantReason: ledger.ReasonDraining, wantOn: e1},
		{name: "shrink on draining engine", lease: ask{kv: 400, slots: 1, cands: on(e1)}, drain: true, kv: 399},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := s.setup(t, resizeSpec(), noWindow)
			a := f.acquire(tc.lease.on(f, h1), e1)
			var othersKV, othersSlots, othersLeases int64
			for _, o := range tc.others {
				l := f.acquire(o.on(f, h2), "")
				if l.Engine == e1 {
					othersKV, othersSlots, othersLeases = othersKV+l.KVTokens, othersSlots+l.Slots, othersLeases+1
				}
			}
			if tc.drain {
				if err := f.l.SetDraining(f.ctx, pool, e1, true); err != nil {
					t.Fatalf("SetDraining(e1) error = %v", err)
				}
			}
			rn, err := f.l.Resize(f.ctx, a.Ref(), tc.kv)
			wantKV := tc.kv
			if tc.wantReason != "" {
				if err == nil {
					t.Fatalf("Resize(%d -> %d) = lease kv %d, want rejection %s", a.KVTokens, tc.kv, rn.Lease.KVTokens, tc.wantReason)
				}
				f.checkRejection("Resize", err, tc.wantReason, tc.wantOn)
				wantKV = a.KVTokens
			} else {
				if err != nil {
					t.Fatalf("Resize(%d -> %d) error = %v, want nil", a.KVTokens, tc.kv, err)
				}
				if rn.Lease.ID != a.ID || rn.Lease.KVTokens != tc.kv || rn.Lease.Slots != a.Slots {
					t.Errorf("Resize lease = %s kv=%d slots=%d, want %s kv=%d slots=%d", rn.Lease.ID, rn.Lease.KVTokens, rn.Lease.Slots, a.ID, tc.kv, a.Slots)
				}
				if rn.Epoch != f.epoch {
					t.Errorf("Resize epoch = %d, want %d", rn.Epoch, f.epoch)
				}
			}
			f.wantReserved(e1, othersKV+wantKV, othersSlots+a.Slots, othersLeases+1)
			ls := f.list(ledger.Filter{Pool: pool, Holder: h1})
			if len(ls) != 1 || ls[0].KVTokens != wantKV {
				t.Errorf("List(holder h1) = %d leases, want one with kv=%d", len(ls), wantKV)
			}
			if ts, ok := tenantStats(f.stats(), a.Tenant); !ok || ts.ReservedKV < wantKV {
				t.Errorf("Stats tenant %s reserved kv=%d, want at least the lease's %d", a.Tenant, ts.ReservedKV, wantKV)
			}
		})
	}
}
