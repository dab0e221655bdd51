package ledger

import (
	"maps"
	"testing"
)

func TestRowFateOf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inSpec bool
		leases int64
		want   RowFate
	}{
		{"in the spec, idle", true, 0, RowConfigured},
		{"in the spec, leased", true, 3, RowConfigured},
		{"left the spec, leased", false, 1, RowRemoved},
		{"left the spec, idle", false, 0, RowDropped},
		{"removed row's last lease ended", false, 0, RowDropped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RowFateOf(tc.inSpec, tc.leases); got != tc.want {
				t.Errorf("RowFateOf(%v, %d) = %s, want %s", tc.inSpec, tc.leases, got, tc.want)
			}
		})
	}
}

func TestConfigureRows(t *testing.T) {
	got := ConfigureRows([]string{"a", "b", "new"}, map[string]int64{"a": 0, "b": 2, "gone": 0, "draining-out": 4})
	want := map[string]RowFate{"a": RowConfigured, "b": RowConfigured, "new": RowConfigured, "gone": RowDropped, "draining-out": RowRemoved}
	if !maps.Equal(got, want) {
		t.Errorf("ConfigureRows = %v, want %v", got, want)
	}
}
