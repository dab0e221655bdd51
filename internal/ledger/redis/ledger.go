package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/ledger"
)

// errMalformed: a script's reply does not have the shape its header
// documents.
var errMalformed = errors.New("malformed script reply")

// Options configures a redis Ledger. The zero value is the defaults.
type Options struct {
	ledger.Options
	// Prefix starts every key; "" means DefaultPrefix. It must not contain
	// braces, glob characters or spaces.
	Prefix string
	// WaitReplicas, when > 0, acknowledges a change (every operation but
	// the reads and Sweep) only once that many replicas have it: the script
	// and a Redis WAIT go in one pipeline on one connection, so a failover
	// to a replica that acknowledged loses no acknowledged grant, renewal
	// or release. 0 (the default) is Redis's asynchronous replication. URL
	// parameter wait_replicas.
	WaitReplicas int
	// WaitTimeout bounds that WAIT (default 100ms; URL parameter
	// wait_timeout). When fewer replicas acknowledge in time the call fails
	// with ErrNotReplicated and the change stays on the primary:
	// operations are idempotent, so the caller retries.
	WaitTimeout time.Duration
}

// DefaultWaitTimeout is Options.WaitTimeout's default.
const DefaultWaitTimeout = 100 * time.Millisecond

// ErrNotReplicated: with Options.WaitReplicas, fewer replicas acknowledged
// a change within WaitTimeout. The change was made on the primary.
var ErrNotReplicated = errors.New("redis ledger: change not acknowledged by enough replicas")

// Ledger is the Redis backend of ledger.Ledger: ledger.Checked over a store
// where every operation is one Lua script call on the pool's keys, so it is
// atomic on Redis and on one Redis Cluster slot per pool. It keeps no state
// besides its options; any number of Ledgers (routers, reservers) may share
// one Redis.
type Ledger struct {
	ledger.Ledger
	s *store
}

var _ ledger.Ledger = (*Ledger)(nil)

// store is the Redis backend's ledger.Store.
type store struct {
	client  goredis.UniversalClient
	ownsC   bool // Close closes client (Open made it)
	opts    Options
	scripts *scripts
	err     error // a bad option, returned by every call
	heads   callHeads
	pipe    pipe   // every script call but runWait's
	argv1s  string // argv1(opts.SweepBatch), every changing call's
}

var _ ledger.Store = (*store)(nil)

// New returns a Ledger on client. The caller keeps ownership of client:
// Close does not close it. Invalid options make every call fail with an
// error wrapping ledger.ErrInvalidArgument.
func New(client goredis.UniversalClient, opts Options) *Ledger {
	return checked(newStore(client, opts))
}

func newStore(client goredis.UniversalClient, opts Options) *store {
	s := &store{client: client, pipe: pipe{client: client}}
	s.opts, s.err = opts.withDefaults()
	if s.err == nil {
		s.scripts, s.err = loadScripts()
		s.argv1s = s.argv1(s.opts.SweepBatch)
	}
	return s
}

func checked(s *store) *Ledger { return &Ledger{Ledger: ledger.Checked("redis", s), s: s} }

// Open parses a --ledger URL (url.go: redis://, redis+sentinel://,
// redis+cluster://, each also with TLS) and returns a Ledger on a new
// client that Close closes. The URL's wait_replicas and wait_timeout
// override opts'.
func Open(rawURL string, opts Options) (*Ledger, error) {
	client, params, err := newClient(rawURL)
	if err != nil {
		return nil, err
	}
	params.apply(&opts)
	s := newStore(client, opts)
	s.ownsC = true
	if s.err != nil {
		_ = s.client.Close()
		return nil, fmt.Errorf("open redis ledger: %w", s.err)
	}
	return checked(s), nil
}

func (o Options) withDefaults() (Options, error) {
	o.Options = o.Options.WithDefaults()
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.WaitReplicas < 0 || o.WaitTimeout < 0 {
		return o, fmt.Errorf("%w: WaitReplicas %d and WaitTimeout %s must not be negative", ledger.ErrInvalidArgument, o.WaitReplicas, o.WaitTimeout)
	}
	if o.WaitTimeout == 0 {
		o.WaitTimeout = DefaultWaitTimeout
	}
	return o, checkPrefix(o.Prefix)
}

// Close closes the client if Open made it. Leases are not released.
func (l *store) Close() error {
	if l.ownsC {
		return l.client.Close()
	}
	return nil
}

// argv1 is every script's ARGV[1]: "<sweep batch> <orphan hold ms>
// <confirm within ms> <confirm grace ms> <on promotion> <cluster>", parsed
// once by lib.lua into SWEEP_BATCH, ORPHAN_HOLD, CONFIRM_WITHIN,
// CONFIRM_GRACE, ON_PROMOTION and CLUSTER, so each script's own arguments
// start at ARGV[2]. On promotion is "keep" when this client acknowledges
// changes only once replicas have them (WaitReplicas), else "epoch": what
// a promoted replica does with the pool (failover in lib.lua, and "Ledger
// loss" in the package doc). Cluster is 1 on a cluster client.
func (l *store) argv1(batch int) string {
	onPromotion, cluster := "epoch", "0"
	if l.opts.WaitReplicas > 0 {
		onPromotion = "keep"
	}
	if _, ok := l.client.(*goredis.ClusterClient); ok {
		cluster = "1"
	}
	return strconv.Itoa(batch) + " " + itoa(ms(l.opts.OrphanHold)) + " " +
		itoa(ms(l.opts.ConfirmWithin)) + " " + itoa(ms(l.opts.ConfirmGrace)) + " " + onPromotion + " " + cluster
}

// run calls the script op on pool's keys with argv1(batch) first in ARGV,
// and decodes the reply.
func (l *store) run(ctx context.Context, s func(*scripts) *fn, pool ledger.PoolID, batch int, args ...any) (reply, error) {
	if l.err != nil {
		return reply{}, l.err
	}
	argv1 := l.argv1s
	if batch != l.opts.SweepBatch {
		argv1 = l.argv1(batch)
	}
	v, err := l.eval(ctx, s(l.scripts), pool, argv1, args)
	if err != nil {
		return reply{}, err
	}
	return decodeReply(v)
}

// mutateLease is mutate for a script whose reply is a lease.
func (l *store) mutateLease(ctx context.Context, s func(*scripts) *fn, pool ledger.PoolID, args ...any) (reply, ledger.Lease, error) {
	r, err := l.mutate(ctx, s, pool, args...)
	if err != nil {
		return reply{}, ledger.Lease{}, err
	}
	lease, err := decodeLease(pool, r.rest)
	return r, lease, err
}

func (l *store) mutate(ctx context.Context, s func(*scripts) *fn, pool ledger.PoolID, args ...any) (reply, error) {
	if l.opts.WaitReplicas <= 0 {
		return l.run(ctx, s, pool, l.opts.SweepBatch, args...)
	}
	return l.runWait(ctx, s(l.scripts), pool, args...)
}

// Configure applies spec and returns the pool's epoch: a new one, with its
// recovery window, when the pool's state was missing.
func (l *store) Configure(ctx context.Context, spec ledger.PoolSpec) (ledger.Epoch, error) {
	retry := spec.RetryAfter
	if retry == 0 {
		retry = ledger.DefaultRetryAfter
	}
	order := make([]string, 0, len(spec.Priorities))
	for _, p := range spec.Priorities {
		order = append(order, string(p.Name))
	}
	args := []any{ms(l.opts.RecoveryWindow), ms(retry), strings.Join(order, " "), string(spec.Mode()), ftoa(spec.GrowthHeadroom),
		breakerArg(spec.Breaker), len(spec.Engines)}
	for _, e := range spec.Engines {
		args = append(args, string(e.ID), e.URL, itoa(e.KVTokens), itoa(e.Slots), itoa(int64(e.StaleAfter)), string(e.StalePolicy))
	}
	args = append(args, len(spec.Tenants))
	for _, t := range spec.Tenants {
		args = append(args, string(t.Name), ftoa(t.KVShare), ftoa(t.SlotShare), itoa(t.TokensPerMinute), itoa(t.RequestsPerMinute))
	}
	args = append(args, len(spec.Priorities))
	for _, p := range spec.Priorities {
		args = append(args, string(p.Name), ftoa(p.MaxFill))
	}
	args = append(args, ms(spec.RateWindow))
	r, err := l.mutate(ctx, func(s *scripts) *fn { return s.configure }, spec.Name, args...)
	if err != nil {
		return 0, err
	}
	// The pools index lives outside the pool's hash slot, so it is not part
	// of the script; Pools filters out entries whose pool state is gone.
	_, index := keySchema(l.opts.Prefix, spec.Name)
	if err := l.client.SAdd(ctx, index, string(spec.Name)).Err(); err != nil {
		return r.epoch, fmt.Errorf("index pool: %w", err)
	}
	return r.epoch, nil
}

// SetDraining drains or undrains a configured engine.
func (l *store) SetDraining(ctx context.Context, pool ledger.PoolID, engine ledger.EngineID, draining bool) error {
	flag := "0"
	if draining {
		flag = "1"
	}
	_, err := l.mutate(ctx, func(s *scripts) *fn { return s.drain }, pool, string(engine), flag)
	return err
}

// KeepAlive creates or extends holder's session in pool to now+ttl.
func (l *store) KeepAlive(ctx context.Context, pool ledger.PoolID, holder ledger.HolderID, ttl time.Duration) (ledger.Session, error) {
	r, err := l.mutate(ctx, func(s *scripts) *fn { return s.keepalive }, pool, string(holder), ms(ttl))
	if err != nil {
		return ledger.Session{}, err
	}
	if len(r.rest) < 4 {
		return ledger.Session{}, errMalformed
	}
	return ledger.Session{
		Pool:            pool,
		Holder:          holder,
		Expires:         time.UnixMilli(integer(r.rest[0])),
		LiveHolders:     int(integer(r.rest[1])),
		Epoch:           r.epoch,
		RecoveringUntil: millisOrZero(integer(r.rest[2])),
		Recovered:       int(integer(r.rest[3])),
	}, nil
}

// Acquire grants capacity on the first fitting candidate, or replays the
// holder's outstanding lease for the same request id.
func (l *store) Acquire(ctx context.Context, req ledger.AcquireRequest) (ledger.Grant, error) {
	r, err := l.mutate(ctx, func(s *scripts) *fn { return s.acquire }, req.Pool, acquireArgv(req)...)
	if err != nil {
		return ledger.Grant{}, err
	}
	return decodeAcquire(req, r)
}

// decodeAcquire reads acquire.lua's reply to req: a replayed lease in
// full, a new grant from its record (decodeGrant).
func decodeAcquire(req ledger.AcquireRequest, r reply) (ledger.Grant, error) {
	var lease ledger.Lease
	var err error
	if r.status == statusReplayed {
		lease, err = decodeLease(req.Pool, r.rest)
	} else {
		lease, err = decodeGrant(req, r)
	}
	if err != nil {
		return ledger.Grant{}, err
	}
	return ledger.Grant{Lease: lease, Replayed: r.status == statusReplayed, Epoch: r.epoch}, nil
}

// decodeGrant reads the lease of a new grant of req from acquire.lua's
// reply, the lease's record (lib.lua): of its fields it reads those the
// request does not give (id, engine, created, deadline, fence seq, probe
// and tokens; its fence epoch is the reply's, and a new grant is neither
// reasserted, overgrown nor unconfirmed).
func decodeGrant(req ledger.AcquireRequest, r reply) (ledger.Lease, error) {
	if len(r.rest) < 1 {
		return ledger.Lease{}, fmt.Errorf("malformed grant in script reply: no record")
	}
	f, n := splitRecord(str(r.rest[0]))
	if n < recordFields-1 {
		return ledger.Lease{}, fmt.Errorf("malformed grant in script reply: %d record fields", n)
	}
	seq, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return ledger.Lease{}, fmt.Errorf("malformed fence %v.%v in script reply", r.epoch, f[11])
	}
	tokens, err := recordTokens(f, n)
	if err != nil {
		return ledger.Lease{}, err
	}
	created, err1 := strconv.ParseInt(f[8], 10, 64)
	deadline, err2 := strconv.ParseInt(f[9], 10, 64)
	if err1 != nil || err2 != nil {
		return ledger.Lease{}, fmt.Errorf("malformed times %q, %q in script reply", f[8], f[9])
	}
	return ledger.Lease{
		ID:        ledger.LeaseID(f[0]),
		Pool:      req.Pool,
		Engine:    ledger.EngineID(f[1]),
		Tenant:    req.Tenant,
		Priority:  req.Priority,
		KVTokens:  req.KVTokens,
		Slots:     req.Slots,
		Holder:    req.Holder,
		RequestID: req.RequestID,
		Created:   time.UnixMilli(created),
		Deadline:  time.UnixMilli(deadline),
		Fence:     ledger.Fence{Epoch: r.epoch, Seq: seq},
		Probe:     f[16] == "1",
		Tokens:    tokens,
	}, nil
}

// splitRecord splits a lease record (lib.lua) at its spaces into at most
// recordFields fields, and returns them with their number; a record with
// more spaces puts the rest in its last field.
func splitRecord(rec string) (f [recordFields]string, n int) {
	for n < recordFields {
		i := strings.IndexByte(rec, ' ')
		if i < 0 {
			f[n] = rec
			return f, n + 1
		}
		f[n], rec = rec[:i], rec[i+1:]
		n++
	}
	return f, n
}

// recordTokens is the tokens field of a record split into n fields f: 0
// when it has none.
func recordTokens(f [recordFields]string, n int) (int64, error) {
	if n < recordFields {
		return 0, nil
	}
	tokens, err := strconv.ParseInt(f[17], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("malformed tokens %q in script reply", f[17])
	}
	return tokens, nil
}

// decodeRecord reads a lease of pool from its whole record (lib.lua), as
// grow.lua, resize.lua and renew.lua reply with the record they wrote:
// the thirteen fields from id to reasserted, then owns, overgrown, since
// (a lease is unconfirmed while it is not 0), probe and, when not 0,
// tokens.
func decodeRecord(pool ledger.PoolID, rec string) (ledger.Lease, error) {
	f, n := splitRecord(rec)
	if n < recordFields-1 {
		return ledger.Lease{}, fmt.Errorf("malformed lease record in script reply: %d fields", n)
	}
	tokens, err := recordTokens(f, n)
	if err != nil {
		return ledger.Lease{}, err
	}
	ep, err1 := strconv.ParseUint(f[10], 10, 64)
	seq, err2 := strconv.ParseUint(f[11], 10, 64)
	if err1 != nil || err2 != nil {
		return ledger.Lease{}, fmt.Errorf("malformed fence %v.%v in script reply", f[10], f[11])
	}
	var num [4]int64 // kv, slots, created, deadline
	for i, j := range [4]int{4, 5, 8, 9} {
		if num[i], err = strconv.ParseInt(f[j], 10, 64); err != nil {
			return ledger.Lease{}, fmt.Errorf("malformed lease record in script reply: field %d is %q", j+1, f[j])
		}
	}
	return ledger.Lease{
		ID:          ledger.LeaseID(f[0]),
		Pool:        pool,
		Engine:      ledger.EngineID(f[1]),
		Tenant:      ledger.TenantID(f[2]),
		Priority:    ledger.PriorityName(f[3]),
		KVTokens:    num[0],
		Slots:       num[1],
		Holder:      ledger.HolderID(f[6]),
		RequestID:   ledger.RequestID(f[7]),
		Created:     time.UnixMilli(num[2]),
		Deadline:    time.UnixMilli(num[3]),
		Fence:       ledger.Fence{Epoch: ledger.Epoch(ep), Seq: seq},
		Reasserted:  f[12] == "1",
		Overgrown:   f[14] == "1",
		Unconfirmed: f[15] != "0",
		Probe:       f[16] == "1",
		Tokens:      tokens,
	}, nil
}

// recordFields is the most fields a lease record has (lib.lua): the
// thirteen from id to reasserted, then owns, overgrown, since, probe and,
// when not 0, tokens.
const recordFields = 18

// acquireArgv is acquire.lua's ARGV after the sweep batch.
// releaseArgv is release.lua's ARGV after the sweep batch: the lease, its
// holder, the usage and the completion-length counter it adds to (empty
// when none), and the dispatch's outcome.
func releaseArgv(ref ledger.LeaseRef, usage ledger.Usage) []any {
	histogram := ""
	if c := ledger.CompletionCounters(usage, ""); len(c) > 0 {
		histogram = c[0]
	}
	return []any{string(ref.ID), string(ref.Holder), itoa(usage.PromptTokens), itoa(usage.CompletionTokens), histogram,
		string(usage.Outcome)}
}

func acquireArgv(req ledger.AcquireRequest) []any {
	args := make([]any, 0, 9+len(req.Candidates))
	args = append(args, string(req.Tenant), string(req.Priority), itoa(req.KVTokens), itoa(req.Slots),
		string(req.Holder), string(req.RequestID), ms(req.TTL), len(req.Candidates))
	for _, c := range req.Candidates {
		args = append(args, string(c))
	}
	return append(args, itoa(req.ChargedTokens()))
}

// Renew extends a live lease's deadline to now+ttl.
func (l *store) Renew(ctx context.Context, ref ledger.LeaseRef, ttl time.Duration) (ledger.Renewal, error) {
	return l.renewal(ctx, func(s *scripts) *fn { return s.renew }, ref, ms(ttl))
}

// Resize sets a live lease's KV tokens; growth is admitted like an
// acquisition of the difference.
func (l *store) Resize(ctx context.Context, ref ledger.LeaseRef, kvTokens int64) (ledger.Renewal, error) {
	return l.renewal(ctx, func(s *scripts) *fn { return s.resize }, ref, itoa(kvTokens))
}

// Grow raises a live elastic lease's KV tokens to what its engine holds,
// never refused for capacity (ledger.GrowthOf, in grow.lua).
func (l *store) Grow(ctx context.Context, ref ledger.LeaseRef, kvTokens int64) (ledger.Renewal, error) {
	return l.renewal(ctx, func(s *scripts) *fn { return s.grow }, ref, itoa(kvTokens), string(ref.Pool))
}

// renewal runs a script on ref's lease whose ARGV is the lease id, the
// holder, then args, and whose reply is the lease.
func (l *store) renewal(ctx context.Context, s func(*scripts) *fn, ref ledger.LeaseRef, args ...any) (ledger.Renewal, error) {
	r, lease, err := l.mutateLease(ctx, s, ref.Pool, append([]any{string(ref.ID), string(ref.Holder)}, args...)...)
	if err != nil {
		return ledger.Renewal{}, err
	}
	return ledger.Renewal{Lease: lease, Epoch: r.epoch}, nil
}

// Release ends a lease; releasing an unknown lease is not an error. A
// release by the holder counts the usage, and a finished answer's
// completion length in the pool's and the tenant's histogram counters
// (ledger.CompletionCounters; the script appends the lease's tenant to the
// pool's counter name, and counts none for an empty name), and reports
// its outcome to the engine's breaker (ledger.Breaker.Report, in
// release.lua).
func (l *store) Release(ctx context.Context, ref ledger.LeaseRef, usage ledger.Usage) (ledger.Released, error) {
	r, err := l.mutate(ctx, func(s *scripts) *fn { return s.release }, ref.Pool, releaseArgv(ref, usage)...)
	if err != nil {
		return ledger.Released{}, err
	}
	if len(r.rest) < 1 {
		return ledger.Released{}, errMalformed
	}
	return ledger.Released{Released: integer(r.rest[0]) == 1, Epoch: r.epoch}, nil
}

// Reassert re-inserts a lease its live holder still uses, above capacity if
// need be, with deadline now+ttl, when ledger.CheckReassert (in
// reassert.lua) finds it plausible.
func (l *store) Reassert(ctx context.Context, lease ledger.Lease, ttl time.Duration) (ledger.Grant, error) {
	// The id is the one its fence makes (ledger.ValidateReassert).
	fence := lease.Fence
	created := int64(0)
	if !lease.Created.IsZero() {
		created = lease.Created.UnixMilli()
	}
	r, got, err := l.mutateLease(ctx, func(s *scripts) *fn { return s.reassert }, lease.Pool,
		string(lease.ID), string(lease.Holder), string(lease.Engine), string(lease.Tenant), string(lease.Priority),
		itoa(lease.KVTokens), itoa(lease.Slots), string(lease.RequestID), itoa(created),
		strconvU(uint64(fence.Epoch)), strconvU(fence.Seq), ms(ttl))
	if err != nil {
		return ledger.Grant{}, err
	}
	return ledger.Grant{Lease: got, Replayed: r.status == statusReplayed, Epoch: r.epoch}, nil
}

// Observe records engine telemetry; older or equal observations are ignored.
func (l *store) Observe(ctx context.Context, obs ledger.Observation) (ledger.Observed, error) {
	r, err := l.mutate(ctx, func(s *scripts) *fn { return s.observe }, obs.Pool,
		string(obs.Engine), itoa(obs.KVTokensUsed), itoa(obs.KVTokensTotal), itoa(obs.Running), itoa(obs.Waiting),
		itoa(obs.ObservedAt.Unix()), itoa(int64(obs.ObservedAt.Nanosecond())))
	if err != nil {
		return ledger.Observed{}, err
	}
	if len(r.rest) < 1 {
		return ledger.Observed{}, errMalformed
	}
	return ledger.Observed{Applied: integer(r.rest[0]) == 1, Epoch: r.epoch}, nil
}

// Sweep removes up to max expired leases and dead sessions' leases; max <= 0
// means the configured sweep batch.
func (l *store) Sweep(ctx context.Context, pool ledger.PoolID, max int) (ledger.Swept, error) {
	if max == 0 {
		max = l.opts.SweepBatch
	}
	r, err := l.run(ctx, func(s *scripts) *fn { return s.sweep }, pool, max)
	if err != nil {
		return ledger.Swept{}, err
	}
	if len(r.rest) < 3 {
		return ledger.Swept{}, errMalformed
	}
	return ledger.Swept{
		Expired: int(integer(r.rest[0])),
		Revoked: int(integer(r.rest[1])),
		Holders: int(integer(r.rest[2])),
	}, nil
}

// Pools lists the pools whose state exists, sorted.
func (l *store) Pools(ctx context.Context) ([]ledger.PoolID, error) {
	if l.err != nil {
		return nil, l.err
	}
	_, index := keySchema(l.opts.Prefix, "")
	names, err := l.client.SMembers(ctx, index).Result()
	if err != nil {
		return nil, fmt.Errorf("read pools index: %w", err)
	}
	// The index is written after Configure's script and never pruned by
	// scripts: keep only pools whose state still exists.
	cmds := make([]*goredis.BoolCmd, len(names))
	_, err = l.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, n := range names {
			k, _ := keySchema(l.opts.Prefix, ledger.PoolID(n))
			cmds[i] = p.HExists(ctx, k.State, stateField)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check pools' state: %w", err)
	}
	out := make([]ledger.PoolID, 0, len(names))
	for i, n := range names {
		if cmds[i].Val() {
			out = append(out, ledger.PoolID(n))
		}
	}
	slices.Sort(out)
	return out, nil
}

// List returns one pool's outstanding leases matching f, expired ones
// not yet swept included, ordered by fence. A pool that does not exist has
// no leases.
func (l *store) List(ctx context.Context, f ledger.Filter) ([]ledger.Lease, error) {
	r, err := l.run(ctx, func(s *scripts) *fn { return s.list }, f.Pool, 0,
		string(f.Engine), string(f.Holder), string(f.Tenant))
	if errors.Is(err, ledger.ErrUnknownPool) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]ledger.Lease, 0, len(r.rest))
	for _, v := range r.rest {
		fields, _ := v.([]any)
		lease, err := decodeLease(f.Pool, fields)
		if err != nil {
			return nil, err
		}
		out = append(out, lease)
	}
	out = f.Cap(out)
	return out, nil
}

// Stats returns a pool's totals.
func (l *store) Stats(ctx context.Context, pool ledger.PoolID) (ledger.PoolStats, error) {
	r, err := l.run(ctx, func(s *scripts) *fn { return s.stats }, pool, 0)
	if err != nil {
		return ledger.PoolStats{}, err
	}
	return decodeStats(pool, r)
}

func millisOrZero(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

var _ ledger.TotalsChecker = (*Ledger)(nil)

// CheckTotals compares the pool's engine and tenant totals with its lease
// rows, read by one script (ledger.TotalsChecker).
func (l *Ledger) CheckTotals(ctx context.Context, pool ledger.PoolID) ([]ledger.TotalsMismatch, error) {
	return ledger.CheckTotals(ctx, l.Ledger, pool)
}

// CheckTotals reads, in totals.lua, every recorded engine and tenant total
// and every lease row's amounts, and compares them.
func (l *store) CheckTotals(ctx context.Context, pool ledger.PoolID) ([]ledger.TotalsMismatch, error) {
	r, err := l.run(ctx, func(s *scripts) *fn { return s.totals }, pool, 0)
	if err != nil {
		return nil, err
	}
	if len(r.rest) != 3 {
		return nil, errMalformed
	}
	list := func(i, width int) ([]any, error) {
		v, ok := r.rest[i].([]any)
		if !ok || len(v)%width != 0 {
			return nil, errMalformed
		}
		return v, nil
	}
	totals := func(v []any, j int) ledger.Totals {
		return ledger.Totals{KVTokens: integer(v[j+1]), Slots: integer(v[j+2]), Leases: integer(v[j+3])}
	}
	ev, err := list(0, 4)
	if err != nil {
		return nil, err
	}
	tv, err := list(1, 4)
	if err != nil {
		return nil, err
	}
	rv, err := list(2, 4)
	if err != nil {
		return nil, err
	}
	engines, tenants := map[ledger.EngineID]ledger.Totals{}, map[ledger.TenantID]ledger.Totals{}
	for j := 0; j < len(ev); j += 4 {
		engines[ledger.EngineID(str(ev[j]))] = totals(ev, j)
	}
	for j := 0; j < len(tv); j += 4 {
		tenants[ledger.TenantID(str(tv[j]))] = totals(tv, j)
	}
	rows := make([]ledger.Lease, 0, len(rv)/4)
	for j := 0; j < len(rv); j += 4 {
		rows = append(rows, ledger.Lease{Engine: ledger.EngineID(str(rv[j])), Tenant: ledger.TenantID(str(rv[j+1])),
			KVTokens: integer(rv[j+2]), Slots: integer(rv[j+3])})
	}
	return ledger.CompareTotals(pool, engines, tenants, rows), nil
}
