package etcd

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold/internal/ledger"
)

// ErrContention is returned (wrapped) when a call lost its guarded
// transaction MaxAttempts times in a row to concurrent writers of the same
// pool. Nothing was changed; retrying is safe.
var ErrContention = errors.New("etcd ledger: too much contention")

// Defaults for Options.
const (
	// DefaultPrefix is the key prefix when Options.Prefix is empty.
	DefaultPrefix = "/leasehold/"
	// DefaultMaxAttempts bounds the guarded-transaction attempts per call.
	DefaultMaxAttempts = 64
	// DefaultLeaseSlack is how much longer than asked a shared etcd lease
	// carrying deadline markers may live.
	DefaultLeaseSlack = time.Second
	// callTimeout bounds background work (sweeps) and best-effort cleanup.
	callTimeout = 5 * time.Second
	// maxReadOps keeps every transaction under etcd's default --max-txn-ops.
	maxReadOps = 100
	// etcdExpiryTick is how often etcd's lessor revokes expired leases: a
	// marker is deleted up to this long after its etcd lease's TTL ran out.
	etcdExpiryTick = 500 * time.Millisecond
	// markerRecheck is the retry hint while a marker outlives even the
	// time etcd should have deleted it by.
	markerRecheck = 100 * time.Millisecond
)

// Options configure a Ledger. The zero value is the defaults.
type Options struct {
	ledger.Options
	// Prefix is the key prefix every key lives under; default DefaultPrefix.
	// Ledgers with different prefixes on one cluster are independent.
	Prefix string
	// Clock stamps the times the ledger reports (Created, Deadline, Expires,
	// Now) and orders the expiry indexes; default the system clock. It never
	// decides that anything expired: etcd lease TTLs do.
	Clock ledger.Clock
	// MaxAttempts bounds the guarded transactions one call tries before it
	// gives up with ErrContention; 0 means DefaultMaxAttempts.
	MaxAttempts int
	// LeaseSlack is how much longer than its deadline a lease's marker may
	// live because it shares an etcd lease with others; 0 means
	// DefaultLeaseSlack, negative means one etcd lease per deadline.
	LeaseSlack time.Duration
	// NoWatch disables the background watch-driven sweeper; expired leases
	// and dead sessions are then only swept at the start of mutating calls
	// and by Sweep.
	NoWatch bool
}

func (o Options) withDefaults() Options {
	o.Options = o.Options.WithDefaults()
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(o.Prefix, "/") {
		o.Prefix += "/"
	}
	if o.Clock == nil {
		o.Clock = ledger.SystemClock{}
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.LeaseSlack == 0 {
		o.LeaseSlack = DefaultLeaseSlack
	}
	if o.LeaseSlack < 0 {
		o.LeaseSlack = 0
	}
	return o
}

// Ledger is the etcd backend of ledger.Ledger: ledger.Checked over the
// store. See the package documentation for the key schema and how time and
// expiry work.
type Ledger struct {
	ledger.Ledger
	s *store
}

var _ ledger.Ledger = (*Ledger)(nil)

// store is the etcd backend's ledger.Store.
type store struct {
	cli        *clientv3.Client
	ownsClient bool
	opts       Options
	keys       keys

	buckets leaseBuckets

	// epochMu guards lastEpoch: the greatest epoch this process has seen
	// per pool, so a re-created pool's epoch is greater even if the clock
	// stepped back.
	epochMu   sync.Mutex
	lastEpoch map[ledger.PoolID]ledger.Epoch

	// revMu guards maxRev and maxTerm, the highest revision and raft term
	// seen: going back means the cluster's data was wiped.
	revMu   sync.Mutex
	maxRev  int64
	maxTerm uint64

	// poolLocks serialize this process's guarded transactions per pool
	// (striped by pool name): goroutines of one process never race each
	// other's compares, so the guards only arbitrate between processes.
	poolLocks [64]sync.Mutex

	queue  sweepQueue
	resetC chan struct{} // cap 1: the store was wiped, restart the watch

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	doneC  chan struct{} // closed when the background goroutines exit
}

// New returns a ledger on client. The caller keeps ownership of client and
// closes it after Close. New starts the watch-driven sweeper (unless
// opts.NoWatch) and a sweep of everything that expired while nobody watched.
func New(client *clientv3.Client, opts Options) (*Ledger, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: etcd client is nil", ledger.ErrInvalidArgument)
	}
	o := opts.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	l := &store{
		cli:       client,
		opts:      o,
		keys:      keys{prefix: o.Prefix},
		lastEpoch: map[ledger.PoolID]ledger.Epoch{},
		resetC:    make(chan struct{}, 1),
		ctx:       ctx,
		cancel:    cancel,
		doneC:     make(chan struct{}),
	}
	l.buckets.init()
	l.queue.init()
	l.startBackground()
	return &Ledger{Ledger: ledger.Checked("etcd", l), s: l}, nil
}

// Open connects to the endpoints of an "etcd://host:port[,host:port][/prefix]"
// URL and returns a ledger that owns the client. A path in the URL sets the
// key prefix unless opts.Prefix does.
func Open(rawURL string, opts Options) (*Ledger, error) {
	endpoints, prefix, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if opts.Prefix == "" {
		opts.Prefix = prefix
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", strings.Join(endpoints, ","), err)
	}
	l, err := New(cli, opts)
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	l.s.ownsClient = true
	return l, nil
}

// ParseURL splits "etcd://host:port[,host:port][/prefix]" into client
// endpoints and a key prefix ("" when the URL has no path).
func ParseURL(rawURL string) (endpoints []string, prefix string, err error) {
	rest, ok := strings.CutPrefix(rawURL, "etcd://")
	if !ok {
		return nil, "", fmt.Errorf("%w: ledger URL %q: want etcd://host:port[,host:port][/prefix]", ledger.ErrInvalidArgument, rawURL)
	}
	hosts, path, _ := strings.Cut(rest, "/")
	for _, h := range strings.Split(hosts, ",") {
		host, port, ok := strings.Cut(h, ":")
		if !ok || host == "" || port == "" || strings.ContainsAny(h, " ?#@") {
			return nil, "", fmt.Errorf("%w: ledger URL %q: endpoint %q is not host:port", ledger.ErrInvalidArgument, rawURL, h)
		}
		endpoints = append(endpoints, "http://"+h)
	}
	if path != "" {
		prefix = "/" + path
	}
	return endpoints, prefix, nil
}

// Close stops the background sweeper and waits for it; it closes the etcd
// client only if Open created it. Leases and sessions stay in etcd.
func (l *store) Close() error {
	l.cancel()
	<-l.doneC
	if l.ownsClient {
		return l.cli.Close()
	}
	return nil
}

// now is the ledger clock at millisecond precision (no monotonic reading).
func (l *store) now() time.Time { return time.UnixMilli(l.opts.Clock.Now().UnixMilli()) }

// seeHeader records a response's revision and term; either going back means
// the cluster was wiped and restarted empty, so cached etcd leases are gone
// and the watch must restart.
func (l *store) seeHeader(rev int64, term uint64) {
	l.revMu.Lock()
	wiped := rev < l.maxRev || term < l.maxTerm
	if wiped {
		l.maxRev, l.maxTerm = rev, term
	} else {
		l.maxRev, l.maxTerm = max(l.maxRev, rev), max(l.maxTerm, term)
	}
	l.revMu.Unlock()
	if wiped {
		l.buckets.reset()
		select {
		case l.resetC <- struct{}{}:
		default:
		}
	}
}

// poolLock returns the stripe of poolLocks for pool.
func (l *store) poolLock(pool ledger.PoolID) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(pool))
	return &l.poolLocks[h.Sum32()%uint32(len(l.poolLocks))]
}

// retryPool is retry with each attempt under pool's lock.
func (l *store) retryPool(ctx context.Context, pool ledger.PoolID, attempt func() (bool, error)) error {
	mu := l.poolLock(pool)
	return l.retry(ctx, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return attempt()
	})
}

// retry runs attempt until it reports done or fails, at most MaxAttempts
// times, with a short jittered pause between lost transactions.
func (l *store) retry(ctx context.Context, attempt func() (done bool, err error)) error {
	for i := 0; i < l.opts.MaxAttempts; i++ {
		done, err := attempt()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		d := time.Duration(rand.Int64N(int64(min(1<<min(i, 5), 20))*int64(time.Millisecond)) + 1)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return fmt.Errorf("%w after %d attempts", ErrContention, l.opts.MaxAttempts)
}

// span is a range read: [from, to), or the prefix from when to is empty.
type span struct {
	from, to  string
	limit     int64
	keysOnly  bool
	countOnly bool
	// guard makes the commit fail if any key in the range was created or
	// modified after the read (deletions are not detected).
	guard bool
}

// view is one consistent read of single keys and ranges. Every single key
// read is guarded: the commit compares its ModRevision (0 when absent) with
// what was read, the compare etcd's concurrency.Mutex builds on.
type view struct {
	rev    int64
	kvs    map[string]*mvccpb.KeyValue // nil when absent
	ranges map[string][]*mvccpb.KeyValue
	counts map[string]int64
	guards []clientv3.Cmp
}

func (v *view) has(key string) bool { return v.kvs[key] != nil }

func (v *view) value(key string) []byte {
	if kv := v.kvs[key]; kv != nil {
		return kv.Value
	}
	return nil
}

// read reads keys and spans in one transaction.
func (l *store) read(ctx context.Context, keys []string, spans ...span) (*view, error) {
	v := &view{kvs: map[string]*mvccpb.KeyValue{}, ranges: map[string][]*mvccpb.KeyValue{}, counts: map[string]int64{}}
	return v, l.readMore(ctx, v, keys, spans...)
}

// readMore adds a second consistent read to v; the guards of both reads
// apply to the commit.
func (l *store) readMore(ctx context.Context, v *view, keys []string, spans ...span) error {
	var uniq []string
	for _, k := range keys {
		if _, dup := v.kvs[k]; dup || containsStr(uniq, k) {
			continue
		}
		uniq = append(uniq, k)
	}
	if len(uniq)+len(spans) > maxReadOps {
		return fmt.Errorf("read of %d keys is too large", len(uniq)+len(spans))
	}
	ops := make([]clientv3.Op, 0, len(uniq)+len(spans))
	for _, k := range uniq {
		ops = append(ops, clientv3.OpGet(k))
	}
	for _, s := range spans {
		var o []clientv3.OpOption
		if s.to == "" {
			o = append(o, clientv3.WithPrefix())
		} else {
			o = append(o, clientv3.WithRange(s.to))
		}
		if s.limit > 0 {
			o = append(o, clientv3.WithLimit(s.limit))
		}
		if s.keysOnly {
			o = append(o, clientv3.WithKeysOnly())
		}
		if s.countOnly {
			o = append(o, clientv3.WithCountOnly())
		}
		ops = append(ops, clientv3.OpGet(s.from, o...))
	}
	resp, err := l.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	l.seeHeader(resp.Header.Revision, resp.Header.RaftTerm)
	v.rev = resp.Header.Revision
	for i, k := range uniq {
		var kv *mvccpb.KeyValue
		var mod int64
		if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) > 0 {
			kv = kvs[0]
			mod = kv.ModRevision
		}
		v.kvs[k] = kv
		v.guards = append(v.guards, clientv3.Compare(clientv3.ModRevision(k), "=", mod))
	}
	for j, s := range spans {
		r := resp.Responses[len(uniq)+j].GetResponseRange()
		v.ranges[s.from] = r.Kvs
		v.counts[s.from] = r.Count
		if s.guard {
			c := clientv3.Compare(clientv3.ModRevision(s.from), "<", v.rev+1)
			if s.to == "" {
				c = c.WithPrefix()
			} else {
				c = c.WithRange(s.to)
			}
			v.guards = append(v.guards, c)
		}
	}
	return nil
}

func containsStr(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// commit applies ops if nothing v read has changed. It reports false when
// a guard failed or an etcd lease it attaches keys to has vanished (the
// shared-lease cache is then dropped); the caller reads again and retries.
func (l *store) commit(ctx context.Context, v *view, ops ...clientv3.Op) (bool, error) {
	resp, err := l.cli.Txn(ctx).If(v.guards...).Then(ops...).Commit()
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			l.buckets.reset()
			return false, nil
		}
		return false, fmt.Errorf("commit: %w", err)
	}
	l.seeHeader(resp.Header.Revision, resp.Header.RaftTerm)
	return resp.Succeeded, nil
}

// meta decodes a pool's meta record from v, or fails with ErrUnknownPool.
func (l *store) meta(v *view, pool ledger.PoolID) (*metaRec, error) {
	k := l.keys.meta(pool)
	b := v.value(k)
	if b == nil {
		return nil, fmt.Errorf("%w: %s", ledger.ErrUnknownPool, pool)
	}
	m := &metaRec{}
	if err := decode(k, b, m); err != nil {
		return nil, err
	}
	l.seeEpoch(pool, ledger.Epoch(m.Epoch))
	return m, nil
}

func (l *store) seeEpoch(pool ledger.PoolID, e ledger.Epoch) {
	l.epochMu.Lock()
	defer l.epochMu.Unlock()
	if e > l.lastEpoch[pool] {
		l.lastEpoch[pool] = e
	}
}

// observedSince is ledger.RecoverySince of the pool's epoch: it began at
// the meta record's CreatedMs.
func (l *store) observedSince(m *metaRec) time.Time {
	return ledger.RecoverySince(time.UnixMilli(m.CreatedMs), l.opts.ConfirmGrace)
}

// recoveringUntil returns the end of the pool's recovery window as the
// ledger reports it and admission uses it: the window is open exactly while
// its marker exists, so this is zero once etcd has deleted the marker and
// never in the past while it exists. Until the nominal end it is that end;
// after it, while the marker outlives it (its etcd lease counts whole
// seconds and expires on etcd's tick), it is when etcd should have deleted
// the marker, or markerRecheck from now once even that has passed, so
// RetryAfter sends callers back when the window is likely over rather than
// in a hot loop.
func (l *store) recoveringUntil(v *view, pool ledger.PoolID, now time.Time) time.Time {
	k := l.keys.recovering(pool)
	b := v.value(k)
	if b == nil {
		return time.Time{}
	}
	w, err := parseWindow(k, b)
	switch {
	case err != nil:
		return now.Add(markerRecheck)
	case now.UnixMilli() < w.UntilMs:
		return time.UnixMilli(w.UntilMs)
	case now.UnixMilli() < w.GoneMs:
		return time.UnixMilli(w.GoneMs)
	}
	return now.Add(markerRecheck)
}

// record decodes the record at key in v (the zero T when absent).
func record[T any](v *view, key string) (T, error) {
	var r T
	if b := v.value(key); b != nil {
		if err := decode(key, b, &r); err != nil {
			return r, err
		}
	}
	return r, nil
}

// rangeRecords decodes the records of a range, by the last segment of
// their keys.
func rangeRecords[K ~string, T any](kvs []*mvccpb.KeyValue) (map[K]T, error) {
	out := make(map[K]T, len(kvs))
	for _, kv := range kvs {
		id, ok := lastSegment(string(kv.Key))
		if !ok {
			continue
		}
		var r T
		if err := decode(string(kv.Key), kv.Value, &r); err != nil {
			return nil, err
		}
		out[K(id)] = r
	}
	return out, nil
}

// addCounters adds counters from to sums.
func addCounters(sums, from map[string]int64) {
	for c, n := range from {
		sums[c] += n
	}
}

// engineRec returns an engine's record from v (zero when absent).
func (l *store) engineRec(v *view, pool ledger.PoolID, e ledger.EngineID) (engineRec, error) {
	return record[engineRec](v, l.keys.engine(pool, e))
}

// tenantRec returns a tenant's record from v (zero when absent).
func (l *store) tenantRec(v *view, pool ledger.PoolID, t ledger.TenantID) (tenantRec, error) {
	return record[tenantRec](v, l.keys.tenant(pool, t))
}

// chargedRecs returns the records of the engine and tenant lease r
// charges.
func (l *store) chargedRecs(v *view, pool ledger.PoolID, r leaseRec) (engineRec, tenantRec, error) {
	er, err := l.engineRec(v, pool, r.Engine)
	if err != nil {
		return er, tenantRec{}, err
	}
	tr, err := l.tenantRec(v, pool, r.Tenant)
	return er, tr, err
}

// admissionState maps an engine's record to ledger.EngineState at now.
// Freshness is the fresh marker's existence, not a clock comparison: the
// state says observed at now when the marker exists, never otherwise. The
// reported capacity is the last applied observation's, stale or not.
func admissionState(spec ledger.EngineSpec, r engineRec, fresh bool, now time.Time) ledger.EngineState {
	s := ledger.EngineState{
		Spec: spec, Draining: r.Draining,
		ReservedKV: r.ReservedKV, ReservedSlots: r.ReservedSlots,
		Breaker: r.breaker(),
	}
	s.CorrectionKV, s.CorrectionSlots = r.charged()
	if r.Obs != nil {
		s.ReportedKV = r.Obs.KVTotal
		s.LastObservation = r.lastObservation("", spec.ID)
		s.ArrivedAt = time.UnixMilli(r.ObservedAtMs)
	}
	if fresh {
		s.ObservedAt = now
	}
	return s
}

// Prefix returns the key prefix the ledger's keys live under.
func (l *Ledger) Prefix() string { return l.s.opts.Prefix }

var _ ledger.TotalsChecker = (*Ledger)(nil)

// CheckTotals compares the pool's engine and tenant totals with its lease
// records at one revision (ledger.TotalsChecker).
func (l *Ledger) CheckTotals(ctx context.Context, pool ledger.PoolID) ([]ledger.TotalsMismatch, error) {
	return ledger.CheckTotals(ctx, l.Ledger, pool)
}
