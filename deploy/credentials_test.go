package deploy

// The credentials the shipped compose file gives each component, checked
// statically and then attacked for real: a router holding what compose
// gives it must not be able to touch another router's lease nor call an
// admin method (issue 15, "A router credential that is not an admin").

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/freeport"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/holderkey"
	"github.com/leasehold/leasehold/internal/ledger/remote"
	"github.com/leasehold/leasehold/internal/testutil/poll"
	"github.com/leasehold/leasehold/internal/testutil/rawrpc"
)

// composeVar matches a compose interpolation: ${NAME}, ${NAME:-default},
// ${NAME-default}, ${NAME:?error}, ${NAME?error}.
var composeVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}`)

// composeShell is the operator's shell as the compose README asks for it:
// .env's settings, and a fresh random value for every variable compose
// requires (${NAME:?...}), each its own.
func composeShell(t *testing.T) map[string]string {
	t.Helper()
	vars := envFile(t, filepath.Join(composeDir, ".env"))
	for _, m := range composeVar.FindAllStringSubmatch(string(readFile(t, filepath.Join(composeDir, "compose.yaml"))), -1) {
		if strings.HasSuffix(m[2], "?") && vars[m[1]] == "" {
			var b [32]byte
			_, _ = rand.Read(b[:])
			vars[m[1]] = hex.EncodeToString(b[:])
		}
	}
	return vars
}

// interpolate resolves compose variables in s from vars, as docker compose
// does; a required variable that is unset fails the test.
func interpolate(t *testing.T, s string, vars map[string]string) string {
	t.Helper()
	return composeVar.ReplaceAllStringFunc(s, func(ref string) string {
		m := composeVar.FindStringSubmatch(ref)
		v, set := vars[m[1]]
		switch m[2] {
		case ":-":
			if v == "" {
				return m[3]
			}
		case "-":
			if !set {
				return m[3]
			}
		case ":?", "?":
			if v == "" && (m[2] == ":?" || !set) {
				t.Fatalf("compose: %s is required: %s", m[1], m[3])
			}
		}
		return v
	})
}

// serviceEnv is a compose service's environment, interpolated.
func serviceEnv(t *testing.T, s composeService, vars map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range s.Environment {
		out[k] = interpolate(t, v, vars)
	}
	return out
}

// adminCredentials are the tokens a reserver's environment accepts as
// admin: LEASEHOLD_TOKEN and LEASEHOLD_ADMIN_TOKENS.
func adminCredentials(env map[string]string) []string {
	out := splitTokens(env["LEASEHOLD_ADMIN_TOKENS"])
	if env["LEASEHOLD_TOKEN"] != "" {
		out = append(out, env["LEASEHOLD_TOKEN"])
	}
	return out
}

func splitTokens(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// TestComposeCredentials: every router sends a token the reservers accept
// as the router role, and nothing a router is given is an admin token.
func TestComposeCredentials(t *testing.T) {
	c := loadCompose(t)
	vars := composeShell(t)
	var admins, routerRole []string
	reservers := 0
	for name, s := range c.Services {
		if s.binaryOf() != "reserver" {
			continue
		}
		reservers++
		env := serviceEnv(t, s, vars)
		if env["LEASEHOLD_TOKEN"] == "" {
			t.Errorf("%s: no admin token (LEASEHOLD_TOKEN): the operator's reserver audit and drain have none", name)
		}
		admins = append(admins, adminCredentials(env)...)
		rr := splitTokens(env["LEASEHOLD_ROUTER_ROLE_TOKENS"])
		if len(rr) == 0 {
			t.Errorf("%s: no router-role token (LEASEHOLD_ROUTER_ROLE_TOKENS)", name)
		}
		if routerRole != nil && !slices.Equal(rr, routerRole) {
			t.Errorf("%s: router-role tokens differ between reservers", name)
		}
		routerRole = rr
	}
	if reservers == 0 {
		t.Fatal("no reserver service")
	}
	for name, s := range c.Services {
		if s.binaryOf() != "router" {
			continue
		}
		env := serviceEnv(t, s, vars)
		if tok := env["LEASEHOLD_TOKEN"]; !slices.Contains(routerRole, tok) {
			t.Errorf("%s: LEASEHOLD_TOKEN is not a router-role token of the reservers", name)
		}
		for k, v := range env {
			if slices.ContainsFunc(admins, func(a string) bool { return strings.Contains(v, a) }) {
				t.Errorf("%s: %s carries an admin token of the reservers", name, k)
			}
		}
	}
}

// composeArgs returns a compose command line (without the binary) with the
// values of the flags in set replaced, interpolated; a flag of set that the
// line lacks fails the test.
func composeArgs(t *testing.T, cmd []string, vars, set map[string]string) []string {
	t.Helper()
	args := make([]string, 0, len(cmd))
	done := map[string]bool{}
	for i := 1; i < len(cmd); i++ {
		a := interpolate(t, cmd[i], vars)
		name := strings.TrimLeft(a, "-")
		if n, _, ok := strings.Cut(name, "="); ok && strings.HasPrefix(a, "-") {
			if v, ok := set[n]; ok {
				args, done[n] = append(args, "--"+n+"="+v), true
				continue
			}
		}
		if v, ok := set[name]; ok && strings.HasPrefix(a, "-") && i+1 < len(cmd) {
			args, done[name] = append(args, "--"+name, v), true
			i++
			continue
		}
		args = append(args, a)
	}
	for n := range set {
		if !done[n] {
			t.Fatalf("compose command %q has no --%s", cmd, n)
		}
	}
	return args
}

func envList(env map[string]string) []string {
	var out []string
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

const credentialsFleet = `
pools:
  - name: p
    engines:
      - {id: e1, url: "http://%s", format: vllm, kv_tokens: 16384, slots: 8, stale_after: 0s}
tenants:
  - {name: t, api_keys: ["sk-credentials-test"], kv_share: 1}
priorities:
  - {name: interactive, max_fill: 1}
lease:
  session_ttl: 2s
  recovery_window: 0s
`

// stream is a streamed completion in flight through a router.
type stream struct {
	resp   *http.Response
	body   *bufio.Reader
	cancel context.CancelFunc
}

// startStream posts a streamed completion of exactly n tokens (ignore_eos)
// to router and waits for its first event.
func startStream(t *testing.T, router string, n int) *stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	body := fmt.Sprintf(`{"model":"p","prompt":"hold","max_tokens":%d,"ignore_eos":true,"stream":true}`, n)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, router+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-credentials-test")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s/v1/completions: %v", router, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("streamed completion: %s: %s", resp.Status, b)
	}
	s := &stream{resp: resp, body: bufio.NewReader(resp.Body), cancel: cancel}
	if _, err := s.body.ReadString('\n'); err != nil {
		t.Fatalf("first event: %v", err)
	}
	return s
}

// finish reads s to its end and fails the test unless it ended with
// [DONE] and no error event.
func (s *stream) finish(t *testing.T) {
	t.Helper()
	rest, err := io.ReadAll(s.body)
	if err != nil {
		t.Fatalf("reading the stream: %v", err)
	}
	if !strings.Contains(string(rest), "data: [DONE]") || strings.Contains(string(rest), `"error"`) {
		t.Errorf("the stream did not complete cleanly; its tail:\n%s", rest[max(0, len(rest)-400):])
	}
}

// TestComposeRouterCannotTouchAnotherRoutersLease runs a real reserver and
// two real routers with exactly the credentials compose.yaml gives them
// (their environments and command lines, interpolated as docker compose
// does; only addresses, the fleet file and the ledger are local). With
// router-1's token — and its own holder key, or none — every holder call
// on router-2's in-flight lease and every admin method is
// PermissionDenied; router-2's lease stays and its request completes. The
// same calls with the reservers' admin token succeed: with a compose file
// that gives routers the admin token, the attack succeeds and this test
// fails.
func TestComposeRouterCannotTouchAnotherRoutersLease(t *testing.T) {
	bin := buildBinaries(t)
	c := loadCompose(t)
	vars := composeShell(t)

	eng := freeport.AddrT(t)
	e := start(t, "enginesim", filepath.Join(bin, "enginesim"), nil,
		"--listen", eng, "--kv-tokens", "16384", "--slots", "8", "--format", "vllm", "--model", "p", "--decode-tokens-per-sec", "20")
	waitHTTP(t, e, "http://"+eng+"/health", 20*time.Second)
	fleetFile := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(fleetFile, fmt.Appendf(nil, credentialsFleet, eng), 0o600); err != nil {
		t.Fatal(err)
	}

	rsv := c.Services["reserver-1"]
	rsvEnv := serviceEnv(t, rsv, vars)
	rg, rh := freeport.AddrT(t), freeport.AddrT(t)
	res := start(t, "reserver-1", filepath.Join(bin, rsv.binaryOf()), envList(rsvEnv), composeArgs(t, rsv.Command, vars,
		map[string]string{"ledger": "memory://", "config": fleetFile, "grpc-listen": rg, "http-listen": rh})...)
	waitHTTP(t, res, "http://"+rh+"/readyz", 30*time.Second)

	routers := map[string]string{} // service -> base URL
	routerEnv := map[string]map[string]string{}
	for _, name := range []string{"router-1", "router-2"} {
		s := c.Services[name]
		routerEnv[name] = serviceEnv(t, s, vars)
		addr := freeport.AddrT(t)
		p := start(t, name, filepath.Join(bin, s.binaryOf()), envList(routerEnv[name]), composeArgs(t, s.Command, vars,
			map[string]string{"ledger": "grpc://" + rg, "config": fleetFile, "listen": addr})...)
		waitHTTP(t, p, "http://"+addr+"/readyz", 30*time.Second)
		routers[name] = "http://" + addr
	}
	idB, _ := flagValue(c.Services["router-2"].Command, "id")
	tokA := routerEnv["router-1"]["LEASEHOLD_TOKEN"]
	admin := rsvEnv["LEASEHOLD_TOKEN"]
	if slices.Contains(adminCredentials(rsvEnv), tokA) {
		t.Errorf("router-1's LEASEHOLD_TOKEN is an admin token of the reserver")
	}

	// A reader with router-1's token finds router-2's in-flight lease.
	reader, err := remote.Dial("grpc://"+rg, remote.Options{Token: tokA})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	ctx := t.Context()
	leaseOf := func(t *testing.T, not ledger.LeaseID) ledger.Lease {
		t.Helper()
		var found []ledger.Lease
		poll.Eventually(t, 10*time.Second, "router-2's lease listed", func() bool {
			ls, err := reader.List(ctx, ledger.Filter{Pool: "p"})
			if err != nil {
				t.Fatalf("List with router-1's token: %v", err)
			}
			found = found[:0]
			for _, l := range ls {
				if strings.HasPrefix(string(l.Holder), idB+"/") && l.ID != not {
					found = append(found, l)
				}
			}
			return len(found) == 1
		})
		return found[0]
	}
	listed := func(id ledger.LeaseID) (ledger.Lease, bool) {
		ls, err := reader.List(ctx, ledger.Filter{Pool: "p"})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		for _, l := range ls {
			if l.ID == id {
				return l, true
			}
		}
		return ledger.Lease{}, false
	}
	conn, err := grpc.NewClient(rg, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	demo := ledger.PoolSpec{Name: "admin-demo", Engines: []ledger.EngineSpec{{ID: "d1", KVTokens: 10, Slots: 1}},
		Tenants: []ledger.TenantSpec{{Name: "t", KVShare: 1}}, Priorities: []ledger.PrioritySpec{{Name: "interactive", MaxFill: 1}}}
	target := func(l ledger.Lease) rawrpc.Target {
		return rawrpc.Target{Holder: l.Holder, Lease: l, Spec: demo, Acquire: ledger.AcquireRequest{Pool: "p", Candidates: []ledger.EngineID{"e1"},
			Tenant: "t", Priority: "interactive", KVTokens: 10, Slots: 1, RequestID: "attack", TTL: time.Minute}}
	}

	sB := startStream(t, routers["router-2"], 200)
	victim := leaseOf(t, "")
	ownKey := holderkey.New() // router-1's session key stands for any key but router-2's
	for _, as := range []struct{ name, key string }{{"router-1's token and its own holder key", ownKey.Encode()}, {"router-1's token, no holder key", ""}} {
		calls := rawrpc.Calls(conn, rawrpc.MD(tokA, as.key), target(victim))
		for _, m := range append(slices.Clone(rawrpc.HolderMethods), rawrpc.AdminMethods...) {
			if err := calls[m](ctx); status.Code(err) != codes.PermissionDenied {
				t.Errorf("%s on router-2's lease with %s: %v; want PermissionDenied", m, as.name, err)
			}
		}
	}
	if got, ok := listed(victim.ID); !ok || got.Holder != victim.Holder || got.KVTokens != victim.KVTokens || got.Engine != victim.Engine {
		t.Errorf("router-2's lease after the attack = %+v (listed %v); want %+v untouched", got, ok, victim)
	}
	sB.finish(t)
	poll.Eventually(t, 10*time.Second, "router-2 released its own lease", func() bool { _, ok := listed(victim.ID); return !ok })

	// The same calls with the admin token: what a router given the admin
	// token (the old compose file) could do to another router's lease.
	sB2 := startStream(t, routers["router-2"], 200)
	defer sB2.cancel()
	victim2 := leaseOf(t, victim.ID)
	calls := rawrpc.Calls(conn, rawrpc.MD(admin, ""), target(victim2))
	for _, m := range []string{"Renew", "Resize", "Grow", "Reassert", "Release", "Configure", "SetDraining", "Observe", "Sweep"} {
		if err := calls[m](ctx); err != nil {
			t.Errorf("%s with the admin token: %v; want it to succeed", m, err)
		}
	}
	if _, ok := listed(victim2.ID); ok {
		t.Errorf("router-2's second lease is still listed after Release with the admin token")
	}
}

// secretEnv maps a container's env names to the leasehold-tokens keys they
// are taken from.
func secretEnv(c any) map[string]string {
	out := map[string]string{}
	env, _ := get(c, "env").([]any)
	for _, e := range env {
		if ref := get(e, "valueFrom", "secretKeyRef"); ref != nil && get(ref, "name") == "leasehold-tokens" {
			out[str(get(e, "name"))] = str(get(ref, "key"))
		}
	}
	return out
}

// TestKubernetesCredentials: router pods get the router token, which the
// reservers accept as the router role, and no key of the Secret that a
// reserver accepts as admin, by env or by volume.
func TestKubernetesCredentials(t *testing.T) {
	deps := map[string]map[string]any{}
	var secret map[string]any
	for _, d := range k8sDocs(t) {
		switch d["kind"] {
		case "Deployment":
			deps[str(get(d, "metadata", "name"))] = d
		case "Secret":
			secret = d
		}
	}
	if secret == nil || deps["leasehold-router"] == nil || deps["leasehold-reserver"] == nil {
		t.Fatalf("want the example Secret and the router and reserver Deployments")
	}
	rsv := secretEnv(get(deps["leasehold-reserver"], "spec", "template", "spec", "containers", 0))
	adminKeys := []string{rsv["LEASEHOLD_TOKEN"], rsv["LEASEHOLD_ADMIN_TOKENS"]}
	if rsv["LEASEHOLD_TOKEN"] == "" || rsv["LEASEHOLD_ROUTER_ROLE_TOKENS"] == "" {
		t.Fatalf("reserver env from the Secret = %v; want LEASEHOLD_TOKEN (admin) and LEASEHOLD_ROUTER_ROLE_TOKENS", rsv)
	}
	pod := get(deps["leasehold-router"], "spec", "template", "spec")
	router := secretEnv(get(pod, "containers", 0))
	if router["LEASEHOLD_TOKEN"] != rsv["LEASEHOLD_ROUTER_ROLE_TOKENS"] {
		t.Errorf("router LEASEHOLD_TOKEN from Secret key %q; want the reservers' router-role key %q", router["LEASEHOLD_TOKEN"], rsv["LEASEHOLD_ROUTER_ROLE_TOKENS"])
	}
	for name, key := range router {
		if slices.Contains(adminKeys, key) {
			t.Errorf("router env %s is the reservers' admin key %q of the Secret", name, key)
		}
	}
	vols, _ := get(pod, "volumes").([]any)
	for _, v := range vols {
		if get(v, "secret") != nil || get(v, "projected") != nil {
			t.Errorf("router volume %v mounts a Secret; routers get only the router token, by env", get(v, "name"))
		}
	}
	a, r := get(secret, "stringData", rsv["LEASEHOLD_TOKEN"]), get(secret, "stringData", rsv["LEASEHOLD_ROUTER_ROLE_TOKENS"])
	if a == nil || r == nil || a == r {
		t.Errorf("example Secret: admin %q = %v, router %q = %v; want both present and different", rsv["LEASEHOLD_TOKEN"], a, rsv["LEASEHOLD_ROUTER_ROLE_TOKENS"], r)
	}
}
