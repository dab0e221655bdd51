package fleet

import (
	"errors"
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/internal/ledger"
)

func TestNameWholePool(t *testing.T) {
	f := &Fleet{Tenants: []Tenant{{Name: "solo", KVShare: 1, SlotShare: 1}, {Name: "half", KVShare: 0.5, SlotShare: 0.5}}}
	for _, tc := range []struct {
		name   string
		tenant ledger.TenantID
		reason ledger.Reason
		want   ledger.Reason
	}{
		{"whole pool's slots", "solo", ledger.ReasonTenantSlots, ledger.ReasonEngineSlots},
		{"whole pool's KV", "solo", ledger.ReasonTenantKV, ledger.ReasonEngineKV},
		{"a share's quota", "half", ledger.ReasonTenantSlots, ledger.ReasonTenantSlots},
		{"capacity reason", "solo", ledger.ReasonDraining, ledger.ReasonDraining},
		{"unknown tenant", "nobody", ledger.ReasonTenantKV, ledger.ReasonTenantKV},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rej := &ledger.Rejection{Reason: tc.reason}
			f.NameWholePool(fmt.Errorf("acquire: %w", rej), tc.tenant)
			if rej.Reason != tc.want {
				t.Errorf("reason %s, want %s", rej.Reason, tc.want)
			}
		})
	}
	f.NameWholePool(errors.New("not a rejection"), "solo") // nothing to rename
	f.NameWholePool(nil, "solo")
}
