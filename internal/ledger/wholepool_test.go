package ledger

import "testing"

func TestWholePoolReason(t *testing.T) {
	for _, tc := range []struct {
		name            string
		r               Reason
		kvShare, slotSh float64
		want            Reason
	}{
		{"kv quota of the whole pool", ReasonTenantKV, 1, 0, ReasonEngineKV},
		{"slot quota of the whole pool", ReasonTenantSlots, 0.5, 1, ReasonEngineSlots},
		{"kv quota of a share", ReasonTenantKV, 0.99, 1, ReasonTenantKV},
		{"slot quota of a share", ReasonTenantSlots, 1, 0.5, ReasonTenantSlots},
		{"capacity reason kept", ReasonEngineSlots, 1, 1, ReasonEngineSlots},
		{"recovering kept", ReasonRecovering, 1, 1, ReasonRecovering},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := WholePoolReason(tc.r, tc.kvShare, tc.slotSh); got != tc.want {
				t.Errorf("WholePoolReason(%s, %v, %v) = %s, want %s", tc.r, tc.kvShare, tc.slotSh, got, tc.want)
			}
		})
	}
}
