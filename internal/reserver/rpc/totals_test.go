package rpc_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/remote"
)

// TestCheckTotalsAccess: CheckTotals is a read, like Stats: any
// authenticated principal may call it (audit, router, admin), an
// unauthenticated caller may not, and it answers with the served ledger's
// comparison (none on a consistent ledger; ErrUnknownPool for a pool it
// does not have).
func TestCheckTotalsAccess(t *testing.T) {
	_, url, _ := fixture(t)
	for _, tc := range []struct{ name, token string }{
		{"audit token", auditToken}, {"router token", tokA}, {"shared token", sharedToken},
	} {
		ms, err := ledger.CheckTotals(t.Context(), client(t, url, tc.token), "p")
		if err != nil || len(ms) != 0 {
			t.Errorf("CheckTotals with the %s = %v, %v; want none", tc.name, ms, err)
		}
	}
	_, err := ledger.CheckTotals(t.Context(), client(t, url, ""), "p")
	wantCode(t, "CheckTotals without a token", err, codes.Unauthenticated, remote.ErrUnauthenticated)
	_, err = ledger.CheckTotals(t.Context(), client(t, url, auditToken), "nope")
	wantCode(t, "CheckTotals of an unknown pool", err, codes.NotFound, ledger.ErrUnknownPool)
}
