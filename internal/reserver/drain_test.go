package reserver_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/reserver"
)

// TestDrainCLI: `reserver drain` drains an engine through the gRPC service:
// the ledger refuses new grants on it (while its lease stays) until
// --undrain; it names what is missing without a token, refuses an audit
// token, and reports bad usage with exit code 2.
func TestDrainCLI(t *testing.T) {
	r := start(t, writeFile(t, t.TempDir(), "fleet.yaml", fleetYAML), func(c *reserver.Config) {
		c.Token, c.AuditTokens = sharedToken, []string{auditToken}
	})
	c := dial(t, r, sharedToken)
	keepAlive(t, c, "router-a", 10*time.Second)
	held := acquire(t, c, "router-a", "r1", "gpu-0", 1000)

	drain := func(token string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		vars := map[string]string{}
		if token != "" {
			vars["LEASEHOLD_TOKEN"] = token
		}
		code := reserver.RunDrain(context.Background(), append([]string{"--server", r.GRPCAddr()}, args...), env(vars), &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, errs := drain(sharedToken, "--pool", "llama", "--engine", "gpu-0")
	if code != 0 || !strings.Contains(out, "pool llama engine gpu-0: draining: no new grants; 1 leases hold 1000 KV tokens") {
		t.Fatalf("drain: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	_, err := c.Acquire(context.Background(), ledger.AcquireRequest{
		Pool: "llama", Candidates: []ledger.EngineID{"gpu-0"}, Tenant: "acme", Priority: "standard",
		KVTokens: 10, Slots: 1, Holder: "router-a", RequestID: "r2", TTL: time.Minute,
	})
	if rej := ledger.AsRejection(err); rej == nil || rej.Reason != ledger.ReasonDraining {
		t.Fatalf("Acquire on the drained engine = %v, want a draining rejection", err)
	}
	if _, err := c.Renew(context.Background(), held.Ref(), time.Minute); err != nil {
		t.Errorf("the lease held before the drain: Renew = %v, want it kept", err)
	}

	if code, out, errs := drain(sharedToken, "--pool", "llama", "--engine", "gpu-0", "--undrain"); code != 0 || !strings.Contains(out, "not draining") {
		t.Fatalf("undrain: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	acquire(t, c, "router-a", "r3", "gpu-0", 10)

	for _, tc := range []struct {
		name, token string
		args        []string
		code        int
		stderr      string
	}{
		{"no token", "", []string{"--pool", "llama", "--engine", "gpu-0"}, 1, "LEASEHOLD_TOKEN"},
		{"audit token", auditToken, []string{"--pool", "llama", "--engine", "gpu-0"}, 1, "permission"},
		{"unknown engine", sharedToken, []string{"--pool", "llama", "--engine", "gpu-9"}, 1, "gpu-9"},
		{"no engine", sharedToken, []string{"--pool", "llama"}, 2, "--pool and --engine are required"},
		{"stray argument", sharedToken, []string{"--pool", "llama", "--engine", "gpu-0", "now"}, 2, `unexpected argument "now"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := drain(tc.token, tc.args...)
			if code != tc.code || !strings.Contains(strings.ToLower(errs), strings.ToLower(tc.stderr)) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errs, tc.code, tc.stderr)
			}
		})
	}
}
