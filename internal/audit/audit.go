package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// Kind names an anomaly.
type Kind string

// Anomaly kinds; see the package documentation.
const (
	KindExpiredHolder    Kind = "lease_of_expired_holder"
	KindDeadlinePassed   Kind = "deadline_passed"
	KindLeakSuspected    Kind = "leak_suspected"
	KindUnaccountedLoad  Kind = "unaccounted_load"
	KindStaleTelemetry   Kind = "stale_telemetry"
	KindCapacityMismatch Kind = "capacity_mismatch"
	// KindReassertUnconfirmed: a reasserted lease its engine's telemetry
	// has not shown (ledger.Lease.Unconfirmed).
	KindReassertUnconfirmed Kind = "reassert_unconfirmed"
	// KindTotalsMismatch: the ledger's reserved totals of an engine or
	// tenant differ from the sum of its lease rows.
	KindTotalsMismatch Kind = "totals_mismatch"
)

// Kinds lists every Kind.
var Kinds = []Kind{KindExpiredHolder, KindDeadlinePassed, KindLeakSuspected, KindUnaccountedLoad, KindStaleTelemetry,
	KindCapacityMismatch, KindReassertUnconfirmed, KindTotalsMismatch}

// Lease flags shown in a LeaseRow.
const (
	FlagReasserted     = "reasserted"
	FlagOvergrown      = "overgrown"
	FlagDeadlinePassed = "deadline_passed"
	FlagHolderExpired  = "holder_expired"
	FlagUnconfirmed    = "unconfirmed"
)

// Defaults for Options.
const (
	DefaultLeakAfter            = 2 * time.Minute
	DefaultLeakMinKV            = 1024
	DefaultLeakFraction         = 0.5
	DefaultUnaccountedTolerance = 0.02
	// DefaultMaxLeases bounds the leases Collect reads per pool.
	DefaultMaxLeases = 10000
)

// Reader is the part of ledger.Ledger Collect reads. A Reader that is also
// a ledger.TotalsChecker (every backend is) has its totals compared with
// its lease rows too.
type Reader interface {
	Pools(ctx context.Context) ([]ledger.PoolID, error)
	List(ctx context.Context, f ledger.Filter) ([]ledger.Lease, error)
	Stats(ctx context.Context, pool ledger.PoolID) (ledger.PoolStats, error)
}

// SessionKey names a holder session.
type SessionKey struct {
	Pool   ledger.PoolID
	Holder ledger.HolderID
}

// Scrape is what the reconciler knows about one engine's scrapes.
type Scrape struct {
	LastSuccess time.Time
	Failures    int
	LastError   string
}

// PoolInput is one pool as read from the ledger.
type PoolInput struct {
	Stats ledger.PoolStats
	// Leases are every outstanding lease of the pool (of the engine, when
	// the filter names one), ended ones not yet swept included.
	Leases []ledger.Lease
	// Truncated is set when Leases stopped at the read limit.
	Truncated bool
	// Mismatches are the engines and tenants whose totals differ from
	// their lease rows (ledger.TotalsChecker), in one atomic read of the
	// ledger; none when the Reader cannot check.
	Mismatches []ledger.TotalsMismatch
}

// Input is everything Build judges.
type Input struct {
	Pools []PoolInput
	// Sessions maps holder sessions to their expiry (ledger clock); holders
	// absent from it are not judged. Optional.
	Sessions map[SessionKey]time.Time
	// Scrapes are the reconciler's view per engine, for details. Optional.
	Scrapes map[telemetry.EngineKey]Scrape
}

// Options tune the anomaly thresholds. The zero value is the defaults.
type Options struct {
	// LeakAfter: leases at least this old should show in the engine's
	// reported KV usage (default 2m).
	LeakAfter time.Duration
	// LeakMinKV and LeakFraction: the KV tokens the aged leases reserve
	// beyond the engine's reported usage must exceed both this many tokens
	// and this fraction of the aged reservation (defaults 1024 and 0.5).
	LeakMinKV    int64
	LeakFraction float64
	// UnaccountedTolerance is the fraction of capacity by which reported
	// load may exceed the reservations before it is reported (default 0.02).
	UnaccountedTolerance float64
}

func (o Options) withDefaults() Options {
	if o.LeakAfter <= 0 {
		o.LeakAfter = DefaultLeakAfter
	}
	if o.LeakMinKV <= 0 {
		o.LeakMinKV = DefaultLeakMinKV
	}
	if o.LeakFraction <= 0 {
		o.LeakFraction = DefaultLeakFraction
	}
	if o.UnaccountedTolerance <= 0 {
		o.UnaccountedTolerance = DefaultUnaccountedTolerance
	}
	return o
}

// Collect reads the pools f selects (every pool when f.Pool is empty) and
// their leases. Holder and tenant filters are not applied here but in
// Build, because leak detection needs every lease of an engine. At most
// f.Limit leases (DefaultMaxLeases when 0) are read per pool, and with a
// holder or tenant filter also up to f.Limit of the leases it matches, so
// that a filtered audit of a pool past the cap still lists them. A pool that
// f names and the ledger does not know fails with ledger.ErrUnknownPool; a
// listed pool that vanishes between the reads is skipped.
func Collect(ctx context.Context, r Reader, f ledger.Filter) (Input, error) {
	pools := []ledger.PoolID{f.Pool}
	if f.Pool == "" {
		var err error
		if pools, err = r.Pools(ctx); err != nil {
			return Input{}, fmt.Errorf("audit: %w", err)
		}
	}
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultMaxLeases
	}
	var in Input
	for _, p := range pools {
		st, err := r.Stats(ctx, p)
		if errors.Is(err, ledger.ErrUnknownPool) && f.Pool == "" {
			continue
		}
		if err != nil {
			return Input{}, fmt.Errorf("audit: %w", err)
		}
		ls, err := r.List(ctx, ledger.Filter{Pool: p, Engine: f.Engine, Limit: limit})
		if err != nil {
			return Input{}, fmt.Errorf("audit: list pool %s: %w", p, err)
		}
		truncated := len(ls) >= limit
		if truncated && (f.Holder != "" || f.Tenant != "") {
			// The cap cut the pool's list: the leases the filter asks for
			// may lie past it. Read them too, so the filtered rows are
			// whole even though the engines' totals are not.
			if ls, err = addMatching(ctx, r, ls, ledger.Filter{Pool: p, Engine: f.Engine, Holder: f.Holder, Tenant: f.Tenant, Limit: limit}); err != nil {
				return Input{}, fmt.Errorf("audit: list pool %s: %w", p, err)
			}
		}
		var mismatches []ledger.TotalsMismatch
		if tc, ok := r.(ledger.TotalsChecker); ok {
			mismatches, err = tc.CheckTotals(ctx, p)
			if errors.Is(err, ledger.ErrUnknownPool) && f.Pool == "" {
				continue
			}
			if err != nil {
				return Input{}, fmt.Errorf("audit: check totals of pool %s: %w", p, err)
			}
		}
		in.Pools = append(in.Pools, PoolInput{Stats: st, Leases: ls, Truncated: truncated, Mismatches: mismatches})
	}
	return in, nil
}

// addMatching appends to ls the leases f lists that ls lacks.
func addMatching(ctx context.Context, r Reader, ls []ledger.Lease, f ledger.Filter) ([]ledger.Lease, error) {
	more, err := r.List(ctx, f)
	if err != nil {
		return nil, err
	}
	have := make(map[ledger.LeaseID]bool, len(ls))
	for _, l := range ls {
		have[l.ID] = true
	}
	for _, l := range more {
		if !have[l.ID] {
			ls = append(ls, l)
		}
	}
	return ls, nil
}

// Report is the audit of a ledger at its clock.
type Report struct {
	// Now is the latest ledger clock reading among the pools.
	Now     time.Time   `json:"now"`
	Filter  FilterJSON  `json:"filter"`
	Pools   []PoolRow   `json:"pools"`
	Leases  []LeaseRow  `json:"leases"`
	Engines []EngineRow `json:"engines"`
	// Tenants is each pool's tenants (tenants.go).
	Tenants   []TenantRow `json:"tenants"`
	Anomalies []Anomaly   `json:"anomalies"`
}

// FilterJSON is the filter a Report was built with.
type FilterJSON struct {
	Pool   ledger.PoolID   `json:"pool,omitempty"`
	Engine ledger.EngineID `json:"engine,omitempty"`
	Holder ledger.HolderID `json:"holder,omitempty"`
	Tenant ledger.TenantID `json:"tenant,omitempty"`
}

// PoolRow summarises one pool.
type PoolRow struct {
	Pool            ledger.PoolID `json:"pool"`
	Epoch           ledger.Epoch  `json:"epoch"`
	Now             time.Time     `json:"now"`
	RecoveringUntil *time.Time    `json:"recovering_until,omitempty"`
	LiveHolders     int           `json:"live_holders"`
	Leases          int64         `json:"leases"`
	Capacity        Amount        `json:"capacity"`
	// LeasesTruncated is set when not every lease of the pool was read.
	LeasesTruncated bool `json:"leases_truncated,omitempty"`
}

// Amount is KV tokens and slots.
type Amount struct {
	KVTokens int64 `json:"kv_tokens"`
	Slots    int64 `json:"slots"`
}

// LeaseRow is one outstanding lease.
type LeaseRow struct {
	ID       ledger.LeaseID      `json:"id"`
	Holder   ledger.HolderID     `json:"holder"`
	Pool     ledger.PoolID       `json:"pool"`
	Engine   ledger.EngineID     `json:"engine"`
	Tenant   ledger.TenantID     `json:"tenant"`
	Priority ledger.PriorityName `json:"priority"`
	KVTokens int64               `json:"kv_tokens"`
	Slots    int64               `json:"slots"`
	Created  time.Time           `json:"created"`
	Deadline time.Time           `json:"deadline"`
	// AgeSeconds is the ledger time since Created; TTLSeconds the time to
	// Deadline (negative once passed).
	AgeSeconds float64  `json:"age_seconds"`
	TTLSeconds float64  `json:"ttl_seconds"`
	Fence      string   `json:"fence"`
	Reasserted bool     `json:"reasserted"`
	Flags      []string `json:"flags"`
}

// Observed is an engine's last applied telemetry.
type Observed struct {
	KVTokens   int64     `json:"kv_tokens"`
	Running    int64     `json:"running"`
	Waiting    int64     `json:"waiting"`
	At         time.Time `json:"at"`
	AgeSeconds float64   `json:"age_seconds"`
}

// EngineRow is one engine's reservations against its capacity and its own
// report.
type EngineRow struct {
	Pool     ledger.PoolID   `json:"pool"`
	Engine   ledger.EngineID `json:"engine"`
	Capacity Amount          `json:"capacity"`
	Reserved Amount          `json:"reserved"`
	Leases   int64           `json:"leases"`
	// Observed is nil when the engine never reported.
	Observed *Observed `json:"observed"`
	// Drift is observed minus reserved (KV tokens; running sequences as
	// slots); nil when the engine never reported.
	Drift *Amount `json:"drift"`
	// Correction is what the ledger charges for unaccounted load; Orphan
	// is the part of it held for leases the ledger ended (until an
	// observation at or after OrphanUntil, lease.orphan_hold).
	Correction  Amount             `json:"correction"`
	Orphan      Amount             `json:"orphan"`
	OrphanUntil *time.Time         `json:"orphan_until,omitempty"`
	Stale       bool               `json:"stale"`
	StalePolicy ledger.StalePolicy `json:"stale_policy"`
	Draining    bool               `json:"draining"`
	Removed     bool               `json:"removed"`
	// Breaker is the engine's circuit breaker as the ledger reads it at
	// the pool's clock (docs/design.md, Guarantee 9).
	Breaker Breaker `json:"breaker"`
}

// Breaker is an engine's circuit breaker (ledger.Breaker).
type Breaker struct {
	// State is closed, open (no grants) or half_open (probe grants only).
	State string `json:"state"`
	// Failures counts consecutive failed dispatches while closed.
	Failures int `json:"failures"`
	// Successes counts successful probes while half-open.
	Successes int `json:"successes"`
	// Probes is the probe leases outstanding on the engine, fleet-wide.
	Probes int `json:"probes"`
	// OpenedAt is when it last opened; nil if it never did.
	OpenedAt *time.Time `json:"opened_at,omitempty"`
}

// Anomaly is one thing that looks wrong.
type Anomaly struct {
	Kind   Kind            `json:"kind"`
	Pool   ledger.PoolID   `json:"pool"`
	Engine ledger.EngineID `json:"engine"`
	Lease  ledger.LeaseID  `json:"lease"`
	Holder ledger.HolderID `json:"holder"`
	Detail string          `json:"detail"`
}

// Build judges in at each pool's ledger clock and returns the report f
// selects: leases by every field of f, engines and engine anomalies by
// pool and engine. Slices in the report are never nil.
func Build(in Input, f ledger.Filter, o Options) Report {
	o = o.withDefaults()
	r := Report{
		Filter: FilterJSON{Pool: f.Pool, Engine: f.Engine, Holder: f.Holder, Tenant: f.Tenant},
		Pools:  []PoolRow{}, Leases: []LeaseRow{}, Engines: []EngineRow{}, Tenants: []TenantRow{}, Anomalies: []Anomaly{},
	}
	engineOnly := ledger.Filter{Pool: f.Pool, Engine: f.Engine}
	for _, p := range in.Pools {
		st := p.Stats
		now := st.Now
		if now.After(r.Now) {
			r.Now = now
		}
		if f.Pool != "" && st.Pool != f.Pool {
			continue
		}
		pr := PoolRow{
			Pool: st.Pool, Epoch: st.Epoch, Now: now, LiveHolders: st.LiveHolders, Leases: st.Leases,
			Capacity: Amount{st.CapacityKV, st.CapacitySlots}, LeasesTruncated: p.Truncated,
		}
		if st.RecoveringUntil.After(now) {
			t := st.RecoveringUntil
			pr.RecoveringUntil = &t
		}
		r.Pools = append(r.Pools, pr)
		r.Tenants = append(r.Tenants, tenantRows(p, f)...)

		aged := map[ledger.EngineID]int64{} // KV of leases older than LeakAfter
		for _, l := range p.Leases {
			if !engineOnly.Match(l) {
				continue
			}
			if !now.Before(l.Created.Add(o.LeakAfter)) {
				aged[l.Engine] += l.KVTokens
			}
			if !f.Match(l) {
				continue
			}
			row := LeaseRow{
				ID: l.ID, Holder: l.Holder, Pool: l.Pool, Engine: l.Engine, Tenant: l.Tenant, Priority: l.Priority,
				KVTokens: l.KVTokens, Slots: l.Slots, Created: l.Created, Deadline: l.Deadline,
				AgeSeconds: seconds(now.Sub(l.Created)), TTLSeconds: seconds(l.Deadline.Sub(now)),
				Fence: l.Fence.String(), Reasserted: l.Reasserted, Flags: []string{},
			}
			if l.Reasserted {
				row.Flags = append(row.Flags, FlagReasserted)
			}
			if l.Overgrown {
				row.Flags = append(row.Flags, FlagOvergrown)
			}
			if l.Unconfirmed {
				row.Flags = append(row.Flags, FlagUnconfirmed)
				r.Anomalies = append(r.Anomalies, Anomaly{
					Kind: KindReassertUnconfirmed, Pool: l.Pool, Engine: l.Engine, Lease: l.ID, Holder: l.Holder,
					Detail: fmt.Sprintf("re-asserted %d KV tokens and %d slots its engine's telemetry has not shown; it ends at its deadline in %s unless an observation confirms it",
						l.KVTokens, l.Slots, dur(l.Deadline.Sub(now))),
				})
			}
			if now.After(l.Deadline) {
				row.Flags = append(row.Flags, FlagDeadlinePassed)
				r.Anomalies = append(r.Anomalies, Anomaly{
					Kind: KindDeadlinePassed, Pool: l.Pool, Engine: l.Engine, Lease: l.ID, Holder: l.Holder,
					Detail: fmt.Sprintf("deadline passed %s ago; still counted until a sweep removes it", dur(now.Sub(l.Deadline))),
				})
			}
			if exp, ok := in.Sessions[SessionKey{l.Pool, l.Holder}]; ok && now.After(exp) {
				row.Flags = append(row.Flags, FlagHolderExpired)
				r.Anomalies = append(r.Anomalies, Anomaly{
					Kind: KindExpiredHolder, Pool: l.Pool, Engine: l.Engine, Lease: l.ID, Holder: l.Holder,
					Detail: fmt.Sprintf("holder session expired %s ago; lease not yet revoked", dur(now.Sub(exp))),
				})
			}
			r.Leases = append(r.Leases, row)
		}

		for _, m := range p.Mismatches {
			if f.Engine != "" && m.Engine != f.Engine {
				continue
			}
			r.Anomalies = append(r.Anomalies, Anomaly{Kind: KindTotalsMismatch, Pool: st.Pool, Engine: m.Engine, Detail: mismatchDetail(m)})
		}
		for _, e := range st.Engines {
			if f.Engine != "" && e.Spec.ID != f.Engine {
				continue
			}
			row, an := engineRow(st, e, aged[e.Spec.ID], in.Scrapes, o)
			r.Engines = append(r.Engines, row)
			r.Anomalies = append(r.Anomalies, an...)
		}
	}
	slices.SortStableFunc(r.Anomalies, func(a, b Anomaly) int {
		return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Engine, b.Engine),
			cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Lease, b.Lease))
	})
	return r
}

func engineRow(st ledger.PoolStats, e ledger.EngineStats, agedKV int64, scrapes map[telemetry.EngineKey]Scrape, o Options) (EngineRow, []Anomaly) {
	now := st.Now
	row := EngineRow{
		Pool: st.Pool, Engine: e.Spec.ID,
		Capacity:    Amount{e.Spec.KVTokens, e.Spec.Slots},
		Reserved:    Amount{e.ReservedKV, e.ReservedSlots},
		Leases:      e.Leases,
		Correction:  Amount{e.CorrectionKV, e.CorrectionSlots},
		Orphan:      Amount{e.OrphanKV, e.OrphanSlots},
		Stale:       e.Stale,
		StalePolicy: cmp.Or(e.Spec.StalePolicy, ledger.StaleHold),
		Draining:    e.Draining,
		Removed:     e.Removed,
		Breaker: Breaker{State: e.Breaker.State.String(), Failures: e.Breaker.Failures,
			Successes: e.Breaker.Successes, Probes: e.Breaker.Probes},
	}
	if !e.Breaker.OpenedAt.IsZero() {
		opened := e.Breaker.OpenedAt
		row.Breaker.OpenedAt = &opened
	}
	if e.OrphanKV > 0 || e.OrphanSlots > 0 {
		until := e.OrphanUntil
		row.OrphanUntil = &until
	}
	var out []Anomaly
	add := func(k Kind, format string, args ...any) {
		out = append(out, Anomaly{Kind: k, Pool: st.Pool, Engine: e.Spec.ID, Detail: fmt.Sprintf(format, args...)})
	}
	observed := !e.ObservedAt.IsZero()
	if observed {
		obs := e.LastObservation
		row.Observed = &Observed{
			KVTokens: obs.KVTokensUsed, Running: obs.Running, Waiting: obs.Waiting,
			At: e.ObservedAt, AgeSeconds: seconds(now.Sub(e.ObservedAt)),
		}
		row.Drift = &Amount{obs.KVTokensUsed - e.ReservedKV, obs.Running - e.ReservedSlots}
		if total := obs.KVTokensTotal; total > 0 && total < e.Spec.KVTokens {
			add(KindCapacityMismatch, "the fleet file configures %d KV tokens; the engine reports a capacity of %d: the ledger admits against %d",
				e.Spec.KVTokens, total, total)
		}
	}
	if e.Stale {
		sc, ok := scrapes[telemetry.EngineKey{Pool: st.Pool, Engine: e.Spec.ID}]
		var why string
		switch {
		case !observed:
			why = "never observed"
		default:
			why = fmt.Sprintf("last observation %s ago (stale after %s)", dur(now.Sub(e.ObservedAt)), e.Spec.StaleAfter)
		}
		if ok && sc.LastError != "" {
			why += fmt.Sprintf("; %d failed scrapes, last: %s", sc.Failures, sc.LastError)
		}
		add(KindStaleTelemetry, "%s; policy %s", why, row.StalePolicy)
		return row, out
	}
	if !observed {
		return row, out
	}
	obs := e.LastObservation
	tolKV := max(1, int64(math.Floor(o.UnaccountedTolerance*float64(e.Spec.KVTokens))))
	tolSlots := int64(math.Floor(o.UnaccountedTolerance * float64(e.Spec.Slots)))
	if extraKV, extraSlots := obs.KVTokensUsed-e.ReservedKV, obs.Running-e.ReservedSlots; extraKV > tolKV || extraSlots > tolSlots {
		add(KindUnaccountedLoad, "engine reports %d KV tokens and %d running; the ledger has %d KV tokens and %d slots reserved (%+d KV, %+d running unaccounted)",
			obs.KVTokensUsed, obs.Running, e.ReservedKV, e.ReservedSlots, extraKV, extraSlots)
	}
	if gap := agedKV - obs.KVTokensUsed; gap > o.LeakMinKV && float64(gap) > o.LeakFraction*float64(agedKV) {
		add(KindLeakSuspected, "leases older than %s reserve %d KV tokens but the engine reports %d in use (%d unused)",
			o.LeakAfter, agedKV, obs.KVTokensUsed, gap)
	}
	return row, out
}

// mismatchDetail describes a totals mismatch: whose, what the ledger
// counts, what its rows sum to.
func mismatchDetail(m ledger.TotalsMismatch) string {
	who := "engine " + string(m.Engine)
	if m.Engine == "" {
		who = "tenant " + string(m.Tenant)
	}
	return fmt.Sprintf("%s: the ledger counts %s reserved, its lease rows sum to %s; admission reads the counts",
		who, m.Recorded, m.Rows)
}

// seconds is d in seconds, to the millisecond.
func seconds(d time.Duration) float64 { return math.Round(d.Seconds()*1000) / 1000 }

// dur formats d compactly: milliseconds below 10s, seconds above.
func dur(d time.Duration) string {
	if d < 10*time.Second && d > -10*time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
