package redis

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// setCmd is a script call that sets key to val and answers val.
func setCmd(ctx context.Context, key, val string) *goredis.Cmd {
	cmd := goredis.NewCmd(ctx, "eval", "redis.call('set', KEYS[1], ARGV[1]) return ARGV[1]", 1, key, val)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// busy waits until n pipelines are in flight and q calls queued on p.
func (p *pipe) busy(t *testing.T, n, q int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		s, l := p.sending, len(p.queue)
		p.mu.Unlock()
		if s == n && l == q {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pipe: %d pipelines in flight and %d calls queued, want %d and %d", s, l, n, q)
		}
		runtime.Gosched()
	}
}

// TestPipe holds Redis's writes (CLIENT PAUSE WRITE) while calls go through
// one pipe: maxPipes calls go out at once, the rest queue and go together
// once Redis answers, each with its own answer; a queued call whose context
// ends returns its context's error and is never sent.
func TestPipe(t *testing.T) {
	srv := redisserver.Start(t)
	client := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := &pipe{client: client}
	if err := client.Do(ctx, "client", "pause", 2000, "write").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	const queued = 5
	var wg sync.WaitGroup
	got := make([]any, maxPipes+queued)
	errs := make([]error, maxPipes+queued)
	call := func(i int) {
		defer wg.Done()
		got[i], errs[i] = p.process(ctx, setCmd(ctx, fmt.Sprint("pipe:k", i), fmt.Sprint("v", i)))
	}
	for i := range maxPipes {
		wg.Add(1)
		go call(i)
	}
	p.busy(t, maxPipes, 0)
	for i := range queued {
		wg.Add(1)
		go call(maxPipes + i)
		p.busy(t, maxPipes, i+1)
	}
	// One more, whose context ends while it waits in the queue.
	short, cancelShort := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() {
		_, err := p.process(short, setCmd(short, "pipe:gone", "x"))
		gone <- err
	}()
	p.busy(t, maxPipes, queued+1)
	cancelShort()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Errorf("a queued call whose context ended returned %v, want context.Canceled", err)
	}
	wg.Wait()
	for i := range got {
		if want := fmt.Sprint("v", i); errs[i] != nil || got[i] != want {
			t.Errorf("call %d = %v, %v; want %s", i, got[i], errs[i], want)
		}
		if v, err := client.Get(ctx, fmt.Sprint("pipe:k", i)).Result(); err != nil || v != fmt.Sprint("v", i) {
			t.Errorf("key of call %d = %q, %v; want v%d", i, v, err, i)
		}
	}
	if n, err := client.Exists(ctx, "pipe:gone").Result(); err != nil || n != 0 {
		t.Errorf("the call that left the queue was sent (EXISTS = %d, %v)", n, err)
	}
	p.busy(t, 0, 0)
}
