package redis_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// TestFenceNeverWrapsNorOverwrites puts a pool's fencing sequence where no
// grant can take it (the state the red team's 2^53-1 reassert left before
// reassert.lua bounded it: the sequence at 2^53-1, or at 2^53 where Lua's
// doubles stop counting) and behind a held lease (an id a grant would
// overwrite): every Acquire then fails with ErrFenceExhausted and changes
// nothing, and the held lease is intact.
func TestFenceNeverWrapsNorOverwrites(t *testing.T) {
	srv := redisserver.Start(t)
	client := srv.Client()
	ctx := ctxT(t)
	l, p := newLedgerOn(t, client, noWindow)
	mustConfigure(t, l, basicSpec())
	mustKeepAlive(t, l, "llama", "h1", time.Minute)
	mustKeepAlive(t, l, "llama", "h2", time.Minute)
	held, err := l.Acquire(ctx, req("h1", "a", 600, 1, "gpu-0"))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	state := p + ":{llama}:state"
	for i, seq := range []string{"9007199254740991", "9007199254740992", "0"} {
		t.Run("seq="+seq, func(t *testing.T) {
			if err := client.HSet(ctx, state, "seq", seq).Err(); err != nil {
				t.Fatal(err)
			}
			before, err := l.Stats(ctx, "llama")
			if err != nil {
				t.Fatal(err)
			}
			_, err = l.Acquire(ctx, req("h2", fmt.Sprintf("b%d", i), 100, 1))
			if !errors.Is(err, ledger.ErrFenceExhausted) {
				t.Errorf("Acquire with the sequence at %s error = %v, want ErrFenceExhausted", seq, err)
			}
			after, err := l.Stats(ctx, "llama")
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(after.Engines, after.Tenants, after.Leases) != fmt.Sprint(before.Engines, before.Tenants, before.Leases) {
				t.Errorf("refused Acquire changed the pool:\n got %+v\nwant %+v", after.Engines, before.Engines)
			}
			if got := client.HGet(ctx, state, "seq").Val(); got != seq {
				t.Errorf("sequence after the refused Acquire = %s, want %s", got, seq)
			}
			ls, err := l.List(ctx, ledger.Filter{Pool: "llama"})
			if err != nil || len(ls) != 1 || ls[0] != held.Lease {
				t.Errorf("List = %+v, %v; want only %+v, intact", ls, err, held.Lease)
			}
			if ms, err := l.CheckTotals(ctx, "llama"); err != nil || len(ms) != 0 {
				t.Errorf("CheckTotals = %v, %v; want none", ms, err)
			}
		})
	}
}
