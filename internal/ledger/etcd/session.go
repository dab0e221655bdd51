package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/internal/ledger"
)

// A holder session is an etcd lease of ceil(ttl) seconds with the holder's
// live marker attached. KeepAlive on a live session is one KeepAliveOnce
// (Grant of a new lease and moving the marker when the TTL changes) plus a
// guarded update of the holder's expiry index entry. When etcd expires the
// lease the marker disappears: the session is dead, and the sweeper revokes
// its leases and then deletes the holder record, after which the id may
// start a new session.

// KeepAlive creates or extends the holder's session to at least now+ttl.
func (l *store) KeepAlive(ctx context.Context, pool ledger.PoolID, holder ledger.HolderID, ttl time.Duration) (ledger.Session, error) {
	if err := l.sweepDue(ctx, pool); err != nil {
		return ledger.Session{}, err
	}
	hk, lk, livePrefix := l.keys.holder(pool, holder), l.keys.live(pool, holder), l.keys.kind(pool, kindLive)
	ttlSec := ceilSeconds(ttl)
	var out ledger.Session
	err := l.retry(ctx, func() (bool, error) {
		v, err := l.read(ctx, []string{l.keys.meta(pool), l.keys.recovering(pool), hk, lk}, span{from: livePrefix, countOnly: true})
		if err != nil {
			return false, err
		}
		m, err := l.meta(v, pool)
		if err != nil {
			return false, err
		}
		base := l.opts.Clock.Now()
		now := time.UnixMilli(base.UnixMilli())
		expires := now.Add(ledger.CeilMillis(ttl))
		out = ledger.Session{Pool: pool, Holder: holder, Expires: expires, Epoch: ledger.Epoch(m.Epoch),
			RecoveringUntil: l.recoveringUntil(v, pool, now), LiveHolders: int(v.counts[livePrefix])}
		next := holderRec{TTLSec: ttlSec, ExpiresMs: expires.UnixMilli()}
		var old holderRec
		if v.has(hk) {
			if err := decode(hk, v.value(hk), &old); err != nil {
				return false, err
			}
			if !v.has(lk) {
				return false, fmt.Errorf("%w: %s in pool %s", ledger.ErrSessionExpired, holder, pool)
			}
		}
		var granted clientv3.LeaseID
		switch {
		case v.has(hk) && old.TTLSec == ttlSec:
			// Same TTL: extend the session's own etcd lease.
			if _, err := l.cli.KeepAliveOnce(ctx, clientv3.LeaseID(old.EtcdLease)); err != nil {
				if errors.Is(err, rpctypes.ErrLeaseNotFound) {
					return false, fmt.Errorf("%w: %s in pool %s", ledger.ErrSessionExpired, holder, pool)
				}
				return false, fmt.Errorf("keep the session lease alive: %w", err)
			}
			next.EtcdLease = old.EtcdLease
		default:
			// New session, or a new TTL: a new etcd lease carries the marker.
			resp, err := l.cli.Grant(ctx, ttlSec)
			if err != nil {
				return false, fmt.Errorf("grant session lease: %w", err)
			}
			granted = resp.ID
			next.EtcdLease = int64(resp.ID)
			if !v.has(hk) {
				out.LiveHolders++
			}
		}
		ops := []clientv3.Op{
			clientv3.OpPut(hk, encode(next)),
			clientv3.OpPut(l.keys.holderExp(pool, next.ExpiresMs, holder), ""),
		}
		if v.has(hk) && old.ExpiresMs != next.ExpiresMs {
			ops = append(ops, clientv3.OpDelete(l.keys.holderExp(pool, old.ExpiresMs, holder)))
		}
		if granted != 0 {
			ops = append(ops, clientv3.OpPut(lk, "", clientv3.WithLease(granted)))
		}
		ok, err := l.commit(ctx, v, ops...)
		switch {
		case granted != 0 && !ok:
			l.revokeQuietly(granted)
		case granted != 0 && ok && v.has(hk):
			l.revokeQuietly(clientv3.LeaseID(old.EtcdLease)) // nothing is attached to it any more
		}
		return ok, err
	})
	if err != nil {
		return ledger.Session{}, err
	}
	if !out.RecoveringUntil.IsZero() {
		// Informational (readiness), so read after the session's
		// transaction rather than under its guards: observations do not
		// make keepalives retry.
		if out.Recovered, err = l.recoveredEngines(ctx, pool); err != nil {
			return ledger.Session{}, err
		}
	}
	return out, nil
}

// recoveredEngines counts the pool's configured engines that have
// recovered in its current epoch (ledger.EngineState.Recovered), read at
// one revision.
func (l *store) recoveredEngines(ctx context.Context, pool ledger.PoolID) (int, error) {
	engines, fresh := l.keys.kind(pool, kindEngine), l.keys.kind(pool, kindFresh)
	v, err := l.read(ctx, []string{l.keys.meta(pool)}, span{from: engines}, span{from: fresh, keysOnly: true})
	if err != nil {
		return 0, err
	}
	m, err := l.meta(v, pool)
	if err != nil {
		return 0, err
	}
	isFresh := map[string]bool{}
	for _, kv := range v.ranges[fresh] {
		isFresh[string(kv.Key)] = true
	}
	recs := map[string][]byte{}
	for _, kv := range v.ranges[engines] {
		recs[string(kv.Key)] = kv.Value
	}
	now := l.now()
	n := 0
	for _, spec := range m.Spec.Engines {
		var r engineRec
		ek := l.keys.engine(pool, spec.ID)
		if b := recs[ek]; b != nil {
			if err := decode(ek, b, &r); err != nil {
				return 0, err
			}
		}
		if admissionState(spec, r, isFresh[l.keys.fresh(pool, spec.ID)], now).Recovered(now, l.observedSince(m), m.Spec.Mode()) {
			n++
		}
	}
	return n, nil
}
