package etcd

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Records are stored as JSON. Times are ledger-clock milliseconds (Unix) so
// they round-trip exactly; observation times keep the caller's nanoseconds.

// metaRec is a pool's configuration and epoch (key meta/<pool>).
type metaRec struct {
	Epoch     uint64          `json:"epoch"`
	CreatedMs int64           `json:"created_ms"`
	Spec      ledger.PoolSpec `json:"spec"`
}

func (m *metaRec) engine(id ledger.EngineID) (ledger.EngineSpec, bool) {
	for _, e := range m.Spec.Engines {
		if e.ID == id {
			return e, true
		}
	}
	return ledger.EngineSpec{}, false
}

// engineOf returns the spec lease r's engine is held to: the configured
// one, or the last one configured (kept in er) for a removed engine.
func (m *metaRec) engineOf(id ledger.EngineID, er engineRec) (ledger.EngineSpec, bool) {
	s, ok := m.engine(id)
	return lastSpec(s, ok, er.Spec, ledger.EngineSpec{ID: id})
}

// tenantOf is engineOf for tenants.
func (m *metaRec) tenantOf(id ledger.TenantID, tr tenantRec) (ledger.TenantSpec, bool) {
	s, ok := m.tenant(id)
	return lastSpec(s, ok, tr.Spec, ledger.TenantSpec{Name: id})
}

// lastSpec returns the configured spec s when ok, else the one a removed
// row's record kept, else none (and false).
func lastSpec[S any](s S, ok bool, kept *S, none S) (S, bool) {
	switch {
	case ok:
		return s, true
	case kept != nil:
		return *kept, true
	}
	return none, false
}

func (m *metaRec) tenant(id ledger.TenantID) (ledger.TenantSpec, bool) {
	for _, t := range m.Spec.Tenants {
		if t.Name == id {
			return t, true
		}
	}
	return ledger.TenantSpec{}, false
}

func (m *metaRec) priority(n ledger.PriorityName) (ledger.PrioritySpec, bool) {
	for _, p := range m.Spec.Priorities {
		if p.Name == n {
			return p, true
		}
	}
	return ledger.PrioritySpec{}, false
}

func (m *metaRec) capacity() (kv, slots int64) {
	for _, e := range m.Spec.Engines {
		kv += e.KVTokens
		slots += e.Slots
	}
	return kv, slots
}

// obsRec is the last applied observation.
type obsRec struct {
	KVUsed  int64 `json:"kv_used"`
	KVTotal int64 `json:"kv_total"`
	Running int64 `json:"running"`
	Waiting int64 `json:"waiting"`
	AtNs    int64 `json:"at_ns"`
}

// engineRec is an engine's mutable state (key engine/<id>). It is kept after
// the engine leaves the spec so its counters survive; Configure then stores
// the engine's last spec in it (Spec) while it still has leases, so Grow
// checks them against the capacity they were granted on.
//
// The orphan charge (OrphanKV, OrphanSlots) is what leases the ledger ended
// on the observed engine still hold; the first observation arriving (ledger
// clock, ObservedAtMs) at or after OrphanUntilMs clears it. Records written
// before it existed decode with no charge.
type engineRec struct {
	Draining        bool             `json:"draining,omitempty"`
	ReservedKV      int64            `json:"reserved_kv"`
	ReservedSlots   int64            `json:"reserved_slots"`
	Leases          int64            `json:"leases"`
	CorrectionKV    int64            `json:"correction_kv,omitempty"`
	CorrectionSlots int64            `json:"correction_slots,omitempty"`
	OrphanKV        int64            `json:"orphan_kv,omitempty"`
	OrphanSlots     int64            `json:"orphan_slots,omitempty"`
	OrphanUntilMs   int64            `json:"orphan_until_ms,omitempty"`
	Obs             *obsRec          `json:"obs,omitempty"`
	ObservedAtMs    int64            `json:"observed_at_ms,omitempty"`
	Counters        map[string]int64 `json:"counters,omitempty"`
	// Spec is the last configured spec of an engine the pool's spec no
	// longer names; nil while it is configured.
	Spec *ledger.EngineSpec `json:"spec,omitempty"`
	// ReassertedMs is the ledger time of the latest Reassert that left an
	// Unconfirmed lease on the engine: while it is after ConfirmedMs,
	// observations look for leases to confirm. ConfirmedMs is the
	// reassert time up to which the engine's leases are confirmed: a
	// lease reasserted at r is Unconfirmed while r > ConfirmedMs.
	ReassertedMs int64 `json:"reasserted_ms,omitempty"`
	ConfirmedMs  int64 `json:"confirmed_ms,omitempty"`
	// Breaker is the engine's circuit breaker as last stored (read it
	// with ledger.Breaker.At); nil reads closed with every count 0, as in
	// records written before breakers. Every write starts from the record
	// read under the transaction's guards, so its transitions are atomic.
	Breaker *breakerRec `json:"breaker,omitempty"`
}

// breakerRec is ledger.Breaker with its time in ledger-clock ms.
type breakerRec struct {
	State     ledger.BreakerState `json:"state,omitempty"`
	Failures  int                 `json:"failures,omitempty"`
	Successes int                 `json:"successes,omitempty"`
	OpenedMs  int64               `json:"opened_ms,omitempty"`
	Probes    int                 `json:"probes,omitempty"`
	// FailedMs is LastFailureAt; absent (records written before it) reads
	// as no failure counted, so the next success resets the count.
	FailedMs int64 `json:"failed_ms,omitempty"`
}

// breaker returns the engine's stored breaker.
func (r *engineRec) breaker() ledger.Breaker {
	if r.Breaker == nil {
		return ledger.Breaker{}
	}
	b := r.Breaker
	return ledger.Breaker{State: b.State, Failures: b.Failures, Successes: b.Successes, OpenedAt: msTime(b.OpenedMs), Probes: b.Probes,
		LastFailureAt: msTime(b.FailedMs)}
}

// setBreaker stores b (nil when it is the zero breaker).
func (r *engineRec) setBreaker(b ledger.Breaker) {
	if b == (ledger.Breaker{}) {
		r.Breaker = nil
		return
	}
	r.Breaker = &breakerRec{State: b.State, Failures: b.Failures, Successes: b.Successes, OpenedMs: unixMs(b.OpenedAt), Probes: b.Probes,
		FailedMs: unixMs(b.LastFailureAt)}
}

// advanceBreaker reads the engine's breaker at now with spec
// (ledger.Breaker.Advance), counting the transition the reading made in
// the record's counters, and returns it for the caller to change and
// store.
func (r *engineRec) advanceBreaker(now time.Time, spec ledger.BreakerSpec) ledger.Breaker {
	b, t := r.breaker().Advance(now, spec)
	r.countTransition(t)
	return b
}

// countTransition counts a breaker transition, if any.
func (r *engineRec) countTransition(t ledger.BreakerTransition) {
	if t != ledger.TransitionNone {
		count(&r.Counters, ledger.BreakerCounter(t), 1)
	}
}

// unconfirmed reports whether lease r, on the engine of record er, is
// Unconfirmed (ledger.Lease.Unconfirmed).
func (er *engineRec) unconfirmed(r leaseRec) bool {
	return r.ReassertedMs > 0 && r.ReassertedMs > er.ConfirmedMs
}

// charged returns the correction plus the orphan charge: what telemetry
// counts against the engine, in admission and in Stats alike.
func (r *engineRec) charged() (kv, slots int64) {
	return r.CorrectionKV + r.OrphanKV, r.CorrectionSlots + r.OrphanSlots
}

func (r *engineRec) keep(s ledger.EngineSpec) bool {
	if r.Leases > 0 {
		r.Spec = &s
	}
	return r.Leases > 0
}

// tenantRec is a tenant's reservations in a pool (key tenant/<name>); like
// an engine's, it keeps the tenant's last spec once the spec drops it.
type tenantRec struct {
	ReservedKV    int64              `json:"reserved_kv"`
	ReservedSlots int64              `json:"reserved_slots"`
	Leases        int64              `json:"leases"`
	Counters      map[string]int64   `json:"counters,omitempty"`
	Spec          *ledger.TenantSpec `json:"spec,omitempty"`
	// Rates is the tenant's rate window (ledger.ChargeRate), oldest
	// first; records written before rate budgets have none.
	Rates []rateRec `json:"rates,omitempty"`
}

// rateRec is a ledger.RateBucket with its start in ledger-clock ms.
type rateRec struct {
	AtMs     int64 `json:"at_ms"`
	Tokens   int64 `json:"tokens"`
	Requests int64 `json:"requests"`
}

// rates returns the tenant's window.
func (r *tenantRec) rates() []ledger.RateBucket {
	out := make([]ledger.RateBucket, len(r.Rates))
	for i, b := range r.Rates {
		out[i] = ledger.RateBucket{At: time.UnixMilli(b.AtMs), Tokens: b.Tokens, Requests: b.Requests}
	}
	return out
}

// setRates stores the tenant's window.
func (r *tenantRec) setRates(bs []ledger.RateBucket) {
	r.Rates = make([]rateRec, len(bs))
	for i, b := range bs {
		r.Rates[i] = rateRec{AtMs: b.At.UnixMilli(), Tokens: b.Tokens, Requests: b.Requests}
	}
}

func (r *tenantRec) keep(s ledger.TenantSpec) bool {
	if r.Leases > 0 {
		r.Spec = &s
	}
	return r.Leases > 0
}

// reserve adds n leases like r (n = -1: takes one away) to an engine's and
// a tenant's reservations.
func reserve(er *engineRec, tr *tenantRec, r leaseRec, n int64) {
	er.ReservedKV += n * r.KVTokens
	er.ReservedSlots += n * r.Slots
	er.Leases += n
	tr.ReservedKV += n * r.KVTokens
	tr.ReservedSlots += n * r.Slots
	tr.Leases += n
}

func count(m *map[string]int64, name string, n int64) {
	if n == 0 {
		return
	}
	if *m == nil {
		*m = map[string]int64{}
	}
	(*m)[name] += n
}

// holderRec is a holder session (key holder/<id>): the etcd lease its live
// marker is attached to, that lease's TTL, and the expiry index entry.
type holderRec struct {
	EtcdLease int64 `json:"etcd_lease"`
	TTLSec    int64 `json:"ttl_s"`
	ExpiresMs int64 `json:"expires_ms"`
}

// windowRec is the recovery window marker's value (key recovering):
// "<until ms>" or "<until ms>,<gone ms>". UntilMs is the nominal end;
// GoneMs estimates when etcd will have deleted the marker (its etcd lease's
// whole-second TTL from the grant, plus etcd's expiry tick). The window
// itself is open exactly while the marker exists.
type windowRec struct {
	UntilMs int64
	GoneMs  int64
}

func (w windowRec) String() string {
	return strconv.FormatInt(w.UntilMs, 10) + "," + strconv.FormatInt(w.GoneMs, 10)
}

// parseWindow decodes a window marker; a value without GoneMs (written by
// an older version) has GoneMs = UntilMs.
func parseWindow(key string, b []byte) (windowRec, error) {
	until, gone, ok := strings.Cut(string(b), ",")
	var w windowRec
	var err error
	if w.UntilMs, err = parseInt(key, []byte(until)); err != nil {
		return w, err
	}
	w.GoneMs = w.UntilMs
	if ok {
		if w.GoneMs, err = parseInt(key, []byte(gone)); err != nil {
			return w, err
		}
	}
	return w, nil
}

// leaseRec is an outstanding lease (key lease/<id>).
type leaseRec struct {
	Engine     ledger.EngineID     `json:"engine"`
	Tenant     ledger.TenantID     `json:"tenant"`
	Priority   ledger.PriorityName `json:"priority"`
	KVTokens   int64               `json:"kv"`
	Slots      int64               `json:"slots"`
	Holder     ledger.HolderID     `json:"holder"`
	RequestID  ledger.RequestID    `json:"request"`
	CreatedMs  int64               `json:"created_ms"`
	DeadlineMs int64               `json:"deadline_ms"`
	Epoch      uint64              `json:"epoch"`
	Seq        uint64              `json:"seq"`
	Reasserted bool                `json:"reasserted,omitempty"`
	Overgrown  bool                `json:"overgrown,omitempty"`
	// ReassertedMs is the ledger time of the Reassert that inserted the
	// lease on an engine that had been observed; 0 for every other lease.
	// The engine record says whether it has been confirmed since.
	ReassertedMs int64 `json:"reasserted_ms,omitempty"`
	// Probe marks a probe lease on a half-open engine (ledger.Lease.Probe).
	Probe bool `json:"probe,omitempty"`
	// Tokens is what the grant charged to the tenant's rate window
	// (ledger.Lease.Tokens); 0 when nothing was.
	Tokens int64 `json:"tokens,omitempty"`
}

func (r *leaseRec) id() ledger.LeaseID {
	return ledger.MakeLeaseID(r.fence())
}

func (r *leaseRec) fence() ledger.Fence {
	return ledger.Fence{Epoch: ledger.Epoch(r.Epoch), Seq: r.Seq}
}

// leaseOn is lease with Unconfirmed read from er, the record of r's
// engine.
func (r *leaseRec) leaseOn(pool ledger.PoolID, er engineRec) ledger.Lease {
	l := r.lease(pool)
	l.Unconfirmed = er.unconfirmed(*r)
	return l
}

// lease is r as a ledger.Lease, Unconfirmed unset (leaseOn sets it).
func (r *leaseRec) lease(pool ledger.PoolID) ledger.Lease {
	return ledger.Lease{
		ID: r.id(), Pool: pool, Engine: r.Engine, Tenant: r.Tenant, Priority: r.Priority,
		KVTokens: r.KVTokens, Slots: r.Slots, Holder: r.Holder, RequestID: r.RequestID,
		Created: msTime(r.CreatedMs), Deadline: msTime(r.DeadlineMs),
		Fence: r.fence(), Reasserted: r.Reasserted, Overgrown: r.Overgrown, Probe: r.Probe, Tokens: r.Tokens,
	}
}

// unixMs is t in ms, 0 when t is zero (msTime's inverse).
func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func encode(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// Every record is plain data; Marshal cannot fail on it.
		return "{}"
	}
	return string(b)
}

func decode(key string, b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("corrupt record %s: %w", key, err)
	}
	return nil
}

func parseUint(key string, b []byte) (uint64, error) {
	n, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("corrupt counter %s: %w", key, err)
	}
	return n, nil
}

func parseInt(key string, b []byte) (int64, error) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("corrupt value %s: %w", key, err)
	}
	return n, nil
}
