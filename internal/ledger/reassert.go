package ledger

import (
	"fmt"
	"time"
)

// This file is the Reassert rule in one place, beside Admit: what a
// re-asserted lease may claim (its fence and its amounts), how a fencing
// sequence advances without wrapping, and how telemetry confirms what was
// re-asserted. The Go backends (memory, etcd) call these inside their
// atomic step; reassert.lua, acquire.lua and observe.lua implement the
// same rules and the conformance suite holds them to it.

// Fence bounds.
const (
	// MaxFenceSeq is the largest fencing sequence any backend issues or
	// accepts: 2^53-1, exact in float64 and in Lua's numbers, so that no
	// backend rounds, wraps or repeats a sequence. A grant that would take
	// a pool's sequence past it fails with ErrFenceExhausted.
	MaxFenceSeq uint64 = 1<<53 - 1
	// MaxReassertAhead bounds how far past the pool's current sequence a
	// lease of the current epoch may be re-asserted. Such a lease was
	// granted in this epoch and lost with a failover that kept the epoch
	// (a replica promoted before it had the grant): the failover can have
	// lost only the grants of its replication lag, far fewer than 2^20.
	MaxReassertAhead uint64 = 1 << 20
)

// NextSeq returns the sequence after seq, or ErrFenceExhausted when that
// would pass MaxFenceSeq.
func NextSeq(seq uint64) (uint64, error) {
	if seq >= MaxFenceSeq {
		return 0, fmt.Errorf("%w: the pool's fencing sequence %d reached its maximum %d", ErrFenceExhausted, seq, MaxFenceSeq)
	}
	return seq + 1, nil
}

// checkFence is the part of ValidateReassert that needs no pool: a fence
// that some pool could have issued, and the id made from it.
func checkFence(id LeaseID, f Fence) error {
	if want := MakeLeaseID(f); id != want {
		return fmt.Errorf("%w: lease id %q is not the id %q of its fence %s", ErrInvalidArgument, id, want, f)
	}
	if f.Epoch == NoEpoch {
		return fmt.Errorf("%w: fence %s has epoch 0", ErrInvalidArgument, f)
	}
	if f.Seq < 1 || f.Seq > MaxFenceSeq {
		return fmt.Errorf("%w: fence %s has sequence %d, want 1..%d", ErrInvalidArgument, f, f.Seq, MaxFenceSeq)
	}
	return nil
}

// CheckReassert is the rule Reassert applies, atomically, before it
// inserts lease l on engine e into a pool whose epoch is epoch and whose
// last issued sequence is seq (l has passed ValidateReassert, and no lease
// has its id). It returns nil when l could have been held, else an
// ErrInvalidArgument naming the bound:
//
//	l.Fence.Epoch <= epoch                          (no fence from the future)
//	l.Fence.Epoch == epoch: l.Fence.Seq <= seq + MaxReassertAhead
//	l.KVTokens <= e.CapacityKV()                    (no lease larger than its engine)
//	l.Slots    <= e.Spec.Slots
//
// A fence of an earlier epoch may carry any sequence up to MaxFenceSeq
// (checked by ValidateReassert): the ledger no longer knows how far that
// epoch got.
func CheckReassert(epoch Epoch, seq uint64, e EngineState, l Lease) error {
	f := l.Fence
	switch {
	case f.Epoch > epoch:
		return fmt.Errorf("%w: fence %s is from epoch %d, after the pool's current epoch %d", ErrInvalidArgument, f, f.Epoch, epoch)
	case f.Epoch == epoch && f.Seq > seq && f.Seq-seq > MaxReassertAhead:
		return fmt.Errorf("%w: fence %s is %d past the pool's sequence %d in the current epoch, more than %d (MaxReassertAhead)",
			ErrInvalidArgument, f, f.Seq-seq, seq, MaxReassertAhead)
	}
	if c := e.CapacityKV(); l.KVTokens > c {
		return fmt.Errorf("%w: kv_tokens = %d, more than engine %s's capacity %d", ErrInvalidArgument, l.KVTokens, e.Spec.ID, c)
	}
	if l.Slots > e.Spec.Slots {
		return fmt.Errorf("%w: slots = %d, more than engine %s's %d", ErrInvalidArgument, l.Slots, e.Spec.ID, e.Spec.Slots)
	}
	return nil
}

// Confirmation: a lease re-asserted on an engine that has been observed
// is Unconfirmed from its reassert time r. An applied observation of the
// engine that arrives (ledger clock) at a confirms every Unconfirmed lease
// of the engine with r <= a - ConfirmGrace when it shows at least as many
// sequences (running + waiting) as the slots of every lease of the engine
// ExpectedAt a. An Unconfirmed lease's deadline is capped at
// r + ConfirmWithin (CappedDeadline), so a lease the engine never shows
// ends there, and the ledger then charges it as an orphan until the next
// observation measures the engine.

// ExpectedAt reports whether an observation arriving at arrived should
// show lease l: every reasserted lease (it claims to be running already),
// and every other lease granted at least grace before.
func ExpectedAt(l Lease, arrived time.Time, grace time.Duration) bool {
	return l.Reasserted || !l.Created.After(arrived.Add(-grace))
}

// Confirms reports whether an observation confirms its engine's
// reasserted leases: it shows at least expectedSlots sequences, the sum of
// the slots of the leases ExpectedAt its arrival.
func Confirms(obs Observation, expectedSlots int64) bool {
	return obs.Running+obs.Waiting >= expectedSlots
}

// ConfirmedBy reports whether an observation arriving at arrived that
// Confirms may confirm a lease reasserted at reassertedAt: only one that
// arrived at least grace after it.
func ConfirmedBy(reassertedAt, arrived time.Time, grace time.Duration) bool {
	return !reassertedAt.After(arrived.Add(-grace))
}

// CappedDeadline returns the deadline a (re)newed lease gets: want
// (now + ttl), but for an Unconfirmed lease reasserted at reassertedAt no
// later than reassertedAt + within.
func CappedDeadline(want time.Time, unconfirmed bool, reassertedAt time.Time, within time.Duration) time.Time {
	if limit := reassertedAt.Add(within); unconfirmed && want.After(limit) {
		return limit
	}
	return want
}
