package redis_test

import (
	"context"
	"testing"

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
