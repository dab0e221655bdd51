package etcd

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Deadline and freshness markers are attached to etcd leases so that etcd's
// clock, not ours, ends them. One Grant per marker would double the cost of
// an acquire, so markers share etcd leases: leaseUntil returns a cached
// lease that expires no earlier than the deadline and at most LeaseSlack
// after it, granting a new one only when none fits. A new lease gets the
// longest whole-second TTL that ends within LeaseSlack of the deadline (at
// least the deadline rounded up), so it also serves the grants of the next
// LeaseSlack. A marker therefore lives at least as long as asked and at most
// about max(LeaseSlack+bucketQuantum, 1s) + etcd's expiry tick longer.

// bucketQuantum is the resolution of the shared-lease cache.
const bucketQuantum = 100 * time.Millisecond

type bucket struct {
	id      clientv3.LeaseID
	expires time.Time // conservative: granted no earlier than this - TTL
}

// leaseBuckets caches shared etcd leases by expiry.
type leaseBuckets struct {
	// mu guards bySlot.
	mu     sync.Mutex
	bySlot map[int64]bucket // expires / bucketQuantum -> lease
}

func (b *leaseBuckets) init() { b.bySlot = map[int64]bucket{} }

// reset forgets every cached lease (the store was wiped or a lease vanished).
func (b *leaseBuckets) reset() {
	b.mu.Lock()
	clear(b.bySlot)
	b.mu.Unlock()
}

func slotOf(t time.Time) int64 { return t.UnixNano() / int64(bucketQuantum) }

// leaseUntil returns an etcd lease that lives at least until deadline.
// base is the clock reading deadline was computed from.
func (l *store) leaseUntil(ctx context.Context, base, deadline time.Time) (clientv3.LeaseID, error) {
	b := &l.buckets
	b.mu.Lock()
	for s, bk := range b.bySlot {
		if bk.expires.Before(base) {
			delete(b.bySlot, s)
		}
	}
	last := slotOf(deadline.Add(l.opts.LeaseSlack))
	for s := slotOf(deadline); s <= last; s++ {
		if bk, ok := b.bySlot[s]; ok && !bk.expires.Before(deadline) {
			b.mu.Unlock()
			return bk.id, nil
		}
	}
	b.mu.Unlock()

	// With one TTL, a lease ending exactly at the deadline would serve no
	// later call; ending up to LeaseSlack after it serves the next
	// LeaseSlack of them.
	d := deadline.Sub(base)
	ttl := max(ceilSeconds(d), int64((d+l.opts.LeaseSlack)/time.Second))
	resp, err := l.cli.Grant(ctx, ttl)
	if err != nil {
		return 0, fmt.Errorf("grant %ds lease: %w", ttl, err)
	}
	l.seeHeader(resp.ResponseHeader.Revision, resp.ResponseHeader.RaftTerm)
	exp := base.Add(time.Duration(ttl) * time.Second)
	b.mu.Lock()
	b.bySlot[slotOf(exp)] = bucket{id: resp.ID, expires: exp}
	b.mu.Unlock()
	return resp.ID, nil
}

// ceilSeconds rounds d up to whole seconds, at least 1: an etcd lease may
// live a little longer than asked, never shorter.
func ceilSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}
