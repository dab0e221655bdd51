package etcd

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Configure applies spec. When the pool's meta record is missing (first
// use, or the store lost it) it mints a new epoch, clears whatever is left
// under the pool's prefix and starts the recovery window; otherwise it
// replaces the spec and keeps epoch, engine state and leases.
func (l *store) Configure(ctx context.Context, spec ledger.PoolSpec) (ledger.Epoch, error) {
	pool := spec.Name
	mk := l.keys.meta(pool)
	var epoch ledger.Epoch
	err := l.retryPool(ctx, pool, func() (bool, error) {
		v, err := l.read(ctx, []string{mk})
		if err != nil {
			return false, err
		}
		if v.has(mk) {
			m, err := l.meta(v, pool)
			if err != nil {
				return false, err
			}
			epoch = ledger.Epoch(m.Epoch)
			next := *m
			next.Spec = spec
			if encode(next) == encode(*m) {
				return true, nil
			}
			ops, err := l.keepRemovedSpecs(ctx, v, m.Spec, spec)
			if err != nil {
				return false, err
			}
			return l.commit(ctx, v, append(ops, clientv3.OpPut(mk, encode(next)))...)
		}
		return l.createPool(ctx, v, spec, &epoch)
	})
	if err != nil {
		return ledger.NoEpoch, err
	}
	return epoch, nil
}

// keepRemovedSpecs returns the writes that keep, in their records, the last
// spec of each engine and tenant that next drops from prev while it still
// has leases: Grow holds those leases to it. The records join v's guards.
func (l *store) keepRemovedSpecs(ctx context.Context, v *view, prev, next ledger.PoolSpec) ([]clientv3.Op, error) {
	pool := next.Name
	ekey := func(e ledger.EngineSpec) string { return l.keys.engine(pool, e.ID) }
	tkey := func(t ledger.TenantSpec) string { return l.keys.tenant(pool, t.Name) }
	engines := dropped(prev.Engines, next.Engines, ekey)
	tenants := dropped(prev.Tenants, next.Tenants, tkey)
	keys := make([]string, 0, len(engines)+len(tenants))
	for _, e := range engines {
		keys = append(keys, ekey(e))
	}
	for _, t := range tenants {
		keys = append(keys, tkey(t))
	}
	for chunk := range slices.Chunk(keys, maxReadOps) {
		if err := l.readMore(ctx, v, chunk); err != nil {
			return nil, err
		}
	}
	ops, err := keepSpecs[ledger.EngineSpec, engineRec](nil, v, engines, ekey)
	if err != nil {
		return nil, err
	}
	return keepSpecs[ledger.TenantSpec, tenantRec](ops, v, tenants, tkey)
}

// dropped returns the specs of prev whose key is not a key of next.
func dropped[S any](prev, next []S, key func(S) string) []S {
	var out []S
	for _, s := range prev {
		if !slices.ContainsFunc(next, func(n S) bool { return key(n) == key(s) }) {
			out = append(out, s)
		}
	}
	return out
}

// specKeeper is a record that can keep its row's last spec.
type specKeeper[S, R any] interface {
	*R
	// keep stores s in the record if it still counts leases, and
	// reports whether it did.
	keep(s S) bool
}

// keepSpecs appends to ops a write of each spec's record (read in v) that
// keeps the spec.
func keepSpecs[S, R any, P specKeeper[S, R]](ops []clientv3.Op, v *view, specs []S, key func(S) string) ([]clientv3.Op, error) {
	for _, s := range specs {
		r, err := record[R](v, key(s))
		if err != nil {
			return nil, err
		}
		if P(&r).keep(s) {
			ops = append(ops, clientv3.OpPut(key(s), encode(r)))
		}
	}
	return ops, nil
}

// createPool writes a new pool incarnation: meta with a fresh epoch, the
// sequence, and the recovery marker on an etcd lease of the window's TTL.
func (l *store) createPool(ctx context.Context, v *view, spec ledger.PoolSpec, epoch *ledger.Epoch) (bool, error) {
	pool := spec.Name
	now := l.opts.Clock.Now()
	e := l.mintEpoch(pool, now)
	m := metaRec{Epoch: uint64(e), CreatedMs: now.UnixMilli(), Spec: spec}
	// Clear what a lost meta record left behind (etcd refuses a delete
	// range and puts inside it in one transaction); nothing writes below
	// the pool while its meta record is missing.
	clear, err := l.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(l.keys.meta(pool)), "=", 0)).
		Then(clientv3.OpDelete(l.keys.pool(pool), clientv3.WithPrefix())).Commit()
	if err != nil {
		return false, fmt.Errorf("clear pool: %w", err)
	}
	if !clear.Succeeded {
		return false, nil
	}
	ops := []clientv3.Op{
		clientv3.OpPut(l.keys.meta(pool), encode(m)),
		clientv3.OpPut(l.keys.seq(pool), "0"),
	}
	var window clientv3.LeaseID
	if w := l.opts.RecoveryWindow; w > 0 {
		resp, err := l.cli.Grant(ctx, ceilSeconds(w))
		if err != nil {
			return false, fmt.Errorf("grant recovery window: %w", err)
		}
		window = resp.ID
		rec := windowRec{
			UntilMs: time.UnixMilli(now.UnixMilli()).Add(ledger.CeilMillis(w)).UnixMilli(),
			GoneMs:  l.opts.Clock.Now().Add(time.Duration(resp.TTL)*time.Second + etcdExpiryTick).UnixMilli(),
		}
		ops = append(ops, clientv3.OpPut(l.keys.recovering(pool), rec.String(), clientv3.WithLease(window)))
	}
	ok, err := l.commit(ctx, v, ops...)
	if !ok && window != 0 {
		l.revokeQuietly(window)
	}
	if ok {
		*epoch = e
		l.seeEpoch(pool, e)
	}
	return ok, err
}

// mintEpoch returns max(now in µs, last epoch seen for pool + 1). The number
// only has to be new and greater; nothing compares it with a clock.
func (l *store) mintEpoch(pool ledger.PoolID, now time.Time) ledger.Epoch {
	l.epochMu.Lock()
	defer l.epochMu.Unlock()
	e := ledger.Epoch(now.UnixMicro())
	if last := l.lastEpoch[pool]; e <= last {
		e = last + 1
	}
	return e
}

func (l *store) revokeQuietly(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, _ = l.cli.Revoke(ctx, id)
}

// readEngine reads a pool's meta and one configured engine's record:
// ErrUnknownEngine if the pool does not configure it.
func (l *store) readEngine(ctx context.Context, pool ledger.PoolID, engine ledger.EngineID) (*view, *metaRec, ledger.EngineSpec, engineRec, error) {
	v, err := l.read(ctx, []string{l.keys.meta(pool), l.keys.engine(pool, engine)})
	if err != nil {
		return nil, nil, ledger.EngineSpec{}, engineRec{}, err
	}
	m, err := l.meta(v, pool)
	if err != nil {
		return nil, nil, ledger.EngineSpec{}, engineRec{}, err
	}
	spec, ok := m.engine(engine)
	if !ok {
		return nil, nil, ledger.EngineSpec{}, engineRec{}, fmt.Errorf("%w: %s in pool %s", ledger.ErrUnknownEngine, engine, pool)
	}
	r, err := l.engineRec(v, pool, engine)
	if err != nil {
		return nil, nil, ledger.EngineSpec{}, engineRec{}, err
	}
	return v, m, spec, r, nil
}

// SetDraining drains or undrains a configured engine.
func (l *store) SetDraining(ctx context.Context, pool ledger.PoolID, engine ledger.EngineID, draining bool) error {
	ek := l.keys.engine(pool, engine)
	err := l.retryPool(ctx, pool, func() (bool, error) {
		v, _, _, r, err := l.readEngine(ctx, pool, engine)
		if err != nil {
			return false, err
		}
		if r.Draining == draining && v.has(ek) {
			return true, nil
		}
		r.Draining = draining
		return l.commit(ctx, v, clientv3.OpPut(ek, encode(r)))
	})
	if err != nil {
		return err
	}
	return nil
}

// Observe applies telemetry: it sets the correction, clears the orphan
// charge if the observation arrives after its hold, confirms what it can of
// the engine's Unconfirmed leases (confirm), and refreshes the engine's
// fresh marker, attached to an etcd lease of StaleAfter.
func (l *store) Observe(ctx context.Context, obs ledger.Observation) (ledger.Observed, error) {
	if err := l.sweepDue(ctx, obs.Pool); err != nil {
		return ledger.Observed{}, err
	}
	pool := obs.Pool
	ek := l.keys.engine(pool, obs.Engine)
	var out ledger.Observed
	err := l.retryPool(ctx, pool, func() (bool, error) {
		v, m, spec, r, err := l.readEngine(ctx, pool, obs.Engine)
		if err != nil {
			return false, err
		}
		out.Epoch = ledger.Epoch(m.Epoch)
		if r.Obs != nil && obs.ObservedAt.UnixNano() <= r.Obs.AtNs {
			out.Applied = false
			return true, nil
		}
		// The recovery marker decides the correction (ledger.CorrectionOf)
		// and joins the transaction's guards.
		if err := l.readMore(ctx, v, []string{l.keys.recovering(pool)}); err != nil {
			return false, err
		}
		base := l.opts.Clock.Now()
		r.Obs = &obsRec{KVUsed: obs.KVTokensUsed, KVTotal: obs.KVTokensTotal, Running: obs.Running, Waiting: obs.Waiting, AtNs: obs.ObservedAt.UnixNano()}
		r.ObservedAtMs = base.UnixMilli()
		inWindow := !l.recoveringUntil(v, pool, time.UnixMilli(r.ObservedAtMs)).IsZero()
		r.CorrectionKV, r.CorrectionSlots = ledger.CorrectionOf(obs, r.ReservedKV, r.ReservedSlots, inWindow)
		if r.ObservedAtMs >= r.OrphanUntilMs {
			// Arrived after the orphans' hold: what they still run is
			// in the correction now.
			r.OrphanKV, r.OrphanSlots, r.OrphanUntilMs = 0, 0, 0
		}
		if r.ReassertedMs > r.ConfirmedMs {
			if err := l.confirm(ctx, v, pool, obs, &r); err != nil {
				return false, err
			}
		}
		ops := []clientv3.Op{clientv3.OpPut(ek, encode(r))}
		if spec.StaleAfter > 0 {
			id, err := l.leaseUntil(ctx, base, base.Add(spec.StaleAfter))
			if err != nil {
				return false, err
			}
			ops = append(ops, clientv3.OpPut(l.keys.fresh(pool, obs.Engine), strconv.FormatInt(r.ObservedAtMs, 10), clientv3.WithLease(id)))
		}
		ok, err := l.commit(ctx, v, ops...)
		out.Applied = ok
		return ok, err
	})
	if err != nil {
		return ledger.Observed{}, err
	}
	return out, nil
}

// confirm applies an observation arriving at r.ObservedAtMs to the
// Unconfirmed leases of the engine of record r (ledger.Confirms): when it
// shows every lease ledger.ExpectedAt then, the leases reasserted at least
// ConfirmGrace before are confirmed (r.ConfirmedMs moves up to there).
// It reads every lease of the pool, which only an engine with Unconfirmed
// leases costs; finding none left, it clears r.ReassertedMs. Every lease
// change on the engine writes r, whose guard covers this decision.
func (l *store) confirm(ctx context.Context, v *view, pool ledger.PoolID, obs ledger.Observation, r *engineRec) error {
	leases := l.keys.kind(pool, kindLease)
	if err := l.readMore(ctx, v, nil, span{from: leases}); err != nil {
		return err
	}
	arrived := time.UnixMilli(r.ObservedAtMs)
	by := arrived.Add(-l.opts.ConfirmGrace).UnixMilli()
	var expected int64
	pending := false
	for _, kv := range v.ranges[leases] {
		var lr leaseRec
		if err := decode(string(kv.Key), kv.Value, &lr); err != nil {
			return err
		}
		if lr.Engine != obs.Engine {
			continue
		}
		if ledger.ExpectedAt(lr.lease(pool), arrived, l.opts.ConfirmGrace) {
			expected += lr.Slots
		}
		pending = pending || r.unconfirmed(lr)
	}
	switch {
	case !pending:
		r.ReassertedMs = 0
	case ledger.Confirms(obs, expected):
		r.ConfirmedMs = max(r.ConfirmedMs, by)
	}
	return nil
}

// Pools lists configured pools, sorted.
func (l *store) Pools(ctx context.Context) ([]ledger.PoolID, error) {
	resp, err := l.cli.Get(ctx, l.keys.metaPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("read pools: %w", err)
	}
	l.seeHeader(resp.Header.Revision, resp.Header.RaftTerm)
	pools := make([]ledger.PoolID, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if p, ok := l.keys.parseMeta(string(kv.Key)); ok {
			pools = append(pools, p)
		}
	}
	slices.Sort(pools)
	return pools, nil
}

// List returns one pool's outstanding leases matching f, ordered by
// fence. It reads every lease of the pool, with the engine records that
// say which are Unconfirmed, at one revision: an audit call, not a hot
// path.
func (l *store) List(ctx context.Context, f ledger.Filter) ([]ledger.Lease, error) {
	lk, ek := l.keys.kind(f.Pool, kindLease), l.keys.kind(f.Pool, kindEngine)
	v, err := l.read(ctx, nil, span{from: lk}, span{from: ek})
	if err != nil {
		return nil, fmt.Errorf("read leases: %w", err)
	}
	recs, err := rangeRecords[ledger.EngineID, engineRec](v.ranges[ek])
	if err != nil {
		return nil, err
	}
	var leases []ledger.Lease
	for _, kv := range v.ranges[lk] {
		var r leaseRec
		if err := decode(string(kv.Key), kv.Value, &r); err != nil {
			return nil, err
		}
		if ls := r.leaseOn(f.Pool, recs[r.Engine]); f.Match(ls) {
			leases = append(leases, ls)
		}
	}
	leases = f.Cap(leases)
	return leases, nil
}

// CheckTotals compares, at one revision, each engine's and tenant's
// reserved totals with the sum of the pool's lease records
// (ledger.TotalsChecker).
func (l *store) CheckTotals(ctx context.Context, pool ledger.PoolID) ([]ledger.TotalsMismatch, error) {
	lk, ek, tk := l.keys.kind(pool, kindLease), l.keys.kind(pool, kindEngine), l.keys.kind(pool, kindTenant)
	v, err := l.read(ctx, []string{l.keys.meta(pool)}, span{from: lk}, span{from: ek}, span{from: tk})
	if err != nil {
		return nil, err
	}
	if _, err := l.meta(v, pool); err != nil {
		return nil, err
	}
	erecs, err := rangeRecords[ledger.EngineID, engineRec](v.ranges[ek])
	if err != nil {
		return nil, err
	}
	trecs, err := rangeRecords[ledger.TenantID, tenantRec](v.ranges[tk])
	if err != nil {
		return nil, err
	}
	engines, tenants := map[ledger.EngineID]ledger.Totals{}, map[ledger.TenantID]ledger.Totals{}
	for id, r := range erecs {
		engines[id] = ledger.Totals{KVTokens: r.ReservedKV, Slots: r.ReservedSlots, Leases: r.Leases}
	}
	for id, r := range trecs {
		tenants[id] = ledger.Totals{KVTokens: r.ReservedKV, Slots: r.ReservedSlots, Leases: r.Leases}
	}
	rows := make([]ledger.Lease, 0, len(v.ranges[lk]))
	for _, kv := range v.ranges[lk] {
		var r leaseRec
		if err := decode(string(kv.Key), kv.Value, &r); err != nil {
			return nil, err
		}
		rows = append(rows, r.lease(pool))
	}
	return ledger.CompareTotals(pool, engines, tenants, rows), nil
}

// Stats returns a pool's totals from one consistent read.
func (l *store) Stats(ctx context.Context, pool ledger.PoolID) (ledger.PoolStats, error) {
	engines, tenants, fresh, live := l.keys.kind(pool, kindEngine), l.keys.kind(pool, kindTenant), l.keys.kind(pool, kindFresh), l.keys.kind(pool, kindLive)
	v, err := l.read(ctx, []string{l.keys.meta(pool), l.keys.recovering(pool)},
		span{from: engines}, span{from: tenants}, span{from: fresh, keysOnly: true}, span{from: live, countOnly: true})
	if err != nil {
		return ledger.PoolStats{}, err
	}
	m, err := l.meta(v, pool)
	if err != nil {
		return ledger.PoolStats{}, err
	}
	now := l.now()
	st := ledger.PoolStats{
		Pool: pool, Epoch: ledger.Epoch(m.Epoch), Now: now,
		RecoveringUntil: l.recoveringUntil(v, pool, now),
		Reserve:         m.Spec.Mode(), GrowthHeadroom: m.Spec.GrowthHeadroom,
		Priorities:  slices.Clone(m.Spec.Priorities),
		LiveHolders: int(v.counts[live]),
		Counters:    map[string]int64{},
	}
	st.CapacityKV, st.CapacitySlots = m.capacity()
	isFresh := map[string]bool{}
	for _, kv := range v.ranges[fresh] {
		isFresh[string(kv.Key)] = true
	}
	recs, err := rangeRecords[ledger.EngineID, engineRec](v.ranges[engines])
	if err != nil {
		return ledger.PoolStats{}, err
	}
	trecs, err := rangeRecords[ledger.TenantID, tenantRec](v.ranges[tenants])
	if err != nil {
		return ledger.PoolStats{}, err
	}
	for _, r := range recs {
		addCounters(st.Counters, r.Counters)
		st.Leases += r.Leases
	}
	for _, r := range trecs {
		addCounters(st.Counters, r.Counters)
	}
	for _, spec := range m.Spec.Engines {
		r := recs[spec.ID]
		delete(recs, spec.ID)
		es := engineStats(pool, spec, r, spec.StaleAfter > 0 && !isFresh[l.keys.fresh(pool, spec.ID)], false)
		es.Breaker = r.breaker().At(now, m.Spec.Breaker)
		st.Engines = append(st.Engines, es)
	}
	// Records outside the spec are kept with their counters; the configure
	// rule (ledger.RowFateOf) says which are still removed rows.
	for id, r := range recs {
		if ledger.RowFateOf(false, r.Leases) == ledger.RowRemoved {
			spec, _ := m.engineOf(id, r)
			es := engineStats(pool, spec, r, false, true)
			es.Breaker = r.breaker().At(now, m.Spec.Breaker)
			st.Engines = append(st.Engines, es)
		}
	}
	slices.SortFunc(st.Engines, func(a, b ledger.EngineStats) int { return cmp.Compare(a.Spec.ID, b.Spec.ID) })

	for _, spec := range m.Spec.Tenants {
		r := trecs[spec.Name]
		delete(trecs, spec.Name)
		qkv, qslots := ledger.TenantQuota(spec, st.CapacityKV, st.CapacitySlots)
		st.Tenants = append(st.Tenants, ledger.TenantStats{Spec: spec, QuotaKV: qkv, QuotaSlots: qslots,
			ReservedKV: r.ReservedKV, ReservedSlots: r.ReservedSlots, Leases: r.Leases,
			Rates: ledger.PruneRates(r.rates(), st.Now, m.Spec.RateWindow)})
	}
	for id, r := range trecs {
		if ledger.RowFateOf(false, r.Leases) == ledger.RowRemoved {
			spec, _ := m.tenantOf(id, r)
			st.Tenants = append(st.Tenants, ledger.TenantStats{Spec: spec,
				ReservedKV: r.ReservedKV, ReservedSlots: r.ReservedSlots, Leases: r.Leases, Removed: true,
				Rates: ledger.PruneRates(r.rates(), st.Now, m.Spec.RateWindow)})
		}
	}
	slices.SortFunc(st.Tenants, func(a, b ledger.TenantStats) int { return cmp.Compare(a.Spec.Name, b.Spec.Name) })
	return st, nil
}

func engineStats(pool ledger.PoolID, spec ledger.EngineSpec, r engineRec, stale, removed bool) ledger.EngineStats {
	es := ledger.EngineStats{
		Spec: spec, Draining: r.Draining, ReservedKV: r.ReservedKV, ReservedSlots: r.ReservedSlots,
		Leases: r.Leases, ObservedAt: msTime(r.ObservedAtMs), Stale: stale, Removed: removed,
		OrphanKV: r.OrphanKV, OrphanSlots: r.OrphanSlots, OrphanUntil: msTime(r.OrphanUntilMs),
	}
	es.CorrectionKV, es.CorrectionSlots = r.charged()
	es.LastObservation = r.lastObservation(pool, spec.ID)
	return es
}

// lastObservation returns the record's last applied observation of
// engine id in pool; zero if none.
func (r engineRec) lastObservation(pool ledger.PoolID, id ledger.EngineID) ledger.Observation {
	if r.Obs == nil {
		return ledger.Observation{}
	}
	return ledger.Observation{Pool: pool, Engine: id, KVTokensUsed: r.Obs.KVUsed, KVTokensTotal: r.Obs.KVTotal,
		Running: r.Obs.Running, Waiting: r.Obs.Waiting, ObservedAt: time.Unix(0, r.Obs.AtNs)}
}
