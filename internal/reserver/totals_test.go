package reserver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/audit"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/reserver"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// TestTotalsMismatchAnomaly: a Redis store whose engine totals disagree
// with its lease rows (the state the red team's id collisions left: KV
// and slots reserved with no lease row) is reported by the audit as
// totals_mismatch, with the totals and the sums, counted in
// leasehold_audit_anomalies, and CheckTotals through the gRPC surface
// (read access) returns it; a consistent store reports none.
func TestTotalsMismatchAnomaly(t *testing.T) {
	rs := redisserver.Start(t)
	r := start(t, writeFile(t, t.TempDir(), "fleet.yaml", fleetYAML), func(c *reserver.Config) { c.Ledger = rs.URL() })
	c := dial(t, r, "")
	ctx := context.Background()
	keepAlive(t, c, "router-a", 10*time.Second)
	acquire(t, c, "router-a", "r1", "gpu-0", 1000)

	anomalies := func() []audit.Anomaly {
		t.Helper()
		_, body := get(t, r, "/v1/audit", "")
		var out []audit.Anomaly
		for _, a := range decode(t, body).Anomalies {
			if a.Kind == audit.KindTotalsMismatch {
				out = append(out, a)
			}
		}
		return out
	}
	if got := anomalies(); len(got) != 0 {
		t.Fatalf("totals_mismatch on a consistent store = %+v, want none", got)
	}
	if ms, err := ledger.CheckTotals(ctx, c, "llama"); err != nil || len(ms) != 0 {
		t.Fatalf("CheckTotals through gRPC on a consistent store = %v, %v; want none", ms, err)
	}

	// What an overwritten lease row leaves: the engine counts a second
	// lease of 34692 KV tokens and 24 slots that no row holds.
	if err := rs.Client().HSet(ctx, "lh:{llama}:state", "e:gpu-0:r", "35692 25 2").Err(); err != nil {
		t.Fatal(err)
	}
	got := anomalies()
	if len(got) != 1 || got[0].Engine != "gpu-0" || got[0].Pool != "llama" ||
		!strings.Contains(got[0].Detail, "kv=35692 slots=25 leases=2") || !strings.Contains(got[0].Detail, "kv=1000 slots=1 leases=1") {
		t.Errorf("totals_mismatch after corrupting gpu-0's totals = %+v, want one on gpu-0 naming the totals and the sums", got)
	}
	_, mb := get(t, r, "/metrics", "")
	if want := fmt.Sprintf("leasehold_audit_anomalies{kind=%q,pool=%q} 1", audit.KindTotalsMismatch, "llama"); !strings.Contains(string(mb), want) {
		t.Errorf("/metrics lacks %q", want)
	}
	ms, err := ledger.CheckTotals(ctx, c, "llama")
	want := ledger.TotalsMismatch{Pool: "llama", Engine: "gpu-0",
		Recorded: ledger.Totals{KVTokens: 35692, Slots: 25, Leases: 2}, Rows: ledger.Totals{KVTokens: 1000, Slots: 1, Leases: 1}}
	if err != nil || len(ms) != 1 || ms[0] != want {
		t.Errorf("CheckTotals through gRPC = %+v, %v; want [%+v]", ms, err, want)
	}
}
