package wire

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/leasehold/leasehold/internal/gen/leaseholdv1"
	"github.com/leasehold/leasehold/internal/ledger"
)

// Every FromPB function returns an error wrapping ledger.ErrInvalidArgument
// when a timestamp or duration is malformed; a nil message decodes to the
// zero value. Every ToPB function is total.

// Timestamp encodes t; the zero time is unset.
func Timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// Duration encodes d; zero is unset.
func Duration(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// decoder decodes times and durations, keeping the first error.
type decoder struct{ err error }

func (d *decoder) time(field string, ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	if err := ts.CheckValid(); err != nil {
		d.fail(field, err)
		return time.Time{}
	}
	return ts.AsTime()
}

func (d *decoder) dur(field string, du *durationpb.Duration) time.Duration {
	if du == nil {
		return 0
	}
	if err := du.CheckValid(); err != nil {
		d.fail(field, err)
		return 0
	}
	return du.AsDuration() // saturates; the ledger's range checks refuse it
}

// decode runs one field decoder on m and returns its first error.
func decode[M, T any](m M, from func(*decoder, M) T) (T, error) {
	var d decoder
	v := from(&d, m)
	return v, d.err
}

// int narrows a wire int64 to int (IntFromPB), recording the first
// failure.
func (d *decoder) int(field string, v int64) int {
	n, err := IntFromPB(field, v)
	if err != nil {
		d.fail(field, err)
	}
	return n
}

func (d *decoder) fail(field string, err error) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s: %v", ledger.ErrInvalidArgument, field, err)
	}
}

// castStrings converts between string types (typed ids and their wire
// strings), keeping nil nil.
func castStrings[To, From ~string](xs []From) []To {
	if xs == nil {
		return nil
	}
	out := make([]To, len(xs))
	for i, x := range xs {
		out[i] = To(x)
	}
	return out
}

// PoolSpecToPB encodes a pool spec.
func PoolSpecToPB(s ledger.PoolSpec) *pb.PoolSpec {
	out := &pb.PoolSpec{
		Name: string(s.Name), RetryAfter: Duration(s.RetryAfter),
		Reserve: string(s.Reserve), GrowthHeadroom: s.GrowthHeadroom,
		Breaker: breakerSpecToPB(s.Breaker), RateWindow: Duration(s.RateWindow),
	}
	for _, e := range s.Engines {
		out.Engines = append(out.Engines, engineSpecToPB(e))
	}
	for _, t := range s.Tenants {
		out.Tenants = append(out.Tenants, tenantSpecToPB(t))
	}
	out.Priorities = prioritiesToPB(s.Priorities)
	return out
}

// PoolSpecFromPB decodes a pool spec.
func PoolSpecFromPB(m *pb.PoolSpec) (ledger.PoolSpec, error) {
	var d decoder
	s := ledger.PoolSpec{
		Name: ledger.PoolID(m.GetName()), RetryAfter: d.dur("retry_after", m.GetRetryAfter()),
		Reserve: ledger.ReserveMode(m.GetReserve()), GrowthHeadroom: m.GetGrowthHeadroom(),
		Breaker:    breakerSpecFromPB(&d, m.GetBreaker()),
		RateWindow: d.dur("rate_window", m.GetRateWindow()),
	}
	for i, e := range m.GetEngines() {
		s.Engines = append(s.Engines, engineSpecFromPB(&d, fmt.Sprintf("engines[%d]", i), e))
	}
	for _, t := range m.GetTenants() {
		s.Tenants = append(s.Tenants, tenantSpecFromPB(t))
	}
	s.Priorities = prioritiesFromPB(m.GetPriorities())
	return s, d.err
}

// breakerSpecToPB encodes a pool's breaker spec; the zero spec (the
// defaults) is unset.
func breakerSpecToPB(s ledger.BreakerSpec) *pb.BreakerSpec {
	if s == (ledger.BreakerSpec{}) {
		return nil
	}
	return &pb.BreakerSpec{Failures: int64(s.Failures), Cooldown: Duration(s.Cooldown), Probes: int64(s.Probes), Successes: int64(s.Successes)}
}

// breakerSpecFromPB decodes a pool's breaker spec; unset is the zero spec.
func breakerSpecFromPB(d *decoder, m *pb.BreakerSpec) ledger.BreakerSpec {
	return ledger.BreakerSpec{
		Failures: d.int("breaker.failures", m.GetFailures()), Cooldown: d.dur("breaker.cooldown", m.GetCooldown()),
		Probes: d.int("breaker.probes", m.GetProbes()), Successes: d.int("breaker.successes", m.GetSuccesses()),
	}
}

// breakerToPB encodes an engine's breaker.
func breakerToPB(b ledger.Breaker) *pb.Breaker {
	return &pb.Breaker{State: b.State.String(), Failures: int64(b.Failures), Successes: int64(b.Successes),
		OpenedAt: Timestamp(b.OpenedAt), Probes: int64(b.Probes), LastFailureAt: Timestamp(b.LastFailureAt)}
}

// breakerFromPB decodes an engine's breaker; unset reads closed.
func breakerFromPB(d *decoder, field string, m *pb.Breaker) ledger.Breaker {
	b := ledger.Breaker{
		Failures: d.int(field+".failures", m.GetFailures()), Successes: d.int(field+".successes", m.GetSuccesses()),
		OpenedAt: d.time(field+".opened_at", m.GetOpenedAt()), Probes: d.int(field+".probes", m.GetProbes()),
		LastFailureAt: d.time(field+".last_failure_at", m.GetLastFailureAt()),
	}
	switch st := ledger.BreakerState(m.GetState()); st {
	case "", "closed":
	case ledger.BreakerOpen, ledger.BreakerHalfOpen:
		b.State = st
	default:
		d.fail(field+".state", fmt.Errorf("%w: %.64q, want closed, open or half_open", ledger.ErrInvalidArgument, string(st)))
	}
	return b
}

func engineSpecToPB(e ledger.EngineSpec) *pb.EngineSpec {
	return &pb.EngineSpec{
		Id: string(e.ID), Url: e.URL, KvTokens: e.KVTokens, Slots: e.Slots,
		StaleAfter: Duration(e.StaleAfter), StalePolicy: string(e.StalePolicy),
	}
}

func engineSpecFromPB(d *decoder, field string, m *pb.EngineSpec) ledger.EngineSpec {
	return ledger.EngineSpec{
		ID: ledger.EngineID(m.GetId()), URL: m.GetUrl(), KVTokens: m.GetKvTokens(), Slots: m.GetSlots(),
		StaleAfter:  d.dur(field+".stale_after", m.GetStaleAfter()),
		StalePolicy: ledger.StalePolicy(m.GetStalePolicy()),
	}
}

func tenantSpecToPB(t ledger.TenantSpec) *pb.TenantSpec {
	return &pb.TenantSpec{Name: string(t.Name), KvShare: t.KVShare, SlotShare: t.SlotShare,
		TokensPerMinute: t.TokensPerMinute, RequestsPerMinute: t.RequestsPerMinute}
}

func tenantSpecFromPB(m *pb.TenantSpec) ledger.TenantSpec {
	return ledger.TenantSpec{Name: ledger.TenantID(m.GetName()), KVShare: m.GetKvShare(), SlotShare: m.GetSlotShare(),
		TokensPerMinute: m.GetTokensPerMinute(), RequestsPerMinute: m.GetRequestsPerMinute()}
}

// prioritiesToPB encodes a pool's priority classes (nil for none).
func prioritiesToPB(ps []ledger.PrioritySpec) []*pb.PrioritySpec {
	var out []*pb.PrioritySpec
	for _, p := range ps {
		out = append(out, &pb.PrioritySpec{Name: string(p.Name), MaxFill: p.MaxFill})
	}
	return out
}

// prioritiesFromPB decodes a pool's priority classes (nil for none).
func prioritiesFromPB(ms []*pb.PrioritySpec) []ledger.PrioritySpec {
	var out []ledger.PrioritySpec
	for _, m := range ms {
		out = append(out, ledger.PrioritySpec{Name: ledger.PriorityName(m.GetName()), MaxFill: m.GetMaxFill()})
	}
	return out
}

// AcquireToPB encodes an acquire request.
func AcquireToPB(r ledger.AcquireRequest) *pb.AcquireRequest {
	return &pb.AcquireRequest{
		Pool: string(r.Pool), Candidates: castStrings[string](r.Candidates), Tenant: string(r.Tenant),
		Priority: string(r.Priority), KvTokens: r.KVTokens, Slots: r.Slots, Holder: string(r.Holder),
		RequestId: string(r.RequestID), Ttl: Duration(r.TTL), Tokens: r.Tokens,
	}
}

// AcquireFromPB decodes an acquire request.
func AcquireFromPB(m *pb.AcquireRequest) (ledger.AcquireRequest, error) {
	var d decoder
	r := ledger.AcquireRequest{
		Pool: ledger.PoolID(m.GetPool()), Candidates: castStrings[ledger.EngineID](m.GetCandidates()),
		Tenant: ledger.TenantID(m.GetTenant()), Priority: ledger.PriorityName(m.GetPriority()),
		KVTokens: m.GetKvTokens(), Slots: m.GetSlots(), Holder: ledger.HolderID(m.GetHolder()),
		RequestID: ledger.RequestID(m.GetRequestId()), TTL: d.dur("ttl", m.GetTtl()), Tokens: m.GetTokens(),
	}
	return r, d.err
}

// RefToPB encodes a lease reference.
func RefToPB(r ledger.LeaseRef) *pb.LeaseRef {
	return &pb.LeaseRef{Pool: string(r.Pool), Id: string(r.ID), Holder: string(r.Holder)}
}

// RefFromPB decodes a lease reference.
func RefFromPB(m *pb.LeaseRef) ledger.LeaseRef {
	return ledger.LeaseRef{Pool: ledger.PoolID(m.GetPool()), ID: ledger.LeaseID(m.GetId()), Holder: ledger.HolderID(m.GetHolder())}
}

// LeaseToPB encodes a lease.
func LeaseToPB(l ledger.Lease) *pb.Lease {
	return &pb.Lease{
		Id: string(l.ID), Pool: string(l.Pool), Engine: string(l.Engine), Tenant: string(l.Tenant),
		Priority: string(l.Priority), KvTokens: l.KVTokens, Slots: l.Slots, Holder: string(l.Holder),
		RequestId: string(l.RequestID), Created: Timestamp(l.Created), Deadline: Timestamp(l.Deadline),
		Fence: &pb.Fence{Epoch: uint64(l.Fence.Epoch), Seq: l.Fence.Seq}, Reasserted: l.Reasserted,
		Overgrown: l.Overgrown, Unconfirmed: l.Unconfirmed, Probe: l.Probe, Tokens: l.Tokens,
	}
}

// LeaseFromPB decodes a lease.
func LeaseFromPB(m *pb.Lease) (ledger.Lease, error) {
	return decode(m, leaseFromPB)
}

func leaseFromPB(d *decoder, m *pb.Lease) ledger.Lease {
	return ledger.Lease{
		ID: ledger.LeaseID(m.GetId()), Pool: ledger.PoolID(m.GetPool()), Engine: ledger.EngineID(m.GetEngine()),
		Tenant: ledger.TenantID(m.GetTenant()), Priority: ledger.PriorityName(m.GetPriority()),
		KVTokens: m.GetKvTokens(), Slots: m.GetSlots(), Holder: ledger.HolderID(m.GetHolder()),
		RequestID: ledger.RequestID(m.GetRequestId()),
		Created:   d.time("lease.created", m.GetCreated()), Deadline: d.time("lease.deadline", m.GetDeadline()),
		Fence:      ledger.Fence{Epoch: ledger.Epoch(m.GetFence().GetEpoch()), Seq: m.GetFence().GetSeq()},
		Reasserted: m.GetReasserted(), Overgrown: m.GetOvergrown(), Unconfirmed: m.GetUnconfirmed(), Probe: m.GetProbe(),
		Tokens: m.GetTokens(),
	}
}

// LeasesFromPB decodes a list of leases.
func LeasesFromPB(ms []*pb.Lease) ([]ledger.Lease, error) {
	var d decoder
	out := make([]ledger.Lease, 0, len(ms))
	for _, m := range ms {
		out = append(out, leaseFromPB(&d, m))
	}
	return out, d.err
}

// GrantToPB encodes a grant.
func GrantToPB(g ledger.Grant) *pb.Grant {
	return &pb.Grant{Lease: LeaseToPB(g.Lease), Replayed: g.Replayed, Epoch: uint64(g.Epoch)}
}

// GrantFromPB decodes a grant.
func GrantFromPB(m *pb.Grant) (ledger.Grant, error) {
	l, err := LeaseFromPB(m.GetLease())
	return ledger.Grant{Lease: l, Replayed: m.GetReplayed(), Epoch: ledger.Epoch(m.GetEpoch())}, err
}

// RenewalToPB encodes a renewal.
func RenewalToPB(r ledger.Renewal) *pb.Renewal {
	return &pb.Renewal{Lease: LeaseToPB(r.Lease), Epoch: uint64(r.Epoch)}
}

// RenewalFromPB decodes a renewal.
func RenewalFromPB(m *pb.Renewal) (ledger.Renewal, error) {
	l, err := LeaseFromPB(m.GetLease())
	return ledger.Renewal{Lease: l, Epoch: ledger.Epoch(m.GetEpoch())}, err
}

// RejectionToPB encodes a rejection.
func RejectionToPB(r *ledger.Rejection) *pb.Rejection {
	return &pb.Rejection{Reason: string(r.Reason), Engine: string(r.Engine), RetryAfter: Duration(r.RetryAfter), Epoch: uint64(r.Epoch)}
}

// RejectionFromPB decodes a rejection; an unknown reason is an error, not a
// rejection the caller would misread.
func RejectionFromPB(m *pb.Rejection) (*ledger.Rejection, error) {
	var d decoder
	r := &ledger.Rejection{
		Reason: ledger.Reason(m.GetReason()), Engine: ledger.EngineID(m.GetEngine()),
		RetryAfter: d.dur("rejection.retry_after", m.GetRetryAfter()), Epoch: ledger.Epoch(m.GetEpoch()),
	}
	if d.err == nil && !r.Reason.Valid() {
		return nil, fmt.Errorf("unknown rejection reason %q", r.Reason)
	}
	return r, d.err
}

// SessionToPB encodes a session.
func SessionToPB(s ledger.Session) *pb.Session {
	return &pb.Session{
		Pool: string(s.Pool), Holder: string(s.Holder), Expires: Timestamp(s.Expires),
		LiveHolders: int64(s.LiveHolders), Epoch: uint64(s.Epoch), RecoveringUntil: Timestamp(s.RecoveringUntil),
		Recovered: int64(s.Recovered),
	}
}

// SessionFromPB decodes a session.
func SessionFromPB(m *pb.Session) (ledger.Session, error) {
	var d decoder
	s := ledger.Session{
		Pool: ledger.PoolID(m.GetPool()), Holder: ledger.HolderID(m.GetHolder()),
		Expires: d.time("session.expires", m.GetExpires()), LiveHolders: int(m.GetLiveHolders()),
		Epoch: ledger.Epoch(m.GetEpoch()), RecoveringUntil: d.time("session.recovering_until", m.GetRecoveringUntil()),
		Recovered: int(m.GetRecovered()),
	}
	return s, d.err
}

// UsageToPB encodes reported usage.
func UsageToPB(u ledger.Usage) *pb.Usage {
	return &pb.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, Finished: u.Finished,
		Outcome: string(u.Outcome)}
}

// UsageFromPB decodes reported usage. The outcome is taken as sent: the
// ledger's ValidateUsage refuses an unknown one (ErrInvalidArgument, the
// outcome named) before anything changes.
func UsageFromPB(m *pb.Usage) ledger.Usage {
	return ledger.Usage{PromptTokens: m.GetPromptTokens(), CompletionTokens: m.GetCompletionTokens(), Finished: m.GetFinished(),
		Outcome: ledger.Outcome(m.GetOutcome())}
}

// ObservationToPB encodes an observation.
func ObservationToPB(o ledger.Observation) *pb.Observation {
	return &pb.Observation{
		Pool: string(o.Pool), Engine: string(o.Engine), KvTokensUsed: o.KVTokensUsed,
		KvTokensTotal: o.KVTokensTotal, Running: o.Running, Waiting: o.Waiting, ObservedAt: Timestamp(o.ObservedAt),
	}
}

// ObservationFromPB decodes an observation.
func ObservationFromPB(m *pb.Observation) (ledger.Observation, error) {
	return decode(m, observationFromPB)
}

func observationFromPB(d *decoder, m *pb.Observation) ledger.Observation {
	return ledger.Observation{
		Pool: ledger.PoolID(m.GetPool()), Engine: ledger.EngineID(m.GetEngine()),
		KVTokensUsed: m.GetKvTokensUsed(), KVTokensTotal: m.GetKvTokensTotal(),
		Running: m.GetRunning(), Waiting: m.GetWaiting(), ObservedAt: d.time("observed_at", m.GetObservedAt()),
	}
}

// FilterToPB encodes a List filter.
func FilterToPB(f ledger.Filter) *pb.ListRequest {
	return &pb.ListRequest{Pool: string(f.Pool), Engine: string(f.Engine), Holder: string(f.Holder), Tenant: string(f.Tenant), Limit: int64(f.Limit)}
}

// FilterFromPB decodes a List filter.
func FilterFromPB(m *pb.ListRequest) (ledger.Filter, error) {
	limit, err := IntFromPB("filter limit", m.GetLimit())
	return ledger.Filter{
		Pool: ledger.PoolID(m.GetPool()), Engine: ledger.EngineID(m.GetEngine()),
		Holder: ledger.HolderID(m.GetHolder()), Tenant: ledger.TenantID(m.GetTenant()), Limit: limit,
	}, err
}

// DurationFromPB decodes a duration; unset is zero.
func DurationFromPB(field string, du *durationpb.Duration) (time.Duration, error) {
	var d decoder
	v := d.dur(field, du)
	return v, d.err
}

// IntFromPB narrows a wire int64 to int, refusing what int cannot hold.
func IntFromPB(field string, v int64) (int, error) {
	if int64(int(v)) != v {
		return 0, fmt.Errorf("%w: %s = %d out of range", ledger.ErrInvalidArgument, field, v)
	}
	return int(v), nil
}

// PoolStatsToPB encodes a pool's stats.
func PoolStatsToPB(s ledger.PoolStats) *pb.PoolStats {
	out := &pb.PoolStats{
		Pool: string(s.Pool), Epoch: uint64(s.Epoch), Now: Timestamp(s.Now), RecoveringUntil: Timestamp(s.RecoveringUntil),
		CapacityKv: s.CapacityKV, CapacitySlots: s.CapacitySlots, LiveHolders: int64(s.LiveHolders),
		Leases: s.Leases, Counters: s.Counters,
		Reserve: string(s.Reserve), GrowthHeadroom: s.GrowthHeadroom,
	}
	for _, e := range s.Engines {
		out.Engines = append(out.Engines, &pb.EngineStats{
			Spec: engineSpecToPB(e.Spec), Draining: e.Draining, ReservedKv: e.ReservedKV, ReservedSlots: e.ReservedSlots,
			Leases: e.Leases, CorrectionKv: e.CorrectionKV, CorrectionSlots: e.CorrectionSlots,
			LastObservation: ObservationToPB(e.LastObservation), ObservedAt: Timestamp(e.ObservedAt),
			Stale: e.Stale, Removed: e.Removed,
			OrphanKv: e.OrphanKV, OrphanSlots: e.OrphanSlots, OrphanUntil: Timestamp(e.OrphanUntil),
			Breaker: breakerToPB(e.Breaker),
		})
	}
	for _, t := range s.Tenants {
		out.Tenants = append(out.Tenants, &pb.TenantStats{
			Spec: tenantSpecToPB(t.Spec), QuotaKv: t.QuotaKV, QuotaSlots: t.QuotaSlots,
			ReservedKv: t.ReservedKV, ReservedSlots: t.ReservedSlots, Leases: t.Leases, Removed: t.Removed,
			Rates: ratesToPB(t.Rates),
		})
	}
	out.Priorities = prioritiesToPB(s.Priorities)
	return out
}

// PoolStatsFromPB decodes a pool's stats. Counters is never nil.
func PoolStatsFromPB(m *pb.PoolStats) (ledger.PoolStats, error) {
	var d decoder
	s := ledger.PoolStats{
		Pool: ledger.PoolID(m.GetPool()), Epoch: ledger.Epoch(m.GetEpoch()), Now: d.time("now", m.GetNow()),
		RecoveringUntil: d.time("recovering_until", m.GetRecoveringUntil()),
		CapacityKV:      m.GetCapacityKv(), CapacitySlots: m.GetCapacitySlots(),
		LiveHolders: int(m.GetLiveHolders()), Leases: m.GetLeases(), Counters: m.GetCounters(),
		Reserve: ledger.ReserveMode(m.GetReserve()), GrowthHeadroom: m.GetGrowthHeadroom(),
	}
	if s.Counters == nil {
		s.Counters = map[string]int64{}
	}
	for i, e := range m.GetEngines() {
		f := fmt.Sprintf("engines[%d]", i)
		s.Engines = append(s.Engines, ledger.EngineStats{
			Spec: engineSpecFromPB(&d, f, e.GetSpec()), Draining: e.GetDraining(),
			ReservedKV: e.GetReservedKv(), ReservedSlots: e.GetReservedSlots(), Leases: e.GetLeases(),
			CorrectionKV: e.GetCorrectionKv(), CorrectionSlots: e.GetCorrectionSlots(),
			LastObservation: observationFromPB(&d, e.GetLastObservation()),
			ObservedAt:      d.time(f+".observed_at", e.GetObservedAt()), Stale: e.GetStale(), Removed: e.GetRemoved(),
			OrphanKV: e.GetOrphanKv(), OrphanSlots: e.GetOrphanSlots(),
			OrphanUntil: d.time(f+".orphan_until", e.GetOrphanUntil()),
			Breaker:     breakerFromPB(&d, f+".breaker", e.GetBreaker()),
		})
	}
	for i, t := range m.GetTenants() {
		s.Tenants = append(s.Tenants, ledger.TenantStats{
			Spec: tenantSpecFromPB(t.GetSpec()), QuotaKV: t.GetQuotaKv(), QuotaSlots: t.GetQuotaSlots(),
			ReservedKV: t.GetReservedKv(), ReservedSlots: t.GetReservedSlots(), Leases: t.GetLeases(), Removed: t.GetRemoved(),
			Rates: ratesFromPB(&d, fmt.Sprintf("tenants[%d].rates", i), t.GetRates()),
		})
	}
	s.Priorities = prioritiesFromPB(m.GetPriorities())
	return s, d.err
}

// ratesToPB encodes a tenant's rate window.
func ratesToPB(bs []ledger.RateBucket) []*pb.RateBucket {
	var out []*pb.RateBucket
	for _, b := range bs {
		out = append(out, &pb.RateBucket{At: Timestamp(b.At), Tokens: b.Tokens, Requests: b.Requests})
	}
	return out
}

// ratesFromPB decodes a tenant's rate window.
func ratesFromPB(d *decoder, field string, ms []*pb.RateBucket) []ledger.RateBucket {
	var out []ledger.RateBucket
	for i, m := range ms {
		out = append(out, ledger.RateBucket{At: d.time(fmt.Sprintf("%s[%d].at", field, i), m.GetAt()),
			Tokens: m.GetTokens(), Requests: m.GetRequests()})
	}
	return out
}

// TotalsMismatchesToPB encodes CheckTotals' result.
func TotalsMismatchesToPB(ms []ledger.TotalsMismatch) []*pb.TotalsMismatch {
	out := make([]*pb.TotalsMismatch, len(ms))
	totals := func(t ledger.Totals) *pb.Totals {
		return &pb.Totals{KvTokens: t.KVTokens, Slots: t.Slots, Leases: t.Leases}
	}
	for i, m := range ms {
		out[i] = &pb.TotalsMismatch{Pool: string(m.Pool), Engine: string(m.Engine), Tenant: string(m.Tenant),
			Recorded: totals(m.Recorded), Rows: totals(m.Rows)}
	}
	return out
}

// TotalsMismatchesFromPB decodes CheckTotals' result.
func TotalsMismatchesFromPB(ms []*pb.TotalsMismatch) []ledger.TotalsMismatch {
	totals := func(t *pb.Totals) ledger.Totals {
		return ledger.Totals{KVTokens: t.GetKvTokens(), Slots: t.GetSlots(), Leases: t.GetLeases()}
	}
	var out []ledger.TotalsMismatch
	for _, m := range ms {
		out = append(out, ledger.TotalsMismatch{Pool: ledger.PoolID(m.GetPool()), Engine: ledger.EngineID(m.GetEngine()),
			Tenant: ledger.TenantID(m.GetTenant()), Recorded: totals(m.GetRecorded()), Rows: totals(m.GetRows())})
	}
	return out
}
