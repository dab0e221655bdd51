package ledger

import (
	"errors"
	"testing"
	"time"
)

func TestCheckReassert(t *testing.T) {
	const epoch, seq = Epoch(1000), uint64(50)
	e := EngineState{Spec: EngineSpec{ID: "e", KVTokens: 1000, Slots: 4}, ReportedKV: 800}
	lease := func(f Fence, kv, slots int64) Lease {
		return Lease{ID: MakeLeaseID(f), Fence: f, KVTokens: kv, Slots: slots}
	}
	for _, tc := range []struct {
		name string
		l    Lease
		ok   bool
	}{
		{"current epoch, behind the sequence", lease(Fence{epoch, 3}, 10, 1), true},
		{"current epoch, MaxReassertAhead past", lease(Fence{epoch, seq + MaxReassertAhead}, 10, 1), true},
		{"current epoch, one further", lease(Fence{epoch, seq + MaxReassertAhead + 1}, 10, 1), false},
		{"current epoch, MaxFenceSeq", lease(Fence{epoch, MaxFenceSeq}, 10, 1), false},
		{"earlier epoch, MaxFenceSeq", lease(Fence{epoch - 1, MaxFenceSeq}, 10, 1), true},
		{"later epoch", lease(Fence{epoch + 1, 1}, 10, 1), false},
		{"kv at the reported capacity", lease(Fence{epoch - 1, 1}, 800, 1), true},
		{"kv above the reported capacity", lease(Fence{epoch - 1, 1}, 801, 1), false},
		{"kv 2^40", lease(Fence{epoch - 1, 1}, MaxAmount, 1), false},
		{"slots at the engine's", lease(Fence{epoch - 1, 1}, 10, 4), true},
		{"slots above the engine's", lease(Fence{epoch - 1, 1}, 10, 5), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckReassert(epoch, seq, e, tc.l)
			if got := err == nil; got != tc.ok || (err != nil && !errors.Is(err, ErrInvalidArgument)) {
				t.Errorf("CheckReassert(%s kv=%d slots=%d) = %v, want ok %v (else ErrInvalidArgument)", tc.l.Fence, tc.l.KVTokens, tc.l.Slots, err, tc.ok)
			}
		})
	}
}

func TestValidateReassertFence(t *testing.T) {
	good := Lease{Pool: "p", Engine: "e", Tenant: "t", Priority: "i", KVTokens: 1, Slots: 1, Holder: "h", RequestID: "r"}
	for _, tc := range []struct {
		name  string
		id    LeaseID
		fence Fence
		ok    bool
	}{
		{"id of its fence", MakeLeaseID(Fence{7, 9}), Fence{7, 9}, true},
		{"id of another fence", MakeLeaseID(Fence{7, 9}), Fence{7, 10}, false},
		{"id not canonical", "07-9", Fence{7, 9}, false},
		{"no fence", MakeLeaseID(Fence{7, 9}), Fence{}, false},
		{"epoch 0", MakeLeaseID(Fence{0, 9}), Fence{0, 9}, false},
		{"sequence 0", MakeLeaseID(Fence{7, 0}), Fence{7, 0}, false},
		{"sequence MaxFenceSeq", MakeLeaseID(Fence{7, MaxFenceSeq}), Fence{7, MaxFenceSeq}, true},
		{"sequence past MaxFenceSeq", MakeLeaseID(Fence{7, MaxFenceSeq + 1}), Fence{7, MaxFenceSeq + 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := good
			l.ID, l.Fence = tc.id, tc.fence
			err := ValidateReassert(l, time.Second)
			if got := err == nil; got != tc.ok || (err != nil && !errors.Is(err, ErrInvalidArgument)) {
				t.Errorf("ValidateReassert(id %s, fence %s) = %v, want ok %v (else ErrInvalidArgument)", tc.id, tc.fence, err, tc.ok)
			}
		})
	}
}

func TestNextSeq(t *testing.T) {
	if got, err := NextSeq(MaxFenceSeq - 1); err != nil || got != MaxFenceSeq {
		t.Errorf("NextSeq(MaxFenceSeq-1) = %d, %v; want MaxFenceSeq", got, err)
	}
	for _, seq := range []uint64{MaxFenceSeq, MaxFenceSeq + 1, 1<<64 - 1} {
		if got, err := NextSeq(seq); !errors.Is(err, ErrFenceExhausted) {
			t.Errorf("NextSeq(%d) = %d, %v; want ErrFenceExhausted", seq, got, err)
		}
	}
}

func TestConfirmation(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	grace := time.Second
	for _, tc := range []struct {
		name string
		l    Lease
		want bool
	}{
		{"granted at the grace", Lease{Created: t0.Add(-grace)}, true},
		{"granted within the grace", Lease{Created: t0.Add(-grace + time.Millisecond)}, false},
		{"reasserted just now", Lease{Created: t0, Reasserted: true}, true},
	} {
		if got := ExpectedAt(tc.l, t0, grace); got != tc.want {
			t.Errorf("ExpectedAt(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
	if !Confirms(Observation{Running: 2, Waiting: 1}, 3) || Confirms(Observation{Running: 2, Waiting: 0}, 3) {
		t.Errorf("Confirms: want running+waiting >= expected slots")
	}
	if !ConfirmedBy(t0.Add(-grace), t0, grace) || ConfirmedBy(t0.Add(-grace+time.Millisecond), t0, grace) {
		t.Errorf("ConfirmedBy: want only leases reasserted at least the grace before")
	}
	limit := t0.Add(30 * time.Second)
	for _, tc := range []struct {
		name        string
		want        time.Time
		unconfirmed bool
		got         time.Time
	}{
		{"unconfirmed, past the bound", t0.Add(time.Minute), true, limit},
		{"unconfirmed, within it", t0.Add(time.Second), true, t0.Add(time.Second)},
		{"confirmed", t0.Add(time.Minute), false, t0.Add(time.Minute)},
	} {
		if got := CappedDeadline(tc.want, tc.unconfirmed, t0, 30*time.Second); !got.Equal(tc.got) {
			t.Errorf("CappedDeadline(%s) = %s, want %s", tc.name, got, tc.got)
		}
	}
}

func TestCompareTotals(t *testing.T) {
	rows := []Lease{
		{Engine: "e1", Tenant: "a", KVTokens: 10, Slots: 1},
		{Engine: "e1", Tenant: "b", KVTokens: 5, Slots: 2},
		{Engine: "e3", Tenant: "a", KVTokens: 1, Slots: 1},
	}
	engines := map[EngineID]Totals{"e1": {15, 3, 2}, "e2": {7, 1, 1}}
	tenants := map[TenantID]Totals{"a": {11, 2, 2}, "b": {5, 2, 1}}
	got := CompareTotals("p", engines, tenants, rows)
	want := []TotalsMismatch{
		{Pool: "p", Engine: "e2", Recorded: Totals{7, 1, 1}},
		{Pool: "p", Engine: "e3", Rows: Totals{1, 1, 1}},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("CompareTotals = %+v, want %+v", got, want)
	}
	engines["e2"], engines["e3"] = Totals{}, Totals{1, 1, 1}
	if got := CompareTotals("p", engines, tenants, rows); len(got) != 0 {
		t.Errorf("CompareTotals of matching totals = %+v, want none (a zero record equals no rows)", got)
	}
}
