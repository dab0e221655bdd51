package redis

import (
	"context"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// pipe sends script calls to Redis, combining concurrent ones into
// pipelines: at most maxPipes are in flight, and a call that finds them all
// busy waits in a queue that the next pipeline takes whole. A router makes
// two ledger calls per request (Acquire, Release) from as many goroutines
// as it has requests; one round trip per call cost each a write and a read
// system call and a wake-up. Under load the calls now share them; a lone
// call goes out at once, on its own, as before.
//
// Each call keeps its own deadline: it returns when its context ends,
// whether still queued (then it is never sent) or in flight (then its
// outcome is unknown, as for a call whose read timed out). A pipeline runs
// under the latest deadline of its calls, and none of their cancellations.
// Redis runs each script atomically whatever else the pipeline holds: the
// ledger's semantics do not change, only how the calls travel.
type pipe struct {
	client goredis.UniversalClient

	mu      sync.Mutex // guards queue and sending
	queue   []*pipeCall
	sending int // pipelines in flight
}

// maxPipes bounds the pipelines in flight at once.
const maxPipes = 2

// pipeCall is one call through the pipe.
type pipeCall struct {
	ctx  context.Context
	cmd  *goredis.Cmd
	done chan struct{} // closed once cmd has its result
	// taken is set, under pipe.mu, when a pipeline takes the call from the
	// queue: from then on only the pipeline touches cmd until done closes.
	taken bool
}

// process sends cmd and returns its result, or ctx's error if ctx ends
// first (and then cmd must not be used: a pipeline may still write it).
func (p *pipe) process(ctx context.Context, cmd *goredis.Cmd) (any, error) {
	c := &pipeCall{ctx: ctx, cmd: cmd, done: make(chan struct{})}
	p.mu.Lock()
	if p.sending < maxPipes {
		p.sending++
		batch := append(p.take(), c)
		p.mu.Unlock()
		p.run(batch)
		return cmd.Result()
	}
	p.queue = append(p.queue, c)
	p.mu.Unlock()
	select {
	case <-c.done:
		return cmd.Result()
	case <-ctx.Done():
	}
	p.mu.Lock()
	if !c.taken {
		for i, q := range p.queue {
			if q == c {
				p.queue = append(p.queue[:i], p.queue[i+1:]...)
				break
			}
		}
	}
	p.mu.Unlock()
	return nil, ctx.Err()
}

// take empties the queue into a batch, marking its calls taken. p.mu is
// held.
func (p *pipe) take() []*pipeCall {
	batch := p.queue
	for _, c := range batch {
		c.taken = true
	}
	p.queue = nil
	return batch
}

// run sends batch; calls queued meanwhile go on in a goroutine of their own
// (until the queue is empty), so that the caller's own call returns now.
func (p *pipe) run(batch []*pipeCall) {
	p.send(batch)
	p.mu.Lock()
	if len(p.queue) == 0 {
		p.sending--
		p.mu.Unlock()
		return
	}
	next := p.take()
	p.mu.Unlock()
	go func() {
		for batch := next; ; {
			p.send(batch)
			p.mu.Lock()
			if len(p.queue) == 0 {
				p.sending--
				p.mu.Unlock()
				return
			}
			batch = p.take()
			p.mu.Unlock()
		}
	}()
}

// send sends the calls of batch whose context has not ended, in one round
// trip, and closes every call's done.
func (p *pipe) send(batch []*pipeCall) {
	live := batch[:0:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.cmd.SetErr(err)
			close(c.done)
			continue
		}
		live = append(live, c)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		_ = p.client.Process(live[0].ctx, live[0].cmd)
	default:
		ctx, cancel := batchContext(live)
		_, _ = p.client.Pipelined(ctx, func(pl goredis.Pipeliner) error {
			for _, c := range live {
				_ = pl.Process(ctx, c.cmd)
			}
			return nil
		})
		cancel()
	}
	for _, c := range live {
		close(c.done)
	}
}

// batchContext is a pipeline's context: the first call's values, none of
// the calls' cancellations, and the latest of their deadlines (none if a
// call has none).
func batchContext(calls []*pipeCall) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(calls[0].ctx)
	var latest time.Time
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			return ctx, func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(ctx, latest)
}
