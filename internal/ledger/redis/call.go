package redis

import (
	"context"
	"fmt"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/ledger"
)

// A function call's fixed part, built once: go-redis's FCall boxes every
// key into the command's arguments and the store formats ARGV[1] on every
// call, which on the request path (an Acquire and a Release per request)
// was a dozen allocations a call for values that never change.

// callHead is the command's head for one function on one pool: FCALL, the
// function's name, the number of keys and the keys.
type callHead struct {
	head []any
	keys []string
}

// callHeads caches callHead by script and pool.
type callHeads struct {
	m sync.Map // headKey -> *callHead
}

type headKey struct {
	script *fn
	pool   ledger.PoolID
}

// get returns the head of script's calls on pool, under prefix.
func (c *callHeads) get(prefix string, script *fn, pool ledger.PoolID) *callHead {
	k := headKey{script, pool}
	if h, ok := c.m.Load(k); ok {
		return h.(*callHead)
	}
	keys, _ := keySchema(prefix, pool)
	sk := keys.scriptKeys()
	h := &callHead{head: make([]any, 0, 3+len(sk)), keys: sk}
	h.head = append(h.head, "fcall", script.name, len(sk))
	for _, key := range sk {
		h.head = append(h.head, key)
	}
	got, _ := c.m.LoadOrStore(k, h)
	return got.(*callHead)
}

// eval runs script on pool's keys with argv1 and args as ARGV: FCALL, and
// again once the library is loaded when Redis does not have it.
func (l *store) eval(ctx context.Context, script *fn, pool ledger.PoolID, argv1 string, args []any) (any, error) {
	h := l.heads.get(l.opts.Prefix, script, pool)
	argv := make([]any, 0, len(h.head)+1+len(args))
	argv = append(append(append(argv, h.head...), argv1), args...)
	call := func() (any, error) {
		cmd := goredis.NewCmd(ctx, argv...)
		cmd.SetFirstKeyPos(3) // as go-redis's FCall: Cluster routes by the first key
		return l.pipe.process(ctx, cmd)
	}
	v, err := call()
	if !functionMissing(err) {
		return v, err
	}
	if err := loadLibrary(ctx, l.client, l.scripts.lib); err != nil {
		return nil, fmt.Errorf("load the ledger's function library: %w", err)
	}
	return call()
}
