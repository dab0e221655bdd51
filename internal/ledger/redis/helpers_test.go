package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// deleteKeys deletes every key under prefix.
func deleteKeys(t testing.TB, ctx context.Context, c *goredis.Client, prefix string) {
	t.Helper()
	iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("scan %s:*: %v", prefix, err)
	}
	if len(keys) > 0 {
		if err := c.Del(ctx, keys...).Err(); err != nil {
			t.Fatalf("delete %d keys of %s: %v", len(keys), prefix, err)
		}
	}
}

// keysOf lists every key under prefix.
func keysOf(t testing.TB, ctx context.Context, c *goredis.Client, prefix string) []string {
	t.Helper()
	keys, err := c.Keys(ctx, prefix+":*").Result()
	if err != nil {
		t.Fatalf("KEYS %s:*: %v", prefix, err)
	}
	return keys
}

// seedEnv names the environment variable that reproduces a randomized
// test: LEASEHOLD_TEST_SEED=<seed> runs the one round with that seed.
const seedEnv = "LEASEHOLD_TEST_SEED"

// seeds returns the seeds of a randomized test's rounds: the one in
// LEASEHOLD_TEST_SEED when set, else rounds seeds from the clock.
func seeds(t *testing.T, rounds int) []uint64 {
	t.Helper()
	if v, ok := os.LookupEnv(seedEnv); ok {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s = %q: want an unsigned integer", seedEnv, v)
		}
		return []uint64{s}
	}
	out := make([]uint64, rounds)
	base := uint64(time.Now().UnixNano())
	for i := range out {
		out[i] = base + uint64(i)
	}
	return out
}

// seededRounds runs round as one subtest per seed (see seeds), each with its
// own generator on stream, logging how to rerun a failing one.
func seededRounds(t *testing.T, rounds int, stream uint64, round func(t *testing.T, rng *rand.Rand)) {
	t.Helper()
	for _, seed := range seeds(t, rounds) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			reportSeed(t, seed)
			round(t, rand.New(rand.NewPCG(seed, stream)))
		})
	}
}

// reportSeed logs, if t fails, how to rerun the round with seed.
func reportSeed(t *testing.T, seed uint64) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("reproduce with %s=%d go test -run '%s' ./internal/ledger/redis", seedEnv, seed, t.Name())
		}
	})
}
