package redis

// Changes acknowledged by replicas (Options.WaitReplicas): the script and
// a WAIT in one pipeline on one connection, on Redis Cluster to the
// master of the pool's slot, following the cluster's redirections.

import (
	"context"
	"fmt"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/ledger"
)

// clusterRedirect reports whether err is Redis Cluster's answer that the
// slot is served elsewhere, or moving.
func clusterRedirect(err error) bool {
	for _, p := range []string{"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN"} {
		if goredis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// maxRedirects bounds the MOVED and ASK redirections runWait follows per
// call, as go-redis's cluster client does its own (its default, 3).
const maxRedirects = 3

// runWait runs a changing script and WAIT in one pipeline, so both use one
// connection and WAIT counts the replicas that have this script's writes.
// A library Redis does not hold is loaded and the pipeline sent again.
// On Redis Cluster the pipeline goes to the master of the pool's slot
// (WAIT has no key to route it by); a MOVED reply there (the slot moved,
// nothing ran) reloads the slot map and goes to the node it names, an ASK
// (the slot is moving and this pool's keys are gone from the node) goes
// to the importing node after ASKING, up to maxRedirects times. TRYAGAIN
// (the pool's keys are split between the two nodes) fails the call, which
// the caller retries: a call that fails with a redirection changed
// nothing.
func (l *store) runWait(ctx context.Context, script *fn, pool ledger.PoolID, args ...any) (reply, error) {
	if l.err != nil {
		return reply{}, l.err
	}
	keys, _ := keySchema(l.opts.Prefix, pool)
	argv := append([]any{l.argv1(l.opts.SweepBatch)}, args...)
	cc, cluster := l.client.(*goredis.ClusterClient)
	var node goredis.UniversalClient = l.client
	if cluster {
		n, err := cc.MasterForKey(ctx, keys.State)
		if err != nil {
			return reply{}, err
		}
		node = n
	}
	asking, loaded, redirects := false, false, 0
	for {
		var eval, wait *goredis.Cmd
		_, err := node.Pipelined(ctx, func(p goredis.Pipeliner) error {
			if asking {
				p.Do(ctx, "asking")
			}
			eval = p.FCall(ctx, script.name, keys.scriptKeys(), argv...)
			// WAIT's timeout is whole ms, and 0 would block forever.
			wait = p.Do(ctx, "wait", l.opts.WaitReplicas, max(1, l.opts.WaitTimeout.Milliseconds()))
			return nil
		})
		if err != nil && !loaded && functionMissing(eval.Err()) {
			if lerr := loadLibrary(ctx, node, l.scripts.lib); lerr != nil {
				return reply{}, fmt.Errorf("load the ledger's function library: %w", lerr)
			}
			loaded = true
			continue
		}
		if err := eval.Err(); err != nil {
			if !cluster || !clusterRedirect(err) {
				return reply{}, err
			}
			to, ask := redirectTarget(err)
			if to == "" || redirects >= maxRedirects {
				cc.ReloadState(ctx)
				return reply{}, err
			}
			redirects++
			n, nerr := masterAt(ctx, cc, to)
			if nerr != nil {
				return reply{}, fmt.Errorf("%w (following it: %v)", err, nerr)
			}
			node, asking, loaded = n, ask, false
			continue
		}
		n, err := wait.Int64()
		if err != nil {
			return reply{}, fmt.Errorf("WAIT: %w", err)
		}
		if n < int64(l.opts.WaitReplicas) {
			return reply{}, fmt.Errorf("%w: %d of %d within %s", ErrNotReplicated, n, l.opts.WaitReplicas, l.opts.WaitTimeout)
		}
		return decodeReply(eval.Val())
	}
}

// redirectTarget parses "MOVED <slot> <addr>" and "ASK <slot> <addr>":
// the address, and whether it is an ASK; "" for any other error.
func redirectTarget(err error) (addr string, ask bool) {
	f := strings.Fields(err.Error())
	if len(f) != 3 || (f[0] != "MOVED" && f[0] != "ASK") {
		return "", false
	}
	return f[2], f[0] == "ASK"
}

// masterAt returns the cluster client's client of the master at addr,
// reloading the slot map first (ForEachMaster reloads it before it
// returns the masters).
func masterAt(ctx context.Context, cc *goredis.ClusterClient, addr string) (*goredis.Client, error) {
	var mu sync.Mutex // guards found: fn runs on every master at once
	var found *goredis.Client
	err := cc.ForEachMaster(ctx, func(_ context.Context, c *goredis.Client) error {
		if c.Options().Addr == addr {
			mu.Lock()
			found = c
			mu.Unlock()
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, fmt.Errorf("no master at %s in the cluster's slot map", addr)
	}
	return found, nil
}
