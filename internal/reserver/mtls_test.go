package reserver_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/remote"
	"github.com/leasehold/leasehold/internal/reserver"
	"github.com/leasehold/leasehold/internal/testutil/testpki"
)

// TestMTLSWithoutToken: a reserver with a client CA and no token serves
// remote routers identified by their certificates (the flags are wired
// through to the gRPC service): a router acts for its own holders only and
// an admin identity may configure.
func TestMTLSWithoutToken(t *testing.T) {
	ca := testpki.New(t, "test")
	srvCert, srvKey, _ := ca.Server(t, "reserver")
	r := start(t, writeFile(t, t.TempDir(), "fleet.yaml", fleetYAML), func(c *reserver.Config) {
		c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = srvCert, srvKey, ca.File
		c.AdminIdentities = []string{"ops"}
	})
	dialCert := func(name string) *remote.Ledger {
		cert, key, _ := ca.Client(t, name)
		c, err := remote.Dial("grpc://"+r.GRPCAddr(), remote.Options{CAFile: ca.File, CertFile: cert, KeyFile: key})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ctx := t.Context()
	a := dialCert("router-a")
	// Holder ids of a router are derived from the key its connection sends.
	own := ledger.HolderID("router-a/" + a.HolderKey().Suffix())
	keepAlive(t, a, own, 10*time.Second)
	acquire(t, a, own, "r1", "gpu-0", 1000)
	if _, err := a.KeepAlive(ctx, "llama", ledger.HolderID("router-b/"+a.HolderKey().Suffix()), time.Second); status.Code(err) != codes.PermissionDenied {
		t.Errorf("KeepAlive for router-b as router-a = %v, want PermissionDenied", err)
	}
	spec := ledger.PoolSpec{Name: "other", Engines: []ledger.EngineSpec{{ID: "e", KVTokens: 10, Slots: 1}}}
	if _, err := a.Configure(ctx, spec); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Configure as router-a = %v, want PermissionDenied", err)
	}
	if _, err := dialCert("ops").Configure(ctx, spec); err != nil {
		t.Errorf("Configure as the admin identity: %v", err)
	}
}
