package estimate

import (
	"testing"

	"github.com/leasehold/leasehold/internal/fleet"
)

// TestMediaDefaults: a pool that does not set media_tokens reserves the
// documented defaults.
func TestMediaDefaults(t *testing.T) {
	m := NewMedia(fleet.DefaultMediaTokens)
	for k, want := range []int64{4096, 1500, 16384} {
		if got := m.PerItem(Kind(k)); got != want {
			t.Errorf("%s: %d, want %d", KindNames[k], got, want)
		}
	}
}
