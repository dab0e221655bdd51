package redis_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// commandCalls is how many times the server has run command name
// (lower case), scripts' calls included (INFO commandstats): an
// observation's scan of a pool's leases is one HVALS, and so is a List.
func commandCalls(t *testing.T, ctx context.Context, client *goredis.Client, name string) int64 {
	t.Helper()
	info, err := client.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats: %q: %v", line, err)
		}
		return n
	}
	return 0
}

// TestUnconfirmedSums checks the sums an engine's mark (e:<id>:u) keeps of
// its unconfirmed leases' slots and count, and that an observation of a
// marked engine scans the pool's leases only when it may confirm: Reassert
// adds to the sums and a release or an expiry takes away; an observation
// showing fewer sequences than the sums' slots confirms nothing and reads
// no lease; a mark written before the sums is scanned for and gets them;
// an observation showing every expected sequence confirms and removes the
// mark; a mark whose leases have all ended goes at the next observation,
// without a scan.
func TestUnconfirmedSums(t *testing.T) {
	srv := redisserver.Start(t)
	client := srv.Client()
	ctx := ctxT(t)
	l, p := newLedgerOn(t, client, ledger.Options{RecoveryWindow: -1, ConfirmGrace: time.Millisecond})
	ep := mustConfigure(t, l, basicSpec())
	mustKeepAlive(t, l, "llama", "h1", time.Minute)
	state := p + ":{llama}:state"
	at := time.Now()
	observe := func(shown int64) {
		t.Helper()
		at = at.Add(time.Millisecond)
		if _, err := l.Observe(ctx, ledger.Observation{Pool: "llama", Engine: "gpu-0", Running: shown, ObservedAt: at}); err != nil {
			t.Fatalf("Observe: %v", err)
		}
	}
	// mark returns e:gpu-0:u's fields after the reassert ms ("" when absent).
	mark := func() string {
		t.Helper()
		u, err := client.HGet(ctx, state, "e:gpu-0:u").Result()
		if err == goredis.Nil {
			return ""
		}
		if err != nil {
			t.Fatalf("HGET e:gpu-0:u: %v", err)
		}
		_, sums, _ := strings.Cut(u, " ")
		return sums
	}
	unconfirmed := func() int {
		t.Helper()
		ls, err := l.List(ctx, ledger.Filter{Pool: "llama"})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		n := 0
		for _, x := range ls {
			if x.Unconfirmed {
				n++
			}
		}
		return n
	}
	reassert := func(seq uint64, slots int64, ttl time.Duration) ledger.Lease {
		t.Helper()
		f := ledger.Fence{Epoch: ep, Seq: seq}
		x := ledger.Lease{ID: ledger.MakeLeaseID(f), Fence: f, Pool: "llama", Engine: "gpu-0", Tenant: "acme",
			Priority: "interactive", KVTokens: 10, Slots: slots, Holder: "h1", RequestID: ledger.RequestID("r" + strconv.FormatUint(seq, 10))}
		r, err := l.Reassert(ctx, x, ttl)
		if err != nil || !r.Lease.Unconfirmed {
			t.Fatalf("Reassert(%s) = %+v, %v; want an unconfirmed lease", x.ID, r.Lease, err)
		}
		return r.Lease
	}

	observe(0) // observed: a reasserted lease is unconfirmed
	reassert(1, 1, time.Minute)
	two := reassert(2, 2, time.Minute)
	reassert(3, 1, time.Minute)
	if got := mark(); got != "4 3" {
		t.Fatalf("mark after three reasserts of 1, 2 and 1 slots = %q, want \"4 3\"", got)
	}
	if _, err := l.Release(ctx, two.Ref(), ledger.Usage{}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if got := mark(); got != "2 2" {
		t.Fatalf("mark after releasing the 2-slot lease = %q, want \"2 2\"", got)
	}

	h := commandCalls(t, ctx, client, "hvals")
	observe(1)
	if n := commandCalls(t, ctx, client, "hvals"); n != h {
		t.Errorf("an observation showing 1 sequence of 2 unconfirmed slots ran HVALS %d times, want none", n-h)
	}
	if n := unconfirmed(); n != 2 || mark() != "2 2" {
		t.Errorf("after it: %d unconfirmed leases, mark %q; want 2, \"2 2\"", n, mark())
	}

	// A mark written before the sums: the observation scans, and writes them.
	u := client.HGet(ctx, state, "e:gpu-0:u").Val()
	since, _, _ := strings.Cut(u, " ")
	client.HSet(ctx, state, "e:gpu-0:u", since)
	h = commandCalls(t, ctx, client, "hvals") // List reads the leases with HVALS too
	observe(1)
	if n := commandCalls(t, ctx, client, "hvals"); n != h+1 {
		t.Errorf("an observation of a mark without sums ran HVALS %d times, want 1", n-h)
	}
	if got := client.HGet(ctx, state, "e:gpu-0:u").Val(); got != since+" 2 2" || unconfirmed() != 2 {
		t.Errorf("after it: mark %q, %d unconfirmed; want %q, 2", got, unconfirmed(), since+" 2 2")
	}

	time.Sleep(5 * time.Millisecond) // past ConfirmGrace
	observe(2)
	if n := unconfirmed(); n != 0 || mark() != "" {
		t.Errorf("after an observation showing every expected sequence: %d unconfirmed, mark %q; want 0, none", n, mark())
	}

	// An unconfirmed lease that expires leaves the sums at 0; the next
	// observation removes the mark without a scan.
	reassert(4, 3, 50*time.Millisecond)
	if got := mark(); got != "3 1" {
		t.Fatalf("mark after reasserting 3 slots = %q, want \"3 1\"", got)
	}
	time.Sleep(100 * time.Millisecond)
	if sw, err := l.Sweep(ctx, "llama", 64); err != nil || sw.Expired != 1 {
		t.Fatalf("Sweep = %+v, %v; want 1 expired", sw, err)
	}
	if got := mark(); got != "0 0" {
		t.Fatalf("mark after the lease expired = %q, want \"0 0\"", got)
	}
	h = commandCalls(t, ctx, client, "hvals")
	observe(0)
	if n := commandCalls(t, ctx, client, "hvals"); n != h || mark() != "" {
		t.Errorf("an observation of a mark with no lease left ran HVALS %d times, left mark %q; want none, none", n-h, mark())
	}
}
