package memory

import (
	"maps"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Rows stored in the go-memdb tables. A row is immutable once inserted:
// change a copy and insert that.

// poolRow is a pool's configuration and bookkeeping.
type poolRow struct {
	Name  ledger.PoolID
	Epoch ledger.Epoch
	// Seq is the last fencing sequence issued in Epoch.
	Seq uint64
	// RecoveringUntil ends the recovery window; zero if there was none.
	RecoveringUntil time.Time
	// ObservedSince is ledger.RecoverySince of the epoch: during the
	// window an engine observed since then may take grants.
	ObservedSince time.Time
	Priorities    []ledger.PrioritySpec
	RetryAfter    time.Duration
	// Reserve is the pool's mode, the default filled in (PoolSpec.Mode).
	Reserve ledger.ReserveMode
	// GrowthHeadroom is PoolSpec.GrowthHeadroom.
	GrowthHeadroom float64
	// Breaker is PoolSpec.Breaker, as configured (defaults not applied).
	Breaker ledger.BreakerSpec
	// RateWindow is PoolSpec.RateWindow (0: the default minute).
	RateWindow time.Duration
	// CapacityKV and CapacitySlots sum the configured (not removed) engines.
	CapacityKV    int64
	CapacitySlots int64
	// Counters are the ledger.Counter* totals and "rejections:<reason>".
	Counters map[string]int64
	// SweepFrom is a lower bound on every lease deadline and session
	// expiry in the pool: a call's sweep is skipped while the ledger clock
	// is before it (the index scans cost a tenth of a grant). Zero means
	// unknown: sweep. Every lease or session row written lowers it to its
	// own end (op.insert); a sweep that finished what was due sets it to
	// the next end its scans found.
	SweepFrom time.Time
}

// clone returns a copy that may be changed.
func (p *poolRow) clone() *poolRow {
	c := *p
	c.Counters = maps.Clone(p.Counters)
	return &c
}

// priority returns the named priority class.
func (p *poolRow) priority(name ledger.PriorityName) (ledger.PrioritySpec, bool) {
	for _, s := range p.Priorities {
		if s.Name == name {
			return s, true
		}
	}
	return ledger.PrioritySpec{}, false
}

// recovering returns the end of the recovery window if it is still open at
// now, else the zero time.
func (p *poolRow) recovering(now time.Time) time.Time {
	if now.Before(p.RecoveringUntil) {
		return p.RecoveringUntil
	}
	return time.Time{}
}

// newCounters returns every counter name at zero.
func newCounters() map[string]int64 {
	c := map[string]int64{}
	for _, n := range []string{
		ledger.CounterGrants, ledger.CounterReplays, ledger.CounterRejections,
		ledger.CounterReleases, ledger.CounterExpired, ledger.CounterRevoked,
		ledger.CounterReasserts, ledger.CounterReleasedKV,
		ledger.CounterActualPrompt, ledger.CounterActualComplete,
		ledger.CounterGrowths, ledger.CounterOvergrowths, ledger.CounterGrownKV,
	} {
		c[n] = 0
	}
	for _, r := range ledger.Reasons {
		c[rejectionCounter(r)] = 0
	}
	for _, t := range ledger.BreakerTransitions {
		c[ledger.BreakerCounter(t)] = 0
	}
	return c
}

// rejectionCounter names the per-reason rejection counter.
func rejectionCounter(r ledger.Reason) string {
	return ledger.CounterRejections + ":" + string(r)
}

// engineRow is an engine's configuration, reservations and telemetry.
type engineRow struct {
	Pool ledger.PoolID
	Spec ledger.EngineSpec
	// Removed marks an engine dropped from the spec that still has leases;
	// the row is deleted when the last one ends.
	Removed         bool
	Draining        bool
	ReservedKV      int64
	ReservedSlots   int64
	Leases          int64
	CorrectionKV    int64
	CorrectionSlots int64
	// OrphanKV and OrphanSlots are what leases the ledger ended on the
	// engine still charge, until an observation arrives at or after
	// OrphanUntil (ledger.Options.OrphanHold).
	OrphanKV, OrphanSlots int64
	OrphanUntil           time.Time
	LastObservation       ledger.Observation
	// ObservedAt is the ledger time the last applied observation arrived.
	ObservedAt time.Time
	// Unconfirmed is set by a Reassert that leaves an Unconfirmed lease on
	// the engine and cleared by the first applied observation that finds
	// none left: while it is set, observations look for leases to confirm.
	Unconfirmed bool
	// Breaker is the engine's circuit breaker as last stored (read it with
	// Breaker.At); it survives Configure like the drain flag.
	Breaker ledger.Breaker
}

func (e *engineRow) state() ledger.EngineState {
	return ledger.EngineState{
		Spec:            e.Spec,
		Draining:        e.Draining,
		ReservedKV:      e.ReservedKV,
		ReservedSlots:   e.ReservedSlots,
		CorrectionKV:    e.CorrectionKV + e.OrphanKV,
		CorrectionSlots: e.CorrectionSlots + e.OrphanSlots,
		ObservedAt:      e.ObservedAt,
		ReportedKV:      e.LastObservation.KVTokensTotal,
		Breaker:         e.Breaker,
		LastObservation: e.LastObservation,
		ArrivedAt:       e.ObservedAt,
	}
}

// stats reports the engine at now, its breaker read with the pool's
// breaker spec.
func (e *engineRow) stats(now time.Time, breaker ledger.BreakerSpec) ledger.EngineStats {
	return ledger.EngineStats{
		Spec:            e.Spec,
		Draining:        e.Draining,
		ReservedKV:      e.ReservedKV,
		ReservedSlots:   e.ReservedSlots,
		Leases:          e.Leases,
		CorrectionKV:    e.CorrectionKV + e.OrphanKV,
		CorrectionSlots: e.CorrectionSlots + e.OrphanSlots,
		LastObservation: e.LastObservation,
		ObservedAt:      e.ObservedAt,
		Stale:           e.state().Stale(now),
		Removed:         e.Removed,
		OrphanKV:        e.OrphanKV,
		OrphanSlots:     e.OrphanSlots,
		OrphanUntil:     e.OrphanUntil,
		Breaker:         e.Breaker.At(now, breaker),
	}
}

// tenantRow is a tenant's quota spec and reservations in a pool.
type tenantRow struct {
	Pool ledger.PoolID
	Spec ledger.TenantSpec
	// Removed: as for engineRow.
	Removed       bool
	ReservedKV    int64
	ReservedSlots int64
	Leases        int64
	// Rates is the tenant's rate window (ledger.ChargeRate), oldest
	// first; never modified once stored (the ledger's functions copy).
	Rates []ledger.RateBucket
}

// holderRow is a holder session. It outlives its expiry until every lease
// of the holder has been swept.
type holderRow struct {
	Pool    ledger.PoolID
	Holder  ledger.HolderID
	Expires time.Time
}

// live reports whether the session is live at now.
func (h *holderRow) live(now time.Time) bool { return now.Before(h.Expires) }

// leaseRow is an outstanding lease. ReassertedAt is the ledger time of the
// Reassert that left it Unconfirmed (zero for every other lease); it is
// cleared with the flag.
type leaseRow struct {
	ledger.Lease
	ReassertedAt time.Time
}
