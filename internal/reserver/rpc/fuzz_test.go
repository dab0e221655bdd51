package rpc_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/leasehold/leasehold/internal/gen/leaseholdv1"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/holderkey"
	"github.com/leasehold/leasehold/internal/ledger/memory"
	"github.com/leasehold/leasehold/internal/ledger/remote/wire"
	"github.com/leasehold/leasehold/internal/reserver/rpc"
)

// The gRPC fuzz target: every method's request, as bytes the fuzzer
// mutates, through the server's authentication, authorization, wire
// decoding and the ledger's validation, against a fresh memory ledger in a
// known state, from one of several callers. It holds the surface to what a
// hostile client must never get:
//
//   - a panic, or an error that is not a status the error table maps (an
//     unclassified ledger error surfaces as Unavailable with the backend
//     reason: the memory ledger has no backend to fail);
//   - any change of state by a caller that is not authenticated, by an
//     audit principal, or by a call refused before the ledger;
//   - any change to another router's session or lease by a router;
//   - reserved totals that differ from the sum of the lease rows, or a
//     grant that takes an engine past its capacity.

// fuzzCaller is who makes a fuzzed call.
type fuzzCaller int

const (
	callerNone     fuzzCaller = iota // no credentials, not loopback
	callerBadToken                   // an unknown token
	callerAudit                      // an audit token
	callerRouterA                    // router-a's own token
	callerRouterB                    // router-b's own token (owns the fixture's lease)
	callerPod                        // a router-role token (any name), as a Deployment's pods share
	callerAdmin                      // an admin token
	numCallers
)

func (c fuzzCaller) String() string {
	return [...]string{"none", "bad-token", "audit", "router-a", "router-b", "pod", "admin"}[c]
}

// Fixed holder keys (deterministic, so seeds can name the holders they
// derive) of router-a, router-b and the pod.
var (
	keyA   = mustKey("a1")
	keyB   = mustKey("b2")
	keyPod = mustKey("c3")
)

func mustKey(fill string) holderkey.Key {
	k, err := holderkey.Parse(strings.Repeat(fill, holderkey.Size))
	if err != nil {
		panic(err)
	}
	return k
}

// fuzzHolder is the holder id a router named name derives from k, with a
// fixed nonce.
func fuzzHolder(name string, k holderkey.Key) ledger.HolderID {
	return ledger.HolderID(name + "/" + k.Tag() + ".0123456789abcdef")
}

var (
	holderA   = fuzzHolder("router-a", keyA)
	holderB   = fuzzHolder("router-b", keyB)
	holderPod = fuzzHolder("pod-7f9c", keyPod)
)

// routerOf is the holder prefix of a router caller's own holders.
func (c fuzzCaller) holderPrefix() string {
	switch c {
	case callerRouterA:
		return "router-a/"
	case callerRouterB:
		return "router-b/"
	case callerPod:
		return "pod-7f9c/"
	}
	return "\x00" // no holder starts with it
}

// fuzzMethods are the service's methods, in the order the fuzzer's method
// byte picks them.
var fuzzMethods = []string{
	"Configure", "SetDraining", "KeepAlive", "Acquire", "Renew", "Resize", "Grow",
	"Release", "Reassert", "Observe", "Sweep", "Pools", "List", "Stats", "CheckTotals",
}

// stepClock is a ledger clock that advances one millisecond per reading,
// so every run of one input sees the same times.
type stepClock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Millisecond)
	return c.now
}

// fuzzEpoch is the fixture pool's epoch: the step clock's first reading.
var fuzzStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fuzzFixture is a server over a memory ledger where holderB holds one
// lease on e1, and holderA and holderPod have sessions.
type fuzzFixture struct {
	l     *memory.Ledger
	srv   *rpc.Server
	lease ledger.Lease
}

func newFuzzFixture(t testing.TB) *fuzzFixture {
	t.Helper()
	l := memory.New(ledger.Options{RecoveryWindow: -1}, &stepClock{now: fuzzStart})
	t.Cleanup(func() { _ = l.Close() })
	cfg := authConfig()
	cfg.RouterRoleTokens = []string{podToken}
	srv, err := rpc.New(l, cfg)
	if err != nil {
		t.Fatalf("rpc.New: %v", err)
	}
	ctx := context.Background()
	if _, err := l.Configure(ctx, spec); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	for _, h := range []ledger.HolderID{holderA, holderB, holderPod} {
		if _, err := l.KeepAlive(ctx, "p", h, time.Hour); err != nil {
			t.Fatalf("KeepAlive(%s): %v", h, err)
		}
	}
	g, err := l.Acquire(ctx, acquireReq(holderB, "b-1"))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return &fuzzFixture{l: l, srv: srv, lease: g.Lease}
}

// podToken is the router-role token of the fixture.
const podToken = "router-role-secret"

// callerContext is the incoming context a gRPC call from c would carry: a
// remote (non-loopback) peer, so nothing is granted for the address, the
// caller's token and, for a router, its holder key.
func callerContext(c fuzzCaller) context.Context {
	ctx := peer.NewContext(context.Background(), &peer.Peer{
		Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 40000},
	})
	tok := map[fuzzCaller]string{
		callerBadToken: "not-a-token", callerAudit: auditToken,
		callerRouterA: tokA, callerRouterB: tokB, callerPod: podToken, callerAdmin: adminToken,
	}[c]
	if tok == "" {
		return ctx
	}
	md := metadata.Pairs("authorization", "Bearer "+tok)
	if k, ok := map[fuzzCaller]holderkey.Key{callerRouterA: keyA, callerRouterB: keyB, callerPod: keyPod}[c]; ok {
		md.Set(holderkey.MetadataKey, k.Encode())
	}
	return metadata.NewIncomingContext(ctx, md)
}

// call decodes body as method's request, as the gRPC server would, and
// calls the handler. ok is false when the bytes are not a request of that
// type (gRPC refuses them before any handler).
func (f *fuzzFixture) call(ctx context.Context, method string, body []byte) (resp proto.Message, err error, ok bool) {
	s := f.srv
	dec := func(m proto.Message) bool { return proto.Unmarshal(body, m) == nil }
	switch method {
	case "Configure":
		r := &pb.ConfigureRequest{}
		if ok = dec(r); ok {
			resp, err = s.Configure(ctx, r)
		}
	case "SetDraining":
		r := &pb.SetDrainingRequest{}
		if ok = dec(r); ok {
			resp, err = s.SetDraining(ctx, r)
		}
	case "KeepAlive":
		r := &pb.KeepAliveRequest{}
		if ok = dec(r); ok {
			resp, err = s.KeepAlive(ctx, r)
		}
	case "Acquire":
		r := &pb.AcquireRequest{}
		if ok = dec(r); ok {
			resp, err = s.Acquire(ctx, r)
		}
	case "Renew":
		r := &pb.RenewRequest{}
		if ok = dec(r); ok {
			resp, err = s.Renew(ctx, r)
		}
	case "Resize":
		r := &pb.ResizeRequest{}
		if ok = dec(r); ok {
			resp, err = s.Resize(ctx, r)
		}
	case "Grow":
		r := &pb.GrowRequest{}
		if ok = dec(r); ok {
			resp, err = s.Grow(ctx, r)
		}
	case "Release":
		r := &pb.ReleaseRequest{}
		if ok = dec(r); ok {
			resp, err = s.Release(ctx, r)
		}
	case "Reassert":
		r := &pb.ReassertRequest{}
		if ok = dec(r); ok {
			resp, err = s.Reassert(ctx, r)
		}
	case "Observe":
		r := &pb.ObserveRequest{}
		if ok = dec(r); ok {
			resp, err = s.Observe(ctx, r)
		}
	case "Sweep":
		r := &pb.SweepRequest{}
		if ok = dec(r); ok {
			resp, err = s.Sweep(ctx, r)
		}
	case "Pools":
		r := &pb.PoolsRequest{}
		if ok = dec(r); ok {
			resp, err = s.Pools(ctx, r)
		}
	case "List":
		r := &pb.ListRequest{}
		if ok = dec(r); ok {
			resp, err = s.List(ctx, r)
		}
	case "Stats":
		r := &pb.StatsRequest{}
		if ok = dec(r); ok {
			resp, err = s.Stats(ctx, r)
		}
	case "CheckTotals":
		r := &pb.CheckTotalsRequest{}
		if ok = dec(r); ok {
			resp, err = s.CheckTotals(ctx, r)
		}
	default:
		panic("unknown method " + method)
	}
	return resp, err, ok
}

// fuzzSeeds are well-formed requests for each method, aimed at the
// fixture's pool, engine, holders and lease, so the fuzzer starts from
// calls that reach the ledger.
func fuzzSeeds(lease ledger.Lease) map[string][]proto.Message {
	ref := func(holder string) *pb.LeaseRef {
		return &pb.LeaseRef{Pool: "p", Id: string(lease.ID), Holder: holder}
	}
	ttl := durationpb.New(time.Minute)
	pbLease := func(id string, holder string, seq uint64, kv int64) *pb.Lease {
		return &pb.Lease{
			Id: id, Pool: "p", Engine: "e1", Tenant: "t", Priority: "std", KvTokens: kv, Slots: 1,
			Holder: holder, RequestId: "r-" + id, Fence: &pb.Fence{Epoch: uint64(lease.Fence.Epoch), Seq: seq},
		}
	}
	bigSeq := uint64(1)<<53 - 1
	bigID := string(ledger.MakeLeaseID(ledger.Fence{Epoch: lease.Fence.Epoch, Seq: bigSeq}))
	nextID := string(ledger.MakeLeaseID(ledger.Fence{Epoch: lease.Fence.Epoch, Seq: lease.Fence.Seq + 1}))
	return map[string][]proto.Message{
		"Configure": {&pb.ConfigureRequest{Spec: &pb.PoolSpec{
			Name:       "p",
			Engines:    []*pb.EngineSpec{{Id: "e1", KvTokens: 1 << 40, Slots: 1 << 20}},
			Tenants:    []*pb.TenantSpec{{Name: "t", KvShare: 1}},
			Priorities: []*pb.PrioritySpec{{Name: "std", MaxFill: 1}},
			Breaker:    &pb.BreakerSpec{Failures: 1, Cooldown: durationpb.New(time.Millisecond), Probes: 1, Successes: 1},
		}}},
		"SetDraining": {&pb.SetDrainingRequest{Pool: "p", Engine: "e1", Draining: true}},
		"KeepAlive": {
			&pb.KeepAliveRequest{Pool: "p", Holder: string(holderA), Ttl: ttl},
			&pb.KeepAliveRequest{Pool: "p", Holder: string(holderPod), Ttl: ttl},
			&pb.KeepAliveRequest{Pool: "p", Holder: string(holderB), Ttl: durationpb.New(-time.Second)},
		},
		"Acquire": {
			&pb.AcquireRequest{Pool: "p", Candidates: []string{"e1"}, Tenant: "t", Priority: "std",
				KvTokens: 100, Slots: 1, Holder: string(holderA), RequestId: "a-1", Ttl: ttl},
			&pb.AcquireRequest{Pool: "p", Candidates: []string{"e1"}, Tenant: "t", Priority: "std",
				KvTokens: 900, Slots: 7, Holder: string(holderPod), RequestId: "pod-1", Ttl: ttl},
			&pb.AcquireRequest{Pool: "p", Candidates: []string{"e1", "e1"}, Tenant: "t", Priority: "std",
				KvTokens: 1 << 40, Slots: 1 << 40, Holder: string(holderB), RequestId: "b-1", Ttl: ttl},
		},
		"Renew":  {&pb.RenewRequest{Ref: ref(string(holderB)), Ttl: ttl}, &pb.RenewRequest{Ref: ref(string(holderA)), Ttl: ttl}},
		"Resize": {&pb.ResizeRequest{Ref: ref(string(holderB)), KvTokens: 1000}, &pb.ResizeRequest{Ref: ref(string(holderA)), KvTokens: 1}},
		"Grow":   {&pb.GrowRequest{Ref: ref(string(holderB)), KvTokens: 1 << 40}, &pb.GrowRequest{Ref: ref(string(holderA)), KvTokens: 900}},
		"Release": {
			&pb.ReleaseRequest{Ref: ref(string(holderB)), Usage: &pb.Usage{PromptTokens: 1, CompletionTokens: 1 << 40, Finished: true}},
			&pb.ReleaseRequest{Ref: ref(string(holderA))},
			&pb.ReleaseRequest{Ref: ref(string(holderA)), Usage: &pb.Usage{Outcome: "connect_error"}},
			&pb.ReleaseRequest{Ref: ref(string(holderA)), Usage: &pb.Usage{Outcome: "exploded"}},
		},
		"Reassert": {
			&pb.ReassertRequest{Lease: pbLease(bigID, string(holderA), bigSeq, 1<<40), Ttl: ttl},
			&pb.ReassertRequest{Lease: pbLease(nextID, string(holderA), lease.Fence.Seq+1, 500), Ttl: ttl},
			&pb.ReassertRequest{Lease: pbLease(string(lease.ID), string(holderA), lease.Fence.Seq, 500), Ttl: ttl},
		},
		"Observe": {&pb.ObserveRequest{Observation: &pb.Observation{
			Pool: "p", Engine: "e1", KvTokensUsed: 999, KvTokensTotal: 1, Running: 9,
			ObservedAt: timestamppb.New(fuzzStart.Add(time.Hour)),
		}}},
		"Sweep":       {&pb.SweepRequest{Pool: "p", Max: 1 << 30}},
		"Pools":       {&pb.PoolsRequest{}},
		"List":        {&pb.ListRequest{Pool: "p", Holder: string(holderB), Limit: -1}},
		"Stats":       {&pb.StatsRequest{Pool: "p"}, &pb.StatsRequest{Pool: strings.Repeat("p", 300)}},
		"CheckTotals": {&pb.CheckTotalsRequest{Pool: "p"}, &pb.CheckTotalsRequest{Pool: "nope"}},
	}
}

// statusReason is the ErrorInfo reason of a status error, or "".
func statusReason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// leaseString describes one lease for "unchanged" checks.
func leaseString(l ledger.Lease) string {
	return fmt.Sprintf("%s %s %s kv=%d slots=%d deadline=%d fence=%s re=%v",
		l.ID, l.Holder, l.Engine, l.KVTokens, l.Slots, l.Deadline.UnixMilli(), l.Fence, l.Reasserted)
}

// checkTotals fails unless every engine's and tenant's reserved totals are
// the sums of the lease rows.
func checkTotals(t *testing.T, st ledger.PoolStats, leases []ledger.Lease) {
	t.Helper()
	type sum struct{ kv, slots, n int64 }
	engines, tenants := map[ledger.EngineID]sum{}, map[ledger.TenantID]sum{}
	for _, l := range leases {
		e, tn := engines[l.Engine], tenants[l.Tenant]
		engines[l.Engine] = sum{e.kv + l.KVTokens, e.slots + l.Slots, e.n + 1}
		tenants[l.Tenant] = sum{tn.kv + l.KVTokens, tn.slots + l.Slots, tn.n + 1}
	}
	for _, e := range st.Engines {
		got, want := sum{e.ReservedKV, e.ReservedSlots, e.Leases}, engines[e.Spec.ID]
		if got != want {
			t.Errorf("engine %s totals kv/slots/leases = %v, lease rows sum to %v", e.Spec.ID, got, want)
		}
	}
	for _, tn := range st.Tenants {
		got, want := sum{tn.ReservedKV, tn.ReservedSlots, tn.Leases}, tenants[tn.Spec.Name]
		if got != want {
			t.Errorf("tenant %s totals kv/slots/leases = %v, lease rows sum to %v", tn.Spec.Name, got, want)
		}
	}
}

// fuzzRecord is one call of a fuzzed sequence: method and caller bytes, a
// big-endian uint16 length, then that many bytes of request (fewer when
// the input ends).
func encodeRecord(method, caller uint8, body []byte) []byte {
	n := min(len(body), 0xffff)
	return append([]byte{method, caller, byte(n >> 8), byte(n)}, body[:n]...)
}

// maxFuzzCalls bounds the calls one input makes.
const maxFuzzCalls = 6

// FuzzLedgerService: see the comment at the top of this file. An input is
// up to maxFuzzCalls records (encodeRecord); each call is checked on its
// own, then two fresh grants probe what the calls left behind: they must
// get ids of their own, overwrite nothing, and keep the totals equal to the
// rows.
func FuzzLedgerService(f *testing.F) {
	seedFixture := newFuzzFixture(f)
	seeds := fuzzSeeds(seedFixture.lease)
	for i, m := range fuzzMethods {
		for _, req := range seeds[m] {
			body, err := proto.Marshal(req)
			if err != nil {
				f.Fatalf("marshal %s seed: %v", m, err)
			}
			for c := range numCallers {
				f.Add(encodeRecord(uint8(i), uint8(c), body))
			}
		}
	}
	// The red team's sequences: a router re-asserting a lease of its own
	// with a fence no grant could have had, then granting on.
	reassert := slicesIndex(fuzzMethods, "Reassert")
	for _, seq := range []uint64{1<<53 - 1, 1<<64 - 1} {
		id := string(ledger.MakeLeaseID(ledger.Fence{Epoch: seedFixture.lease.Fence.Epoch, Seq: seq}))
		body, _ := proto.Marshal(&pb.ReassertRequest{Ttl: durationpb.New(time.Minute), Lease: &pb.Lease{
			Id: id, Pool: "p", Engine: "e1", Tenant: "t", Priority: "std", KvTokens: 100, Slots: 1,
			Holder: string(holderA), RequestId: "lie", Fence: &pb.Fence{Epoch: uint64(seedFixture.lease.Fence.Epoch), Seq: seq},
		}})
		f.Add(encodeRecord(uint8(reassert), uint8(callerRouterA), body))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		fx := newFuzzFixture(t)
		for n := 0; len(data) >= 4 && n < maxFuzzCalls; n++ {
			method := fuzzMethods[int(data[0])%len(fuzzMethods)]
			caller := fuzzCaller(int(data[1]) % int(numCallers))
			size := min(int(data[2])<<8|int(data[3]), len(data)-4)
			body := data[4 : 4+size]
			data = data[4+size:]
			fx.checkCall(t, method, caller, body)
		}
		fx.probe(t)
	})
}

func slicesIndex(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// checkCall makes one call and checks what it did.
func (fx *fuzzFixture) checkCall(t *testing.T, method string, caller fuzzCaller, body []byte) {
	t.Helper()
	before := state(t, fx.l)
	ctx := context.Background()
	leasesBefore, err := fx.l.List(ctx, ledger.Filter{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	othersBefore := leasesNotOf(leasesBefore, caller)

	_, err, ok := fx.call(callerContext(caller), method, body)
	if !ok {
		return
	}
	st, serr := fx.l.Stats(ctx, "p")
	leases, lerr := fx.l.List(ctx, ledger.Filter{})
	if serr != nil || lerr != nil {
		t.Fatalf("after %s by %s: Stats: %v, List: %v", method, caller, serr, lerr)
	}
	after := state(t, fx.l)

	// The error, if any, is one the table maps.
	if err != nil {
		s, isStatus := status.FromError(err)
		switch {
		case !isStatus:
			t.Fatalf("%s by %s: error %v is not a gRPC status", method, caller, err)
		case s.Code() == codes.Unknown, s.Code() == codes.Internal:
			t.Fatalf("%s by %s: status %s: %v", method, caller, s.Code(), err)
		case s.Code() == codes.Unavailable && statusReason(err) == wire.ReasonBackend:
			t.Fatalf("%s by %s: an unclassified ledger error reached the client: %v", method, caller, err)
		}
	}
	refused := status.Code(err) == codes.Unauthenticated ||
		(status.Code(err) == codes.PermissionDenied && statusReason(err) != "NOT_HOLDER")

	// Who may change nothing.
	switch {
	case caller == callerNone, caller == callerBadToken:
		if status.Code(err) != codes.Unauthenticated && status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s by %s: err = %v, want Unauthenticated or PermissionDenied", method, caller, err)
		}
		fallthrough
	case caller == callerAudit, refused:
		if after != before {
			t.Errorf("%s by %s (err %v) changed the ledger:\n got %s\nwant %s", method, caller, err, after, before)
		}
	}

	// A router never touches another router's leases.
	if caller == callerRouterA || caller == callerRouterB || caller == callerPod {
		if got, want := leasesNotOf(leases, caller), othersBefore; got != want {
			t.Errorf("%s by %s (err %v) changed another router's leases:\n got %s\nwant %s", method, caller, err, got, want)
		}
	}

	checkRows(t, st, leases)
	fx.checkStoreTotals(t)
	if err == nil && (method == "Acquire" || method == "Resize") {
		for _, e := range st.Engines {
			if e.ReservedKV+e.CorrectionKV > e.Spec.KVTokens || e.ReservedSlots+e.CorrectionSlots > e.Spec.Slots {
				t.Errorf("%s by %s left engine %s at kv %d+%d / %d, slots %d+%d / %d", method, caller, e.Spec.ID,
					e.ReservedKV, e.CorrectionKV, e.Spec.KVTokens, e.ReservedSlots, e.CorrectionSlots, e.Spec.Slots)
			}
		}
	}
}

// leasesNotOf describes the leases whose holder is not caller's router.
func leasesNotOf(leases []ledger.Lease, caller fuzzCaller) string {
	var b strings.Builder
	for _, l := range leases {
		if !strings.HasPrefix(string(l.Holder), caller.holderPrefix()) {
			b.WriteString(leaseString(l))
			b.WriteString("; ")
		}
	}
	return b.String()
}

// checkRows fails unless the totals are the rows' sums and no id repeats.
func checkRows(t *testing.T, st ledger.PoolStats, leases []ledger.Lease) {
	t.Helper()
	checkTotals(t, st, leases)
	seen := map[ledger.LeaseID]bool{}
	for _, l := range leases {
		if seen[l.ID] {
			t.Errorf("lease id %s listed twice", l.ID)
		}
		seen[l.ID] = true
	}
}

// probe grants twice more, as a router would after the fuzzed calls, and
// checks that each grant is a lease of its own that overwrote nothing.
func (fx *fuzzFixture) probe(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if _, err := fx.l.KeepAlive(ctx, "p", "probe/1", time.Hour); err != nil {
		return // the fuzzed calls may have reconfigured the pool away
	}
	before, err := fx.l.List(ctx, ledger.Filter{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for i := range 2 {
		req := acquireReq("probe/1", fmt.Sprintf("probe-%d", i))
		req.KVTokens, req.Slots = 1, 1
		g, err := fx.l.Acquire(ctx, req)
		if err != nil {
			continue // refused for capacity or state: nothing to check
		}
		for _, l := range before {
			if l.ID == g.Lease.ID {
				t.Errorf("probe grant %d got id %s, already held by %s", i, g.Lease.ID, l.Holder)
			}
		}
	}
	after, err := fx.l.List(ctx, ledger.Filter{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	kept := map[ledger.LeaseID]string{}
	for _, l := range after {
		kept[l.ID] = leaseString(l)
	}
	for _, l := range before {
		if got := kept[l.ID]; got == "" || !strings.HasPrefix(got, string(l.ID)+" "+string(l.Holder)) {
			t.Errorf("lease %s of %s is gone or changed after two probe grants: now %q", l.ID, l.Holder, got)
		}
	}
	st, err := fx.l.Stats(ctx, "p")
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	checkRows(t, st, after)
	fx.checkStoreTotals(t)
}

// checkStoreTotals fails when the ledger's own atomic check finds totals
// that differ from its rows.
func (fx *fuzzFixture) checkStoreTotals(t *testing.T) {
	t.Helper()
	m, err := fx.l.CheckTotals(context.Background(), "p")
	if err != nil {
		t.Fatalf("CheckTotals: %v", err)
	}
	if len(m) > 0 {
		t.Errorf("CheckTotals found %d mismatches: %+v", len(m), m)
	}
}
