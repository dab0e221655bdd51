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
		{"too large before recovering", func(a *Admission) {
			a.RecoveringUntil = now.Add(1500*time.Millisecond + 1)
			a.KVTokens = 5000
		}, -1, ReasonTooLarge, "", 0},
		{"recovering: hint the rest of the window", func(a *Admission) {
			a.RecoveringUntil = now.Add(1500*time.Millisecond + 1)
		}, -1, ReasonRecovering, "a", 1501 * time.Millisecond},
		{"recovering: hint the pool's", func(a *Admission) {
			a.RecoveringUntil = now.Add(time.Hour)
		}, -1, ReasonRecovering, "a", 2 * time.Second},
		{"recovering: a recovered engine takes the grant", func(a *Admission) {
			a.RecoveringUntil, a.ObservedSince = now.Add(time.Hour), now.Add(-time.Second)
			recovered(&a.Candidates[1], now.Add(-time.Second), now.Add(-time.Second))
		}, 1, "", "", 0},
		{"recovering: observation taken before since", func(a *Admission) {
			a.RecoveringUntil, a.ObservedSince = now.Add(time.Hour), now.Add(-time.Second)
			a.Candidates = a.Candidates[:1]
			recovered(&a.Candidates[0], now.Add(-time.Second-time.Nanosecond), now)
		}, -1, ReasonRecovering, "a", 2 * time.Second},
		{"recovering: observation arrived before since", func(a *Admission) {
			a.RecoveringUntil, a.ObservedSince = now.Add(time.Hour), now.Add(-time.Second)
			a.Candidates = a.Candidates[:1]
			recovered(&a.Candidates[0], now, now.Add(-time.Second-time.Millisecond))
		}, -1, ReasonRecovering, "a", 2 * time.Second},
		{"recovering: stale telemetry", func(a *Admission) {
			a.RecoveringUntil, a.ObservedSince = now.Add(time.Hour), now.Add(-time.Hour)
			a.Candidates = a.Candidates[:1]
			recovered(&a.Candidates[0], now.Add(-time.Minute), now.Add(-time.Minute))
			a.Candidates[0].Spec.StaleAfter = time.Second
			a.Candidates[0].ObservedAt = now.Add(-time.Minute)
		}, -1, ReasonRecovering, "a", 2 * time.Second},
		{"recovering: worst_case engine running", func(a *Admission) {
			a.RecoveringUntil, a.ObservedSince, a.Reserve = now.Add(time.Hour), now.Add(-time.Second), ReserveWorstCase
			a.Candidates = a.Candidates[:1]
			recovered(&a.Candidates[0], now, now)
			a.Candidates[0].LastObservation.Waiting = 1
		}, -1, ReasonRecovering, "a", 2 * time.Second},
		{"recovering: worst_case engine idle", func(a *Admission) {
			a.RecoveringUntil, a.ObservedSince, a.Reserve = now.Add(time.Hour), now.Add(-time.Second), ReserveWorstCase
			a.Candidates = a.Candidates[:1]
			recovered(&a.Candidates[0], now, now)
		}, 0, "", "", 0},
		{"recovering: draining first", func(a *Admission) {
			a.RecoveringUntil = now.Add(time.Hour)
			a.Candidates[0].Draining = true
		}, -1, ReasonDraining, "a", 2 * time.Second},
		{"window over: unobserved engines take grants", func(a *Admission) {
			a.RecoveringUntil, a.ObservedSince = now, now
		}, 0, "", "", 0},
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

// recovered sets e's last observation as taken at taken and arrived at
// arrived, showing nothing running.
func recovered(e *EngineState, taken, arrived time.Time) {
	e.LastObservation = Observation{Engine: e.Spec.ID, ObservedAt: taken}
	e.ArrivedAt, e.ObservedAt = arrived, arrived
}

func TestCorrectionOf(t *testing.T) {
	obs := Observation{KVTokensUsed: 300, Running: 2, Waiting: 1}
	for _, tc := range []struct {
		name              string
		rkv, rslots       int64
		inWindow          bool
		wantKV, wantSlots int64
	}{
		{"beyond the reservations", 100, 1, false, 200, 1},
		{"within the reservations", 500, 4, false, 0, 0},
		{"in the window: all it shows", 100, 1, true, 300, 3},
		{"in the window, above the reservations too", 500, 4, true, 300, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv, slots := CorrectionOf(obs, tc.rkv, tc.rslots, tc.inWindow)
			if kv != tc.wantKV || slots != tc.wantSlots {
				t.Errorf("CorrectionOf(kv 300 running 2 waiting 1, reserved %d/%d, window %v) = %d, %d; want %d, %d",
					tc.rkv, tc.rslots, tc.inWindow, kv, slots, tc.wantKV, tc.wantSlots)
			}
		})
	}
}

func TestRecoverySince(t *testing.T) {
	began := time.UnixMilli(1_800_000_000_123)
	if got, want := RecoverySince(began, 1500*time.Microsecond), began.Add(2*time.Millisecond); !got.Equal(want) {
		t.Errorf("RecoverySince(+1.5ms) = %s, want the grace rounded up to %s", got, want)
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
	// In a recovery window growth waits for the engine to recover, with
	// the shorter of the pool's hint and the rest of the window.
	a.RecoveringUntil, a.ObservedSince, a.RetryAfter = now.Add(300*time.Millisecond), now.Add(-time.Second), time.Second
	if rej := AdmitGrowth(a, e, 500, 400); rej == nil || rej.Reason != ReasonRecovering || rej.Engine != "a" || rej.RetryAfter != 300*time.Millisecond {
		t.Errorf("growth on an unobserved engine in the window: %+v, want recovering on a, retry 300ms", rej)
	}
	recovered(&e, now, now)
	if rej := AdmitGrowth(a, e, 500, 400); rej != nil {
		t.Errorf("growth on a recovered engine in the window: %v, want admitted", rej)
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
