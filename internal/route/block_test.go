package route

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testutil/poll"
)

func TestBlockLeaseFlags(t *testing.T) {
	base := []string{"--config", "f.yaml", "--ledger", "grpc://reserver:7400", "--id", "r"}
	c, err := ParseFlags(base, func(string) (string, bool) { return "", false }, &strings.Builder{})
	if err != nil || c.BlockLeaseKV != 0 || c.BlockLeaseSlots != 0 {
		t.Fatalf("default: kv=%d slots=%d, %v; want off", c.BlockLeaseKV, c.BlockLeaseSlots, err)
	}
	for _, tc := range []struct {
		name string
		args []string
		ok   bool
	}{
		{"both", []string{"--block-lease-kv", "4096", "--block-lease-slots", "8"}, true},
		{"kv only", []string{"--block-lease-kv", "4096"}, false},
		{"slots only", []string{"--block-lease-slots", "8"}, false},
		{"negative", []string{"--block-lease-kv", "-1", "--block-lease-slots", "8"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseFlags(append(append([]string(nil), base...), tc.args...), func(string) (string, bool) { return "", false }, &strings.Builder{})
			if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "--block-lease-kv")) {
				t.Errorf("ParseFlags(%v) = %v, want ok=%v naming --block-lease-kv", tc.args, err, tc.ok)
			}
		})
	}
}

// With --block-lease-kv/--block-lease-slots, concurrent small requests are
// mostly admitted against block leases: far fewer ledger grants, every
// request served, engines never over capacity, nothing held after
// the lease manager closes.
func TestBlockLeasesThroughRouter(t *testing.T) {
	h := newHarness(t, harnessOpts{engines: 2, kv: 8192, slots: 16, speed: 200, output: 4, extra: tenants,
		cfg: func(c *Config) { c.BlockLeaseKV, c.BlockLeaseSlots = 2048, 6 }})
	const clients, each = 8, 15
	var wg sync.WaitGroup
	stopChecks := poll.Every(10*time.Millisecond, func() {
		for _, e := range h.stats().Engines {
			if e.ReservedKV > e.Spec.KVTokens || e.ReservedSlots > e.Spec.Slots {
				t.Errorf("engine %s over capacity: kv %d/%d slots %d/%d", e.Spec.ID, e.ReservedKV, e.Spec.KVTokens, e.ReservedSlots, e.Spec.Slots)
			}
		}
	})
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				body := map[string]any{"model": "m", "prompt": "hello there", "max_tokens": 4}
				st, _, data, err := post(context.Background(), h.client, h.url+"/v1/completions", "sk-acme", body)
				if err != nil || st != 200 {
					t.Errorf("request: %d %v %s", st, err, data)
					return
				}
			}
		}()
	}
	wg.Wait()
	stopChecks()
	k := h.r.adm.(*ledgerAdmitter).m.Stats().Counters
	t.Logf("requests=%d ledger grants=%d (blocks %d) local admissions=%d ledger calls saved (gross)=%d",
		clients*each, k.Grants, k.BlockAcquires, k.LocalAdmits, k.LedgerCallsSaved)
	if k.LocalAdmits == 0 || k.Grants*3 > clients*each {
		t.Errorf("local admissions %d, ledger grants %d for %d requests; want most admitted locally", k.LocalAdmits, k.Grants, clients*each)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The release step of Shutdown (Shutdown itself runs at cleanup).
	if err := h.r.adm.(*ledgerAdmitter).m.Close(ctx); err != nil {
		t.Fatalf("lease manager Close: %v", err)
	}
	if st := h.stats(); st.Leases != 0 {
		t.Errorf("ledger leases after Close = %d, want 0", st.Leases)
	}
}
