package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// recorder is a Store that records the calls that reach it and answers
// with err (and, for List, leases[pool]). It tests the checked layer
// itself; the real stores run under it in their conformance tests.
type recorder struct {
	calls  []string
	err    error
	pools  []PoolID
	leases map[PoolID][]Lease
	limits []int // f.Limit of each List call
}

func (r *recorder) record(op string, err error) error {
	r.calls = append(r.calls, op)
	if err != nil {
		return err
	}
	return r.err
}

func (r *recorder) Configure(context.Context, PoolSpec) (Epoch, error) {
	return 7, r.record("Configure", nil)
}
func (r *recorder) SetDraining(context.Context, PoolID, EngineID, bool) error {
	return r.record("SetDraining", nil)
}
func (r *recorder) KeepAlive(context.Context, PoolID, HolderID, time.Duration) (Session, error) {
	return Session{}, r.record("KeepAlive", nil)
}
func (r *recorder) Acquire(context.Context, AcquireRequest) (Grant, error) {
	return Grant{Epoch: 7}, r.record("Acquire", nil)
}
func (r *recorder) Renew(context.Context, LeaseRef, time.Duration) (Renewal, error) {
	return Renewal{}, r.record("Renew", nil)
}
func (r *recorder) Resize(context.Context, LeaseRef, int64) (Renewal, error) {
	return Renewal{}, r.record("Resize", nil)
}
func (r *recorder) Grow(context.Context, LeaseRef, int64) (Renewal, error) {
	return Renewal{}, r.record("Grow", nil)
}
func (r *recorder) Release(context.Context, LeaseRef, Usage) (Released, error) {
	return Released{}, r.record("Release", nil)
}
func (r *recorder) Reassert(context.Context, Lease, time.Duration) (Grant, error) {
	return Grant{}, r.record("Reassert", nil)
}
func (r *recorder) Observe(context.Context, Observation) (Observed, error) {
	return Observed{}, r.record("Observe", nil)
}
func (r *recorder) Sweep(context.Context, PoolID, int) (Swept, error) {
	return Swept{}, r.record("Sweep", nil)
}
func (r *recorder) Pools(context.Context) ([]PoolID, error) {
	return r.pools, r.record("Pools", nil)
}
func (r *recorder) List(_ context.Context, f Filter) ([]Lease, error) {
	r.limits = append(r.limits, f.Limit)
	ls := r.leases[f.Pool]
	if f.Limit > 0 && len(ls) > f.Limit {
		ls = ls[:f.Limit]
	}
	return ls, r.record("List "+string(f.Pool), nil)
}
func (r *recorder) Stats(context.Context, PoolID) (PoolStats, error) {
	return PoolStats{}, r.record("Stats", nil)
}
func (r *recorder) Close() error { return r.record("Close", nil) }

var _ Store = (*recorder)(nil)

// checkedCall is one call of every Ledger method, valid or not.
type checkedCall struct {
	name string
	// prefix is how a failure of the call starts.
	prefix string
	call   func(ctx context.Context, l Ledger) error
}

// checkedCalls returns a call of each method; with bad, each has one bad
// argument (named by field in its error).
func checkedCalls(bad bool) []checkedCall {
	pool, holder := PoolID("p"), HolderID("h")
	ref := LeaseRef{Pool: pool, ID: MakeLeaseID(Fence{Epoch: 1, Seq: 2}), Holder: holder}
	lease := Lease{ID: ref.ID, Fence: Fence{Epoch: 1, Seq: 2}, Pool: pool, Engine: "e", Tenant: "t", Priority: "i", KVTokens: 1, Slots: 1, Holder: holder, RequestID: "r"}
	req := AcquireRequest{Pool: pool, Candidates: []EngineID{"e"}, Tenant: "t", Priority: "i", KVTokens: 1, Slots: 1, Holder: holder, RequestID: "r", TTL: time.Second}
	spec := PoolSpec{Name: pool, Engines: []EngineSpec{{ID: "e", KVTokens: 10, Slots: 1}}}
	obs := Observation{Pool: pool, Engine: "e", ObservedAt: time.Unix(1, 0)}
	ttl, kv, max, usage, filter := time.Second, int64(5), 0, Usage{}, Filter{Pool: pool}
	if bad {
		ref.ID, lease.KVTokens, req.KVTokens, spec.Engines = "bad", 0, 0, nil
		obs.ObservedAt, ttl, kv, max, usage, filter = time.Time{}, 0, 0, -1, Usage{PromptTokens: -1}, Filter{Limit: -1}
		pool = ""
	}
	return []checkedCall{
		{"Configure", "x configure pool p: ", func(ctx context.Context, l Ledger) error { _, err := l.Configure(ctx, spec); return err }},
		{"SetDraining", "x set draining=true on engine e in pool " + string(pool) + ": ", func(ctx context.Context, l Ledger) error { return l.SetDraining(ctx, pool, "e", true) }},
		{"KeepAlive", "x keepalive of holder h in pool p: ", func(ctx context.Context, l Ledger) error { _, err := l.KeepAlive(ctx, "p", holder, ttl); return err }},
		{"Acquire", "x acquire r for holder h in pool p: ", func(ctx context.Context, l Ledger) error { _, err := l.Acquire(ctx, req); return err }},
		{"Renew", "x renew lease " + string(ref.ID) + " in pool p: ", func(ctx context.Context, l Ledger) error { _, err := l.Renew(ctx, ref, ttl); return err }},
		{"Resize", "x resize lease " + string(ref.ID) + " in pool p to " + fmt.Sprint(kv) + " KV tokens: ", func(ctx context.Context, l Ledger) error { _, err := l.Resize(ctx, ref, kv); return err }},
		{"Grow", "x grow lease " + string(ref.ID) + " in pool p to " + fmt.Sprint(kv) + " KV tokens: ", func(ctx context.Context, l Ledger) error { _, err := l.Grow(ctx, ref, kv); return err }},
		{"Release", "x release lease 1-2 in pool p: ", func(ctx context.Context, l Ledger) error { _, err := l.Release(ctx, lease.Ref(), usage); return err }},
		{"Reassert", "x reassert lease 1-2 in pool p: ", func(ctx context.Context, l Ledger) error { _, err := l.Reassert(ctx, lease, time.Second); return err }},
		{"Observe", "x observe engine e in pool p: ", func(ctx context.Context, l Ledger) error { _, err := l.Observe(ctx, obs); return err }},
		{"Sweep", "x sweep pool p: ", func(ctx context.Context, l Ledger) error { _, err := l.Sweep(ctx, "p", max); return err }},
		{"List", "x list leases: ", func(ctx context.Context, l Ledger) error { _, err := l.List(ctx, filter); return err }},
		{"Stats", "x stats of pool " + string(pool) + ": ", func(ctx context.Context, l Ledger) error { _, err := l.Stats(ctx, pool); return err }},
	}
}

func TestCheckedRefusesBadArguments(t *testing.T) {
	for _, tc := range checkedCalls(true) {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{}
			err := tc.call(t.Context(), Checked("x", r))
			if !errors.Is(err, ErrInvalidArgument) || !strings.HasPrefix(err.Error(), tc.prefix) {
				t.Errorf("error = %v, want ErrInvalidArgument starting %q", err, tc.prefix)
			}
			if len(r.calls) != 0 {
				t.Errorf("store got %v, want no call", r.calls)
			}
		})
	}
}

func TestCheckedPassesValidCalls(t *testing.T) {
	for _, tc := range checkedCalls(false) {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{}
			if err := tc.call(t.Context(), Checked("x", r)); err != nil {
				t.Fatalf("error = %v, want nil", err)
			}
			want := tc.name
			if tc.name == "List" {
				want = "List p"
			}
			if !slices.Equal(r.calls, []string{want}) {
				t.Errorf("store got %v, want [%s]", r.calls, want)
			}
		})
	}
}

func TestCheckedWrapsStoreErrorsOnce(t *testing.T) {
	rej := &Rejection{Reason: ReasonEngineKV, Engine: "e", RetryAfter: time.Second, Epoch: 7}
	for _, cause := range []error{
		rej,
		fmt.Errorf("candidate e: %w", ErrUnknownEngine),
		ErrLeaseNotFound,
		errors.New("connection refused"),
	} {
		for _, tc := range checkedCalls(false) {
			t.Run(tc.name+"/"+cause.Error(), func(t *testing.T) {
				err := tc.call(t.Context(), Checked("x", &recorder{err: cause}))
				if want := tc.prefix + cause.Error(); err == nil || err.Error() != want {
					t.Errorf("error = %v, want %q", err, want)
				}
				if !errors.Is(err, cause) {
					t.Errorf("errors.Is(%v, %v) = false", err, cause)
				}
				if cause == rej && AsRejection(err) != rej {
					t.Errorf("AsRejection(%v) = %v, want the store's rejection", err, AsRejection(err))
				}
			})
		}
	}
}

func TestCheckedClose(t *testing.T) {
	r := &recorder{}
	l := Checked("x", r)
	for i := range 2 {
		if err := l.Close(); err != nil {
			t.Fatalf("Close #%d = %v, want nil", i+1, err)
		}
	}
	if !slices.Equal(r.calls, []string{"Close"}) {
		t.Fatalf("store got %v after two Closes, want [Close]", r.calls)
	}
	calls := checkedCalls(false)
	calls = append(calls, checkedCall{"Pools", "x list pools: ", func(ctx context.Context, l Ledger) error { _, err := l.Pools(ctx); return err }})
	for _, tc := range calls {
		err := tc.call(t.Context(), l)
		if !errors.Is(err, ErrClosed) || err.Error() != tc.prefix+ErrClosed.Error() {
			t.Errorf("%s after Close: error = %v, want %q", tc.name, err, tc.prefix+ErrClosed.Error())
		}
	}
	if len(r.calls) != 1 {
		t.Errorf("store got %v after Close, want no call", r.calls[1:])
	}

	failing := Checked("x", &recorder{err: errors.New("boom")})
	if err := failing.Close(); err == nil || err.Error() != "x close: boom" {
		t.Errorf("Close of a failing store = %v, want %q", err, "x close: boom")
	}
}

func TestCheckedListsAllPools(t *testing.T) {
	lease := func(pool PoolID, seq uint64) Lease {
		return Lease{Pool: pool, ID: MakeLeaseID(Fence{Epoch: 1, Seq: seq}), Fence: Fence{Epoch: 1, Seq: seq}}
	}
	leases := map[PoolID][]Lease{
		"a": {lease("a", 1), lease("a", 2)},
		"b": nil,
		"c": {lease("c", 1), lease("c", 5)},
		"d": {lease("d", 3)},
	}
	for _, tc := range []struct {
		name   string
		limit  int
		want   []string // pool:seq
		calls  []string
		limits []int
	}{
		{"no limit", 0, []string{"a:1", "a:2", "c:1", "c:5", "d:3"},
			[]string{"Pools", "List a", "List b", "List c", "List d"}, []int{0, 0, 0, 0}},
		{"limit inside a pool", 3, []string{"a:1", "a:2", "c:1"},
			[]string{"Pools", "List a", "List b", "List c"}, []int{3, 1, 1}},
		{"limit at a pool's end", 2, []string{"a:1", "a:2"},
			[]string{"Pools", "List a"}, []int{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{pools: []PoolID{"a", "b", "c", "d"}, leases: leases}
			got, err := Checked("x", r).List(t.Context(), Filter{Limit: tc.limit})
			if err != nil {
				t.Fatalf("List error = %v", err)
			}
			var ids []string
			for _, l := range got {
				ids = append(ids, fmt.Sprintf("%s:%d", l.Pool, l.Fence.Seq))
			}
			if !slices.Equal(ids, tc.want) {
				t.Errorf("List = %v, want %v", ids, tc.want)
			}
			if !slices.Equal(r.calls, tc.calls) || !slices.Equal(r.limits, tc.limits) {
				t.Errorf("store got %v with limits %v, want %v with %v", r.calls, r.limits, tc.calls, tc.limits)
			}
		})
	}

	r := &recorder{pools: []PoolID{"a"}, err: ErrUnknownPool}
	_, err := Checked("x", r).List(t.Context(), Filter{})
	if want := "x list leases: " + ErrUnknownPool.Error(); err == nil || err.Error() != want {
		t.Errorf("List with a failing Pools = %v, want %q", err, want)
	}
}

func TestCheckedDoesNotWrapTwice(t *testing.T) {
	r := &recorder{err: ErrLeaseNotFound}
	l := Checked("x", Checked("y", r))
	_, err := l.Renew(t.Context(), LeaseRef{Pool: "p", ID: "1-2", Holder: "h"}, time.Second)
	if want := "y renew lease 1-2 in pool p: " + ErrLeaseNotFound.Error(); err == nil || err.Error() != want {
		t.Errorf("Renew through Checked twice = %v, want %q", err, want)
	}
}

func TestSortByFence(t *testing.T) {
	ls := []Lease{
		{Fence: Fence{Epoch: 2, Seq: 1}}, {Fence: Fence{Epoch: 1, Seq: 9}}, {Fence: Fence{Epoch: 2, Seq: 0}}, {Fence: Fence{Epoch: 1, Seq: 2}},
	}
	SortByFence(ls)
	var got []string
	for _, l := range ls {
		got = append(got, l.Fence.String())
	}
	if want := []string{"1.2", "1.9", "2.0", "2.1"}; !slices.Equal(got, want) {
		t.Errorf("SortByFence = %v, want %v", got, want)
	}
}
