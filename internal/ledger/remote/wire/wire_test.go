package wire

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/leasehold/leasehold/internal/gen/leaseholdv1"
	"github.com/leasehold/leasehold/internal/ledger"
)

// overTheWire encodes err as the server does, marshals the status as gRPC
// would, and decodes it as the client does.
func overTheWire(t *testing.T, ctx context.Context, err error) error {
	t.Helper()
	st := Status(err)
	b, merr := proto.Marshal(st.Proto())
	if merr != nil {
		t.Fatalf("marshal status: %v", merr)
	}
	sp := st.Proto()
	proto.Reset(sp)
	if merr := proto.Unmarshal(b, sp); merr != nil {
		t.Fatalf("unmarshal status: %v", merr)
	}
	return Error(ctx, status.FromProto(sp).Err())
}

func TestErrorTable(t *testing.T) {
	for _, tc := range []struct {
		sentinel error
		code     codes.Code
	}{
		{ledger.ErrInvalidArgument, codes.InvalidArgument},
		{ledger.ErrUnknownPool, codes.NotFound},
		{ledger.ErrUnknownEngine, codes.NotFound},
		{ledger.ErrUnknownTenant, codes.NotFound},
		{ledger.ErrUnknownPriority, codes.NotFound},
		{ledger.ErrLeaseNotFound, codes.NotFound},
		{ledger.ErrNoSession, codes.FailedPrecondition},
		{ledger.ErrFenceExhausted, codes.FailedPrecondition},
		{ledger.ErrSessionExpired, codes.FailedPrecondition},
		{ledger.ErrNotHolder, codes.PermissionDenied},
		{ledger.ErrRejected, codes.ResourceExhausted},
		{ledger.ErrClosed, codes.Unavailable},
	} {
		t.Run(tc.sentinel.Error(), func(t *testing.T) {
			err := fmt.Errorf("acquire on gpu-0: %w", tc.sentinel)
			if got := Status(err).Code(); got != tc.code {
				t.Errorf("Status code = %s, want %s", got, tc.code)
			}
			back := overTheWire(t, context.Background(), err)
			if !errors.Is(back, tc.sentinel) || status.Code(back) != tc.code {
				t.Fatalf("round trip = %v (code %s), want errors.Is %v, code %s", back, status.Code(back), tc.sentinel, tc.code)
			}
			for _, other := range errorTable {
				if other.err != tc.sentinel && errors.Is(back, other.err) {
					t.Errorf("round trip also matches %v", other.err)
				}
			}
			if back.Error() == "" || !strings.Contains(back.Error(), "acquire on gpu-0") {
				t.Errorf("round trip text %q lost the server's context", back)
			}
		})
	}
}

func TestRejectionAsStatus(t *testing.T) {
	want := &ledger.Rejection{Reason: ledger.ReasonPriorityHeadroom, Engine: "gpu-3", RetryAfter: 1234567 * time.Nanosecond, Epoch: 1_796_000_000_123_456}
	back := overTheWire(t, context.Background(), fmt.Errorf("resize: %w", want))
	got := ledger.AsRejection(back)
	if got == nil || *got != *want || !errors.Is(back, ledger.ErrRejected) {
		t.Fatalf("rejection round trip = %v, want %+v", back, want)
	}
}

func TestOtherErrors(t *testing.T) {
	backend := overTheWire(t, context.Background(), errors.New("redis: connection refused"))
	if status.Code(backend) != codes.Unavailable {
		t.Errorf("backend failure code = %s, want Unavailable", status.Code(backend))
	}
	for _, e := range errorTable {
		if errors.Is(backend, e.err) {
			t.Errorf("backend failure matches sentinel %v; want none (outcome unknown)", e.err)
		}
	}
	if got := Status(context.Canceled).Code(); got != codes.Canceled {
		t.Errorf("Status(context.Canceled) = %s", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	if err := Error(ctx, status.Error(codes.DeadlineExceeded, "deadline")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("local deadline = %v, want errors.Is context.DeadlineExceeded", err)
	}
	passthrough := status.New(codes.NotFound, "nested")
	if got := Status(passthrough.Err()); got.Code() != codes.NotFound {
		t.Errorf("a status error from a nested remote ledger = %s, want it passed through", got.Code())
	}
	utf := Error(context.Background(), status.Error(codes.Internal, "grpc: error while marshaling: string field contains invalid UTF-8"))
	if !errors.Is(utf, ledger.ErrInvalidArgument) {
		t.Errorf("invalid UTF-8 = %v, want ErrInvalidArgument", utf)
	}
	if Status(nil) != nil || Error(context.Background(), nil) != nil {
		t.Errorf("nil error does not map to nil")
	}
}

func TestConversionsRoundTrip(t *testing.T) {
	t0 := time.UnixMilli(1_796_000_000_123).UTC()
	lease := ledger.Lease{
		ID: ledger.MakeLeaseID(ledger.Fence{Epoch: 77, Seq: 9}), Pool: "p", Engine: "e", Tenant: "t", Priority: "std",
		KVTokens: ledger.MaxAmount, Slots: 3, Holder: "h/1", RequestID: "r", Created: t0, Deadline: t0.Add(time.Minute),
		Fence: ledger.Fence{Epoch: 77, Seq: 9}, Reasserted: true,
	}
	overgrown := lease
	overgrown.Reasserted, overgrown.Overgrown = false, true
	unconfirmed := lease
	unconfirmed.Unconfirmed = true
	probe := lease
	probe.Reasserted, probe.Probe = false, true
	charged := lease
	charged.Reasserted, charged.Tokens = false, 4096
	for _, l := range []ledger.Lease{lease, overgrown, unconfirmed, probe, charged} {
		if got, err := LeaseFromPB(LeaseToPB(l)); err != nil || got != l {
			t.Errorf("lease round trip = %+v, %v; want %+v", got, err, l)
		}
	}
	mismatches := []ledger.TotalsMismatch{
		{Pool: "p", Engine: "e", Recorded: ledger.Totals{KVTokens: 10, Slots: 2, Leases: 2}, Rows: ledger.Totals{KVTokens: 5, Slots: 1, Leases: 1}},
		{Pool: "p", Tenant: "t", Recorded: ledger.Totals{KVTokens: 1}},
	}
	if got := TotalsMismatchesFromPB(TotalsMismatchesToPB(mismatches)); !reflect.DeepEqual(got, mismatches) {
		t.Errorf("totals mismatches round trip = %+v, want %+v", got, mismatches)
	}
	spec := ledger.PoolSpec{
		Name:       "p",
		Engines:    []ledger.EngineSpec{{ID: "e", URL: "http://e", KVTokens: 5, Slots: 1, StaleAfter: 3 * time.Second, StalePolicy: ledger.StaleBlock}},
		Tenants:    []ledger.TenantSpec{{Name: "t", KVShare: 0.25, SlotShare: 0.125}},
		Priorities: []ledger.PrioritySpec{{Name: "std", MaxFill: 0.7}},
		RetryAfter: 250 * time.Millisecond,
		Reserve:    ledger.ReserveElastic, GrowthHeadroom: 0.125,
	}
	worstCase := spec
	worstCase.Reserve, worstCase.GrowthHeadroom = ledger.ReserveWorstCase, 0
	breaker := spec
	breaker.Breaker = ledger.BreakerSpec{Failures: 3, Cooldown: 1500 * time.Millisecond, Probes: 2, Successes: 4}
	breakerOff := spec
	breakerOff.Breaker.Failures = -1
	rated := spec
	rated.Tenants = []ledger.TenantSpec{{Name: "t", KVShare: 1, TokensPerMinute: 20_000, RequestsPerMinute: 60}}
	rated.RateWindow = 6 * time.Second
	for _, s := range []ledger.PoolSpec{spec, worstCase, breaker, breakerOff, rated} {
		if got, err := PoolSpecFromPB(PoolSpecToPB(s)); err != nil || !reflect.DeepEqual(got, s) {
			t.Errorf("spec round trip = %+v, %v; want %+v", got, err, s)
		}
	}
	req := ledger.AcquireRequest{Pool: "p", Candidates: []ledger.EngineID{"a", "b"}, Tenant: "t", Priority: "std", KVTokens: 1, Slots: 1, Holder: "h", RequestID: "r", TTL: time.Second}
	chargedReq := req
	chargedReq.Tokens = 2048
	for _, r := range []ledger.AcquireRequest{req, chargedReq} {
		if got, err := AcquireFromPB(AcquireToPB(r)); err != nil || !reflect.DeepEqual(got, r) {
			t.Errorf("acquire round trip = %+v, %v; want %+v", got, err, r)
		}
	}
	sess := ledger.Session{Pool: "p", Holder: "h", Expires: t0, LiveHolders: 3, Epoch: 77}
	if got, err := SessionFromPB(SessionToPB(sess)); err != nil || got != sess {
		t.Errorf("session round trip = %+v, %v (zero RecoveringUntil must stay zero)", got, err)
	}
	st := ledger.PoolStats{
		Pool: "p", Epoch: 77, Now: t0, CapacityKV: 5, CapacitySlots: 1, LiveHolders: 2, Leases: 1,
		Reserve: ledger.ReserveElastic, GrowthHeadroom: 0.125,
		Engines: []ledger.EngineStats{{Spec: spec.Engines[0], Draining: true, ReservedKV: 1, ReservedSlots: 1, Leases: 1, CorrectionKV: 2,
			LastObservation: ledger.Observation{Pool: "p", Engine: "e", KVTokensUsed: 3, KVTokensTotal: 4, ObservedAt: t0}, ObservedAt: t0, Stale: true, Removed: true,
			OrphanKV: 2, OrphanSlots: 1, OrphanUntil: t0.Add(time.Second),
			Breaker: ledger.Breaker{State: ledger.BreakerHalfOpen, Successes: 1, OpenedAt: t0.Add(-time.Minute), Probes: 2,
				LastFailureAt: t0.Add(-time.Minute)}},
			{Spec: ledger.EngineSpec{ID: "f", URL: "http://f", KVTokens: 5, Slots: 1},
				Breaker: ledger.Breaker{Failures: 3, LastFailureAt: t0.Add(-time.Second)}},
			{Spec: ledger.EngineSpec{ID: "g", URL: "http://g", KVTokens: 5, Slots: 1},
				Breaker: ledger.Breaker{State: ledger.BreakerOpen, OpenedAt: t0, LastFailureAt: t0}}},
		Tenants: []ledger.TenantStats{{Spec: spec.Tenants[0], QuotaKV: 1, QuotaSlots: 1, ReservedKV: 1, Leases: 1, Removed: true},
			{Spec: rated.Tenants[0], Rates: []ledger.RateBucket{{At: t0.Add(-time.Second), Tokens: 700, Requests: 2}, {At: t0, Tokens: 0, Requests: 1}}}},
		Priorities: spec.Priorities,
		Counters: map[string]int64{ledger.CounterGrants: 4, ledger.CounterGrowths: 2, ledger.CounterOvergrowths: 1, ledger.CounterGrownKV: 30,
			ledger.BreakerCounter(ledger.TransitionOpened): 2, ledger.BreakerCounter(ledger.TransitionHalfOpen): 1,
			ledger.CompletionCounterPrefix + "95": 1, ledger.CompletionCounterPrefix + "95/t": 1},
	}
	if got, err := PoolStatsFromPB(PoolStatsToPB(st)); err != nil || !reflect.DeepEqual(got, st) {
		t.Errorf("stats round trip =\n%+v, %v; want\n%+v", got, err, st)
	}
	rej := &ledger.Rejection{Reason: ledger.ReasonTooLarge, Epoch: 77}
	if got, err := RejectionFromPB(RejectionToPB(rej)); err != nil || *got != *rej {
		t.Errorf("rejection round trip = %+v, %v", got, err)
	}
	if _, err := RejectionFromPB(&pb.Rejection{Reason: "made_up"}); err == nil {
		t.Errorf("unknown rejection reason decoded without error")
	}
	for _, o := range append([]ledger.Outcome{ledger.OutcomeNone}, ledger.Outcomes...) {
		u := ledger.Usage{PromptTokens: 3, CompletionTokens: 4, Finished: true, Outcome: o}
		if got := UsageFromPB(UsageToPB(u)); got != u {
			t.Errorf("usage round trip = %+v, want %+v", got, u)
		}
	}
	bad := &pb.PoolStats{Engines: []*pb.EngineStats{{Breaker: &pb.Breaker{State: "ajar"}}}}
	if _, err := PoolStatsFromPB(bad); !errors.Is(err, ledger.ErrInvalidArgument) || !strings.Contains(err.Error(), "engines[0].breaker.state") {
		t.Errorf("breaker state ajar = %v, want ErrInvalidArgument naming engines[0].breaker.state", err)
	}
}

func TestMalformedTimes(t *testing.T) {
	if _, err := ObservationFromPB(&pb.Observation{ObservedAt: &timestamppb.Timestamp{Nanos: -1}}); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Errorf("invalid timestamp = %v, want ErrInvalidArgument", err)
	}
	if _, err := DurationFromPB("ttl", &durationpb.Duration{Seconds: 1, Nanos: -1}); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Errorf("invalid duration = %v, want ErrInvalidArgument", err)
	}
	if _, err := IntFromPB("limit", 1<<62); err != nil {
		t.Errorf("IntFromPB(2^62) = %v on a 64-bit int", err)
	}
}
