package ledgertest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Reassert cannot lie beyond what its caller could have held (the red
// team's reproductions, issue 15): a fence from the future, a sequence past
// what the pool's epoch could have issued, an id that is not its fence's,
// an amount larger than its engine, and an id another holder holds are all
// refused with nothing changed; no grant after the largest plausible
// reassert repeats an id, and totals always equal the lease rows. A lease
// reasserted on an engine that has telemetry stays Unconfirmed, with its
// deadline capped, until an observation shows it.

func (s *suite) testReassert(t *testing.T) {
	t.Run("Refused", s.testReassertRefused)
	t.Run("Bounds", s.testReassertBounds)
	t.Run("IDsStayUnique", s.testIDsStayUnique)
	t.Run("UnconfirmedExpires", s.testUnconfirmedExpires)
	t.Run("Confirmed", s.testConfirmed)
	t.Run("NotConfirmedWithinGrace", s.testNotConfirmedWithinGrace)
}

// checkTotals wants the ledger's engine and tenant totals to equal its
// lease rows (ledger.TotalsChecker, which every backend implements).
func (f *fixture) checkTotals(when string) {
	f.t.Helper()
	ms, err := ledger.CheckTotals(f.ctx, f.l, f.spec.Name)
	if err != nil {
		f.t.Fatalf("CheckTotals(%s) %s error = %v, want nil", f.spec.Name, when, err)
	}
	for _, m := range ms {
		f.t.Errorf("CheckTotals %s: %s, want equal", when, m)
	}
}

// refusedUnchanged wants call to fail matching target, with the pool, the
// leases and the totals as they were.
func (f *fixture) refusedUnchanged(what string, target error, call func() error) {
	f.t.Helper()
	before, leases := snapshot(f.stats()), f.list(ledger.Filter{Pool: f.spec.Name})
	wantErr(f.t, what, call(), target)
	if got := snapshot(f.stats()); got.String() != before.String() {
		f.t.Errorf("%s changed the pool:\n got %s\nwant %s", what, got, before)
	}
	if got := f.list(ledger.Filter{Pool: f.spec.Name}); fmt.Sprint(got) != fmt.Sprint(leases) {
		f.t.Errorf("%s changed the leases:\n got %v\nwant %v", what, got, leases)
	}
	f.checkTotals("after " + what)
}

func (s *suite) testReassertRefused(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4)), noWindow)
	held := f.acquire(f.req(h1, 100, 1, e1), e1) // the pool's sequence is now held's
	f.observeTotal(e2, 0, 600, 0, time.Now(), true)
	seq, ep := held.Fence.Seq, f.epoch
	fenced := func(fence ledger.Fence, edit func(x *ledger.Lease)) func() error {
		return func() error {
			x := f.fabricate(h1, e1, 10, 1, fence)
			if edit != nil {
				edit(&x)
			}
			_, err := f.l.Reassert(f.ctx, x, longTTL)
			return err
		}
	}
	cur := ledger.Fence{Epoch: ep, Seq: seq + 1}
	for _, tc := range []struct {
		name   string
		call   func() error
		target error
	}{
		{"sequence 2^53-1 of the current epoch", fenced(ledger.Fence{Epoch: ep, Seq: ledger.MaxFenceSeq}, nil), ledger.ErrInvalidArgument},
		{"sequence MaxReassertAhead+1 past the pool's", fenced(ledger.Fence{Epoch: ep, Seq: seq + ledger.MaxReassertAhead + 1}, nil), ledger.ErrInvalidArgument},
		{"epoch from the future", fenced(ledger.Fence{Epoch: ep + 1, Seq: 1}, nil), ledger.ErrInvalidArgument},
		{"epoch 0", fenced(ledger.Fence{Epoch: 0, Seq: 1}, nil), ledger.ErrInvalidArgument},
		{"sequence 0", fenced(ledger.Fence{Epoch: ep - 1, Seq: 0}, nil), ledger.ErrInvalidArgument},
		{"sequence past MaxFenceSeq in an earlier epoch", fenced(ledger.Fence{Epoch: ep - 1, Seq: ledger.MaxFenceSeq + 1}, nil), ledger.ErrInvalidArgument},
		{"sequence 2^64-1 in an earlier epoch", fenced(ledger.Fence{Epoch: ep - 1, Seq: 1<<64 - 1}, nil), ledger.ErrInvalidArgument},
		{"id of another fence", fenced(cur, func(x *ledger.Lease) { x.ID = ledger.MakeLeaseID(ledger.Fence{Epoch: ep, Seq: seq + 2}) }), ledger.ErrInvalidArgument},
		{"id not canonical", fenced(cur, func(x *ledger.Lease) { x.ID = "0" + x.ID }), ledger.ErrInvalidArgument},
		{"no fence", fenced(cur, func(x *ledger.Lease) { x.Fence = ledger.Fence{} }), ledger.ErrInvalidArgument},
		{"kv_tokens 2^40", fenced(cur, func(x *ledger.Lease) { x.KVTokens = ledger.MaxAmount }), ledger.ErrInvalidArgument},
		{"kv_tokens above the engine's capacity", fenced(cur, func(x *ledger.Lease) { x.KVTokens = 1001 }), ledger.ErrInvalidArgument},
		{"kv_tokens above the engine's reported capacity", fenced(cur, func(x *ledger.Lease) { x.Engine, x.KVTokens = e2, 601 }), ledger.ErrInvalidArgument},
		{"slots above the engine's", fenced(cur, func(x *ledger.Lease) { x.Slots = 5 }), ledger.ErrInvalidArgument},
		{"existing id of another holder", func() error {
			x := held
			x.Holder, x.RequestID, x.KVTokens = h2, "steal", 900
			_, err := f.l.Reassert(f.ctx, x, longTTL)
			return err
		}, ledger.ErrNotHolder},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.t = t
			f.refusedUnchanged("Reassert with "+tc.name, tc.target, tc.call)
		})
	}
	f.t = t
	// The next grant is still the one after held.
	next := f.acquire(f.req(h1, 10, 1, e1), e1)
	if want := (ledger.Fence{Epoch: ep, Seq: seq + 1}); next.Fence != want {
		t.Errorf("grant after the refused reasserts has fence %s, want %s", next.Fence, want)
	}
	f.checkTotals("after the refused reasserts and a grant")
}

// testReassertBounds reasserts at each bound: accepted.
func (s *suite) testReassertBounds(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 1000, 4), engine(e2, 1000, 4), engine(e3, 1000, 4)), noWindow)
	held := f.acquire(f.req(h1, 100, 1, e1), e1)
	f.observeTotal(e2, 0, 600, 0, time.Now(), true)
	ahead := f.reassert(f.fabricate(h1, e1, 1000, 4, ledger.Fence{Epoch: f.epoch, Seq: held.Fence.Seq + ledger.MaxReassertAhead}))
	old := f.reassert(f.fabricate(h2, e2, 600, 4, ledger.Fence{Epoch: f.epoch - 1, Seq: ledger.MaxFenceSeq}))
	f.wantReserved(e1, 1100, 5, 2)
	f.wantReserved(e2, 600, 4, 1)
	f.checkTotals("after the reasserts at the bounds")
	next := f.acquire(f.req(h1, 10, 1, e3), e3)
	if want := (ledger.Fence{Epoch: f.epoch, Seq: ahead.Fence.Seq + 1}); next.Fence != want {
		t.Errorf("grant after reasserting %s has fence %s, want %s", ahead.Fence, next.Fence, want)
	}
	if next.ID == old.ID || next.ID == ahead.ID {
		t.Errorf("grant reused lease id %s", next.ID)
	}
}

// testIDsStayUnique reasserts the furthest current-epoch lease the rule
// allows and one of an earlier epoch at MaxFenceSeq, has the sequences the
// red team used refused, then grants from many goroutines at once: no id
// repeats, every fence is later than the reasserted one, and totals equal
// the rows.
func (s *suite) testIDsStayUnique(t *testing.T) {
	f := s.setup(t, poolSpec(pool, engine(e1, 100000, 1000), engine(e2, 100000, 1000)), noWindow)
	first := f.acquire(f.req(h1, 10, 1, e1), e1)
	top := f.reassert(f.fabricate(h1, e1, 10, 1, ledger.Fence{Epoch: f.epoch, Seq: first.Fence.Seq + ledger.MaxReassertAhead}))
	old := f.reassert(f.fabricate(h2, e2, 10, 1, ledger.Fence{Epoch: f.epoch - 1, Seq: ledger.MaxFenceSeq}))
	// What made later grants reuse ids (Redis) or wrap (memory): refused.
	for _, seq := range []uint64{ledger.MaxFenceSeq, 1<<64 - 1} {
		_, err := f.l.Reassert(f.ctx, f.fabricate(h1, e1, 10, 1, ledger.Fence{Epoch: f.epoch, Seq: seq}), longTTL)
		wantErr(t, fmt.Sprintf("Reassert at sequence %d of the current epoch", seq), err, ledger.ErrInvalidArgument)
	}
	const workers, each = 16, 8
	leases := make([][]ledger.Lease, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r := ledger.AcquireRequest{
					Pool: pool, Candidates: []ledger.EngineID{e1, e2}, Tenant: tenantAll, Priority: prioStd,
					KVTokens: 10, Slots: 1, Holder: []ledger.HolderID{h1, h2}[w%2],
					RequestID: ledger.RequestID(fmt.Sprintf("burst-%d-%d", w, i)), TTL: longTTL,
				}
				g, _, err := retry(&s.backendFailures, func() (ledger.Grant, error) { return f.l.Acquire(f.ctx, r) })
				if err != nil {
					errs[w] = fmt.Errorf("Acquire(%s): %w", describe(r), err)
					return
				}
				leases[w] = append(leases[w], g.Lease)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("burst: %v", err)
		}
	}
	seen := map[ledger.LeaseID]bool{first.ID: true, top.ID: true, old.ID: true}
	for _, ls := range leases {
		for _, l := range ls {
			if seen[l.ID] {
				t.Errorf("grant reused lease id %s", l.ID)
			}
			seen[l.ID] = true
			if !top.Fence.Less(l.Fence) || l.Fence.Epoch != f.epoch {
				t.Errorf("grant fence %s, want after the reasserted %s in epoch %d", l.Fence, top.Fence, f.epoch)
			}
		}
	}
	st, listed := f.stats(), f.list(ledger.Filter{Pool: pool})
	if want := int64(3 + workers*each); st.Leases != want || int64(len(listed)) != want {
		t.Errorf("after the burst Stats Leases = %d and List has %d, want %d each", st.Leases, len(listed), want)
	}
	checkStatsMatchList(t, st, listed)
	f.checkTotals("after the burst")
}

// confirmWithin is the ConfirmWithin of the confirmation subtests: short
// enough to wait for, long enough for the steps before it on a backend
// whose leases end up to 2*MinTTL late.
func confirmWithin(b Backend) time.Duration { return 600*time.Millisecond + 3*b.MinTTL }

// reassertedAt reasserts l and returns the lease and a ledger time no
// earlier than the reassert.
func (f *fixture) reassertedAt(l ledger.Lease) (ledger.Lease, time.Time) {
	f.t.Helper()
	got := f.reassert(l)
	return got, f.ledgerNow()
}

// testUnconfirmedExpires reasserts load an observed engine does not show:
// it is flagged Unconfirmed, Renew never takes its deadline past its
// reassert time plus ConfirmWithin, it ends there, and its amounts are
// then charged as an orphan until the next observation. On an engine never
// observed a reassert is not checked.
func (s *suite) testUnconfirmedExpires(t *testing.T) {
	within := confirmWithin(s.b)
	spec := poolSpec(pool, engine(e1, 1000, 8), engine(e2, 1000, 8))
	f := s.setup(t, spec, ledger.Options{RecoveryWindow: -1, ConfirmWithin: within, ConfirmGrace: time.Millisecond})
	real := f.acquire(f.req(h1, 100, 1, e1), e1)
	f.observe(e1, 100, 1, time.Now(), true)
	lie, at := f.reassertedAt(f.fabricate(h2, e1, 800, 3, ledger.Fence{Epoch: f.epoch - 1, Seq: 77}))
	if !lie.Unconfirmed {
		t.Errorf("Reassert on an observed engine Unconfirmed = false, want true")
	}
	if lie.Deadline.After(at.Add(within)) {
		t.Errorf("Reassert deadline %s, want at most its reassert time plus ConfirmWithin %s (%s)",
			lie.Deadline.Format(time.StampMilli), within, at.Add(within).Format(time.StampMilli))
	}
	unchecked := f.reassert(f.fabricate(h2, e2, 100, 1, ledger.Fence{Epoch: f.epoch - 1, Seq: 78}))
	if unchecked.Unconfirmed {
		t.Errorf("Reassert on an engine never observed Unconfirmed = true, want false (nothing can check it)")
	}
	if d := unchecked.Deadline.Sub(at); d < longTTL-time.Second {
		t.Errorf("Reassert on an engine never observed has deadline %s after the reassert, want its TTL %s", d, longTTL)
	}
	f.checkTotals("after the reasserts")

	// The engine shows the real lease only: 1 sequence of 1+3 expected.
	f.waitPast(at)
	f.observe(e1, 100, 1, time.Now(), true)
	rn, err := f.l.Renew(f.ctx, lie.Ref(), longTTL)
	if err != nil {
		t.Fatalf("Renew(unconfirmed) error = %v, want nil", err)
	}
	if !rn.Lease.Unconfirmed || rn.Lease.Deadline.After(at.Add(within)) {
		t.Errorf("Renew(unconfirmed) = unconfirmed %v deadline %s, want unconfirmed and no later than %s",
			rn.Lease.Unconfirmed, rn.Lease.Deadline.Format(time.StampMilli), at.Add(within).Format(time.StampMilli))
	}
	if ls := f.listed(lie.ID); !ls.Unconfirmed {
		t.Errorf("List shows lease %s Unconfirmed = false, want true", lie.ID)
	}
	// It ends at its capped deadline; its amounts are then charged as an
	// orphan (the engine is observed) until the next observation.
	f.waitPast(rn.Lease.Deadline)
	f.sweepAll()
	if ls := f.list(ledger.Filter{Pool: pool, Engine: e1}); len(ls) != 1 || ls[0].ID != real.ID {
		t.Errorf("List(e1) after the unconfirmed lease's deadline = %v, want only %s", ls, real.ID)
	}
	f.wantReserved(e1, 100, 1, 1)
	f.wantOrphan(e1, 800, 3, f.ledgerNow())
	_, err = f.l.Renew(f.ctx, lie.Ref(), longTTL)
	wantErr(t, "Renew after the unconfirmed lease ended", err, ledger.ErrLeaseNotFound)
	f.observe(e1, 100, 1, time.Now(), true)
	f.wantOrphan(e1, 0, 0, time.Time{})
	f.acquire(f.req(h1, 900, 7, e1), e1) // the capacity is back
	f.checkTotals("after the unconfirmed lease ended")
}

// testConfirmed reasserts load an observed engine does show: the first
// observation arriving ConfirmGrace after the reassert that counts every
// expected sequence confirms it, and Renew then extends it as any lease.
func (s *suite) testConfirmed(t *testing.T) {
	within := confirmWithin(s.b)
	grace := 50 * time.Millisecond
	spec := poolSpec(pool, engine(e1, 1000, 8))
	f := s.setup(t, spec, ledger.Options{RecoveryWindow: -1, ConfirmWithin: within, ConfirmGrace: grace})
	real := f.acquire(f.req(h1, 100, 1, e1), e1)
	f.observe(e1, 100, 1, time.Now(), true)
	held, at := f.reassertedAt(f.fabricate(h2, e1, 300, 2, ledger.Fence{Epoch: f.epoch - 1, Seq: 5}))
	if !held.Unconfirmed {
		t.Fatalf("Reassert on an observed engine Unconfirmed = false, want true")
	}
	f.waitPast(at.Add(grace))
	f.observe(e1, 400, 2, time.Now(), true) // one short of 1+2
	if ls := f.listed(held.ID); !ls.Unconfirmed {
		t.Errorf("after an observation of 2 sequences (3 expected) lease %s Unconfirmed = false, want true", held.ID)
	}
	f.observe(e1, 400, 3, time.Now(), true)
	if ls := f.listed(held.ID); ls.Unconfirmed {
		t.Errorf("after an observation of the 3 sequences expected lease %s Unconfirmed = true, want confirmed", held.ID)
	}
	rn, err := f.l.Renew(f.ctx, held.Ref(), longTTL)
	if err != nil || rn.Lease.Unconfirmed || !rn.Lease.Deadline.After(at.Add(within)) {
		t.Errorf("Renew(confirmed) = unconfirmed %v deadline %s, %v; want confirmed and past %s",
			rn.Lease.Unconfirmed, rn.Lease.Deadline.Format(time.StampMilli), err, at.Add(within).Format(time.StampMilli))
	}
	f.release(real)
	f.release(held)
	f.checkTotals("after releasing the confirmed lease")
}

// testNotConfirmedWithinGrace: an observation arriving less than
// ConfirmGrace after a reassert does not confirm it, however much it
// shows.
func (s *suite) testNotConfirmedWithinGrace(t *testing.T) {
	spec := poolSpec(pool, engine(e1, 1000, 8))
	f := s.setup(t, spec, ledger.Options{RecoveryWindow: -1, ConfirmGrace: time.Hour})
	f.observe(e1, 0, 0, time.Now(), true)
	held := f.reassert(f.fabricate(h2, e1, 300, 2, ledger.Fence{Epoch: f.epoch - 1, Seq: 5}))
	f.observe(e1, 1000, 8, time.Now(), true)
	if ls := f.listed(held.ID); !ls.Unconfirmed {
		t.Errorf("after an observation within ConfirmGrace lease %s Unconfirmed = false, want true", held.ID)
	}
	if held.Deadline.After(f.ledgerNow().Add(ledger.DefaultConfirmWithin)) {
		t.Errorf("Reassert deadline %s, want within the default ConfirmWithin %s", held.Deadline.Format(time.StampMilli), ledger.DefaultConfirmWithin)
	}
}
