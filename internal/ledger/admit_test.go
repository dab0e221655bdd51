package ledger

import (
	"errors"
	"testing"
	"time"
)

func TestAdmit(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	eng := func(id EngineID, kv, slots, rkv, rslots int64) EngineState {
		return EngineState{Spec: EngineSpec{ID: id, KVTokens: kv, Slots: slots}, ReservedKV: rkv, ReservedSlots: rslots}
	}
	base := func() Admission {
		return Admission{
			Now: now, CapacityKV: 2000, CapacitySlots: 20,
			Tenant: TenantSpec{Name: "t", KVShare: 1}, MaxFill: 1,
			Candidates: []EngineState{eng("a", 1000, 10, 0, 0), eng("b", 1000, 10, 0, 0)},
			KVTokens:   100, Slots: 1, RetryAfter: 2 * time.Second, Epoch: 7,
		}
	}
	for _, tc := range []struct {
		name    string
		mod     func(*Admission)
		wantIdx int
		want    Reason
		engine  EngineID
		retry   time.Duration
	}{
		{"fits first", func(a *Admission) {}, 0, "", "", 0},
		{"first full, second fits", func(a *Admission) { a.Candidates[0].ReservedKV = 950 }, 1, "", "", 0},
		{"exact boundary fits", func(a *Admission) { a.Candidates[0].ReservedKV = 900 }, 0, "", "", 0},
		{"one over boundary", func(a *Admission) {
			a.Candidates[0].ReservedKV, a.Candidates[1].ReservedKV = 901, 1000
		}, -1, ReasonEngineKV, "a", 2 * time.Second},
		{"slots", func(a *Admission) {
			a.Candidates[0].ReservedSlots, a.Candidates[1].ReservedSlots = 10, 10
		}, -1, ReasonEngineSlots, "a", 2 * time.Second},
		{"priority headroom", func(a *Admission) {
			a.MaxFill = 0.7
			a.Candidates[0].ReservedKV, a.Candidates[1].ReservedKV = 650, 650
		}, -1, ReasonPriorityHeadroom, "a", 2 * time.Second},
		{"correction counts", func(a *Admission) {
			a.Candidates[0].CorrectionKV, a.Candidates[1].CorrectionKV = 950, 950
		}, -1, ReasonEngineKV, "a", 2 * time.Second},
		{"ignore drops stale correction", func(a *Admission) {
			a.Candidates = a.Candidates[:1]
			a.Candidates[0].CorrectionKV = 950
			a.Candidates[0].Spec.StaleAfter = time.Second
			a.Candidates[0].Spec.StalePolicy = StaleIgnore
			a.Candidates[0].ObservedAt = now.Add(-2 * time.Second)
		}, 0, "", "", 0},
		{"block refuses never observed", func(a *Admission) {
			a.Candidates = a.Candidates[:1]
			a.Candidates[0].Spec.StaleAfter = time.Second
			a.Candidates[0].Spec.StalePolicy = StaleBlock
		}, -1, ReasonTelemetryStale, "a", 2 * time.Second},
		{"draining skipped", func(a *Admission) { a.Candidates[0].Draining = true }, 1, "", "", 0},
		{"reason of first candidate", func(a *Admission) {
			a.Candidates[0].Draining = true
			a.Candidates[1].ReservedKV = 1000
		}, -1, ReasonDraining, "a", 2 * time.Second},
		{"breaker open skipped", func(a *Admission) {
			a.Candidates[0].Breaker = Breaker{State: BreakerOpen, OpenedAt: now.Add(-time.Second)}
		}, 1, "", "", 0},
		{"breaker open reason of first candidate", func(a *Admission) {
			a.Candidates[0].Breaker = Breaker{State: BreakerOpen, OpenedAt: now}
			a.Candidates[1].ReservedKV = 1000
		}, -1, ReasonBreakerOpen, "a", 2 * time.Second},
		{"draining before breaker", func(a *Admission) {
			a.Candidates = a.Candidates[:1]
			a.Candidates[0].Draining = true
			a.Candidates[0].Breaker = Breaker{State: BreakerOpen, OpenedAt: now}
		}, -1, ReasonDraining, "a", 2 * time.Second},
		{"breaker before capacity", func(a *Admission) {
			a.Candidates = a.Candidates[:1]
			a.Candidates[0].ReservedKV = 1000
			a.Candidates[0].Breaker = Breaker{State: BreakerOpen, OpenedAt: now}
		}, -1, ReasonBreakerOpen, "a", 2 * time.Second},
		{"open past its cooldown admits a probe", func(a *Admission) {
			a.Breaker = BreakerSpec{Cooldown: time.Second}
			a.Candidates[0].Breaker = Breaker{State: BreakerOpen, OpenedAt: now.Add(-time.Second)}
		}, 0, "", "", 0},
		{"half-open with its probe budget taken", func(a *Admission) {
			a.Breaker = BreakerSpec{Probes: 2}
			a.Candidates[0].Breaker = Breaker{State: BreakerHalfOpen, Probes: 2}
		}, 1, "", "", 0},
		{"half-open within its probe budget", func(a *Admission) {
			a.Breaker = BreakerSpec{Probes: 2}
			a.Candidates[0].Breaker = Breaker{State: BreakerHalfOpen, Probes: 1}
		}, 0, "", "", 0},
		{"breaker off admits an open engine", func(a *Admission) {
			a.Breaker = BreakerSpec{Failures: -1}
			a.Candidates[0].Breaker = Breaker{State: BreakerOpen, OpenedAt: now}
		}, 0, "", "", 0},
		{"tenant quota", func(a *Admission) {
			a.Tenant.KVShare = 0.1
			a.TenantKV = 150
		}, -1, ReasonTenantKV, "", 2 * time.Second},
		{"tenant slots", func(a *Admission) {
			a.Tenant.SlotShare = 0.1
			a.TenantSlots = 2
		}, -1, ReasonTenantSlots, "", 2 * time.Second},
		{"too large for every engine", func(a *Admission) { a.KVTokens = 1001 }, -1, ReasonTooLarge, "", 0},
		{"too large for max_fill", func(a *Admission) { a.MaxFill, a.KVTokens = 0.5, 501 }, -1, ReasonTooLarge, "", 0},
		{"too large for tenant", func(a *Admission) { a.Tenant.KVShare = 0.01 }, -1, ReasonTooLarge, "", 0},
		{"recovering first", func(a *Admission) {
			a.RecoveringUntil = now.Add(1500*time.Millisecond + 1)
			a.KVTokens = 5000
		}, -1, ReasonRecovering, "", 1501 * time.Millisecond},
		{"default retry", func(a *Admission) {
			a.RetryAfter = 0
			a.Candidates = a.Candidates[:1]
			a.Candidates[0].ReservedKV = 1000
		}, -1, ReasonEngineKV, "a", DefaultRetryAfter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := base()
			tc.mod(&a)
			idx, rej := Admit(a)
			if idx != tc.wantIdx {
				t.Fatalf("Admit index = %d, want %d (rejection %v)", idx, tc.wantIdx, rej)
			}
			if tc.want == "" {
				if rej != nil {
					t.Fatalf("Admit rejection = %v, want none", rej)
				}
				return
			}
			if rej == nil || rej.Reason != tc.want || rej.Engine != tc.engine || rej.RetryAfter != tc.retry || rej.Epoch != 7 {
				t.Fatalf("Admit rejection = %+v, want reason %s engine %q retry %s epoch 7", rej, tc.want, tc.engine, tc.retry)
			}
			if !errors.Is(rej, ErrRejected) || AsRejection(rej) != rej {
				t.Errorf("rejection is not ErrRejected / AsRejection")
			}
		})
	}
}

func TestAdmitGrowth(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	a := Admission{Now: now, CapacityKV: 1000, CapacitySlots: 10, Tenant: TenantSpec{Name: "t", KVShare: 1}, MaxFill: 1}
	e := EngineState{Spec: EngineSpec{ID: "a", KVTokens: 1000, Slots: 10}, ReservedKV: 600, ReservedSlots: 10}
	if rej := AdmitGrowth(a, e, 500, 400); rej != nil {
		t.Errorf("growth to the boundary: %v, want admitted (slots full must not matter)", rej)
	}
	if rej := AdmitGrowth(a, e, 501, 401); rej == nil || rej.Reason != ReasonEngineKV {
		t.Errorf("growth one over: %v, want engine_kv", rej)
	}
	if rej := AdmitGrowth(a, e, 1001, 1); rej == nil || rej.Reason != ReasonTooLarge {
		t.Errorf("growth beyond capacity: %v, want too_large", rej)
	}
	// A probe lease grows on its half-open engine although the budget it
	// holds is taken; growth ignores the breaker.
	e.Breaker = Breaker{State: BreakerHalfOpen, Probes: 1}
	if rej := AdmitGrowth(a, e, 500, 400); rej != nil {
		t.Errorf("growth on a half-open engine with its probe budget taken: %v, want admitted", rej)
	}
}

func TestLeaseIDRoundTrip(t *testing.T) {
	f := Fence{Epoch: 1_764_000_000_123_456, Seq: 42}
	got, err := ParseLeaseID(MakeLeaseID(f))
	if err != nil || got != f {
		t.Fatalf("ParseLeaseID(MakeLeaseID(%v)) = %v, %v", f, got, err)
	}
	for _, bad := range []LeaseID{"", "x", "1-", "-1", "zz-1", "1-1-1"} {
		if _, err := ParseLeaseID(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ParseLeaseID(%q) error = %v, want ErrInvalidArgument", bad, err)
		}
	}
	if !(Fence{1, 9}).Less(Fence{2, 1}) || (Fence{2, 1}).Less(Fence{2, 1}) {
		t.Errorf("Fence.Less orders by epoch then sequence")
	}
}

func FuzzValidateAcquire(f *testing.F) {
	f.Add("pool", "gpu-0", "acme", "interactive", int64(100), int64(1), "h", "r", int64(time.Second))
	f.Add("", "", "", "", int64(-1), int64(0), "", "", int64(0))
	f.Add("p o", "gpu\x00", "t", "p", int64(1)<<41, int64(1), "h", "r", int64(time.Millisecond))
	f.Fuzz(func(t *testing.T, pool, cand, tenant, prio string, kv, slots int64, holder, req string, ttl int64) {
		r := AcquireRequest{Pool: PoolID(pool), Candidates: []EngineID{EngineID(cand)}, Tenant: TenantID(tenant),
			Priority: PriorityName(prio), KVTokens: kv, Slots: slots, Holder: HolderID(holder),
			RequestID: RequestID(req), TTL: time.Duration(ttl)}
		err := ValidateAcquire(r)
		if err != nil && !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("ValidateAcquire error %v is not ErrInvalidArgument", err)
		}
		if err == nil && (kv < 1 || kv > MaxAmount || slots < 1 || slots > MaxAmount || pool == "" ||
			holder == "" || req == "" || time.Duration(ttl) < time.Millisecond) {
			t.Fatalf("ValidateAcquire accepted %+v", r)
		}
	})
}
