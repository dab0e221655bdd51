package redis_test

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/ledger"
	lhredis "github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// TestReleaseInlineMatchesGeneralPath checks release.lua's inline common
// release against its general path: two pools on one Redis take the same
// grants and the same releases, and before each release one of them has
// its sweep_at set to 0, which sends the release down the general path
// (a sweep that finds nothing runs first). The releases cover what the
// inline path takes (the router's release, a bare one, a success on an
// engine whose stored breaker need not hear it) and what it hands on (a
// success a breaker with failures counted must hear, a failure, the last
// lease of an engine, a release by another holder, an unknown lease).
// Every reservation, counter and index the releases touch must read the
// same in both pools.
func TestReleaseInlineMatchesGeneralPath(t *testing.T) {
	ctx := ctxT(t)
	srv := redisserver.Start(t)
	client := srv.Client()
	type pool struct {
		l      *lhredis.Ledger
		prefix string
		leases map[string]ledger.Lease
	}
	var pools [2]*pool
	for i := range pools {
		l, p := newLedgerOn(t, client, noWindow)
		mustConfigure(t, l, basicSpec())
		mustKeepAlive(t, l, "llama", "h1", time.Minute)
		mustKeepAlive(t, l, "llama", "h2", time.Minute)
		state := p + ":{llama}:state"
		// gpu-0's breaker is closed with successes counted: a success
		// changes nothing (breaker_quiet). gpu-1's has failures
		// counted: a success resets them.
		client.HSet(ctx, state, "e:gpu-0:b", "closed 0 3 0 0 0", "e:gpu-1:b", "closed 2 0 0 0 0")
		pools[i] = &pool{l: l, prefix: p, leases: map[string]ledger.Lease{}}
	}
	grants := []struct {
		id     string
		kv     int64
		engine ledger.EngineID
	}{{"a", 100, "gpu-0"}, {"b", 150, "gpu-0"}, {"c", 120, "gpu-0"}, {"d", 90, "gpu-1"}, {"e", 80, "gpu-1"}, {"f", 60, "gpu-1"}}
	for _, p := range pools {
		for _, g := range grants {
			got, err := p.l.Acquire(ctx, req("h1", g.id, g.kv, 1, g.engine))
			if err != nil {
				t.Fatalf("Acquire %s: %v", g.id, err)
			}
			p.leases[g.id] = got.Lease
		}
	}
	finished := ledger.Usage{PromptTokens: 40, CompletionTokens: 25, Finished: true, Outcome: ledger.OutcomeOK}
	releases := []struct {
		what  string
		id    string
		ref   func(ledger.Lease) ledger.LeaseRef
		usage ledger.Usage
	}{
		{"the router's release, quiet breaker", "a", nil, finished},
		{"a bare release", "b", nil, ledger.Usage{PromptTokens: 5, CompletionTokens: 7}},
		{"a success a breaker with failures hears", "d", nil, finished},
		{"a failure", "e", nil, ledger.Usage{PromptTokens: 3, CompletionTokens: 1, Outcome: ledger.OutcomeStatus5xx}},
		{"a release by another holder", "c", func(l ledger.Lease) ledger.LeaseRef {
			r := l.Ref()
			r.Holder = "h2"
			return r
		}, finished},
		{"an unknown lease", "a", nil, finished},
		{"the engine's last lease", "c", nil, finished},
		{"the tenant's last lease", "f", nil, ledger.Usage{PromptTokens: 9, CompletionTokens: 9, Finished: true}},
	}
	for _, r := range releases {
		var got [2]string
		for i, p := range pools {
			if i == 1 {
				client.HSet(ctx, p.prefix+":{llama}:state", "sweep_at", "0")
			}
			ref := p.leases[r.id].Ref()
			if r.ref != nil {
				ref = r.ref(p.leases[r.id])
			}
			rel, err := p.l.Release(ctx, ref, r.usage)
			e := "no error"
			switch {
			case errors.Is(err, ledger.ErrNotHolder):
				e = "ErrNotHolder"
			case err != nil:
				e = err.Error()
			}
			got[i] = fmt.Sprintf("released %v, %s", rel.Released, e)
		}
		if got[0] != got[1] {
			t.Errorf("%s: inline %s, general path %s", r.what, got[0], got[1])
		}
		if a, b := poolRecord(t, client, pools[0].prefix), poolRecord(t, client, pools[1].prefix); a != b {
			t.Fatalf("after %s, the pools differ:\ninline:\n%s\ngeneral path:\n%s", r.what, a, b)
		}
	}
	// Every lease was released or unknown: nothing is left reserved.
	if rec := poolRecord(t, client, pools[0].prefix); !strings.Contains(rec, "leases 0\n") {
		t.Errorf("after every release:\n%s", rec)
	}
}

// releaseFields are the state fields a release writes: reservations,
// breakers, counters (c:, g: and n: fields).
var releaseFields = regexp.MustCompile(`^(e:[^:]+:(r|b|o|u)|t:[^:]+:(r|w)|c:.*|g:.*|n:.*)$`)

// msTime matches a time in ms (a breaker's opened or failed time), which
// two pools' releases write a millisecond apart.
var msTime = regexp.MustCompile(`\b1\d{12}\b`)

// poolRecord is what a release changes in pool llama under prefix: the
// state fields releaseFields names (times in ms as <ms>), and the sizes of the lease indexes.
func poolRecord(t *testing.T, client *goredis.Client, prefix string) string {
	t.Helper()
	ctx := ctxT(t)
	k := prefix + ":{llama}:"
	state, err := client.HGetAll(ctx, k+"state").Result()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for f, v := range state {
		if releaseFields.MatchString(f) {
			lines = append(lines, f+" = "+msTime.ReplaceAllString(v, "<ms>"))
		}
	}
	sort.Strings(lines)
	lines = append(lines,
		fmt.Sprintf("leases %d", client.HLen(ctx, k+"leases").Val()),
		fmt.Sprintf("req %d", client.HLen(ctx, k+"req").Val()),
		fmt.Sprintf("deadlines %d", client.ZCard(ctx, k+"deadlines").Val()),
		fmt.Sprintf("h1's leases %d", client.SCard(ctx, k+"holder:h1").Val()))
	return strings.Join(lines, "\n") + "\n"
}
