// Package ledger owns the reservation contract that every Leasehold backend
// implements: the types (pools, engines, tenants, priorities, holder
// sessions, leases, fencing tokens), the Ledger interface, its sentinel
// errors and the argument validation all backends share.
//
// Backends on a store (memory, Redis, etcd) implement Store and are wrapped
// by Checked, the one place that validates arguments, refuses calls after
// Close, wraps errors as "<backend> <what was in progress>: <cause>" and
// lists all pools; see checked.go.
//
// # Model
//
// Everything one atomic decision touches lives in one pool: its engines and
// their capacity, the tenants' quotas in that pool, the priority classes, the
// holder sessions of the routers that use the pool, and the outstanding
// leases. On Redis Cluster a pool maps to one hash slot; every operation
// therefore names its pool, and holder sessions are kept per pool.
//
// # Semantics every backend implements
//
// Time is the ledger's clock (Redis TIME, etcd's lease TTLs and server time,
// the reserver's injected clock for the memory backend), never a caller's.
// Durations are honoured to the millisecond.
//
// Configure applies a PoolSpec idempotently: engines, tenants and priorities
// are replaced by the spec; an engine's drain flag and telemetry state and all
// outstanding leases survive re-application. Removing an engine or tenant that
// still has leases keeps their counters until those leases end; new grants on
// a removed engine fail with ErrUnknownEngine.
//
// KeepAlive(pool, holder, ttl) creates or extends a holder session to
// now+ttl. A session whose expiry has passed is dead: KeepAlive on it returns
// ErrSessionExpired until its leases have been swept, after which the holder
// id may start a fresh session. When a session dies every lease it holds is
// released (lazily, in bounded batches). Callers should pick a fresh holder id
// per process incarnation.
//
// Acquire requires a live session. It tries req.Candidates in order and grants
// on the first engine where all of these hold (R = reserved, C = correction
// from telemetry, cap = capacity (see "Capacity truth"), f = the priority's
// max_fill, h = the pool's growth headroom, 0 unless elastic):
//
//	engine exists and is not draining                     else ReasonDraining
//	its circuit breaker admits the grant                  else ReasonBreakerOpen
//	recovered, while the recovery window is open          else ReasonRecovering
//	telemetry not stale under policy "block"              else ReasonTelemetryStale
//	R_kv + C_kv + kv  <= floor(cap_kv*f) - floor(cap_kv*h) else ReasonEngineKV
//	R_slots + C_slots + s  <= floor(cap_slots * f)        else ReasonEngineSlots
//
// (when f < 1 and the request would also fit with f = 1, the reason is
// ReasonPriorityHeadroom; see "Recovery" for the recovery window). Before
// any engine is tried, pool-wide limits are checked: the tenant's KV quota
// floor(kv_share * pool kv capacity) (ReasonTenantKV) and,
// when slot_share > 0, its slot quota (ReasonTenantSlots), then its rate
// budgets (ReasonTenantTokenRate, ReasonTenantRequestRate; see "Rate
// budgets"). A request that could never fit — larger than every candidate's
// floor(cap * f), than the tenant's quota or than its token budget — is
// rejected with ReasonTooLarge and no retry hint. Otherwise
// the rejection names the reason of the first candidate and carries a
// retry-after hint. Rejections are returned as *Rejection errors
// (errors.Is(err, ErrRejected)).
//
// Acquire with a (holder, request id) that already has an outstanding lease
// returns that lease with Grant.Replayed set and reserves nothing more.
//
// # Circuit breaker
//
// Every engine has a circuit breaker (Breaker, breaker.go), kept beside its
// drain flag and changed only inside the atomic step of the call that
// carries its evidence, by the pure rule in breaker.go (which
// scripts/lua implements too):
//
//	closed    --Failures consecutive failed outcomes--> open
//	open      --Cooldown passed (ledger clock)-->        half_open
//	half_open --a probe's outcome is a failure-->        open (again)
//	half_open --Successes probes succeed-->              closed
//
// Evidence is the Outcome its holder reports with Release (Usage.Outcome):
// a failure (connect error, reset, 5xx, first-byte timeout, TTFT breach),
// ok (resets the count, but only when its lease was granted after the
// latest counted failure, Breaker.LastFailureAt: a later millisecond of
// the ledger clock than it, Breaker.Fresh), or none. Only a Release that releases the lease
// counts it: Release is idempotent per lease, so a retried Release, or one
// of a lease that had already ended, counts nothing. In open, outcomes of
// leases granted before it opened are ignored; in half_open only probes'
// count. Any holder's evidence moves the one breaker every holder admits
// against.
//
// An open engine takes no grant (ReasonBreakerOpen, checked right after
// draining; growth of a lease already on it is not refused). Once the
// cooldown has passed it reads half_open: a grant on it is a probe
// (Lease.Probe), and at most PoolSpec.Breaker.Probes probe leases are
// outstanding on it at a time, counted in the ledger so the bound holds
// fleet-wide under concurrent Acquires from any holders; beyond it the
// engine refuses with ReasonBreakerOpen. A probe lease frees its slot when
// it is released (whatever its outcome) or when the ledger ends it (expiry,
// a dead holder's revocation: no evidence).
//
// The open-to-half_open transition is read lazily: Admit and Stats read a
// breaker with Breaker.At at the ledger's now, and a backend stores the
// transition when it next writes the breaker (a grant on the engine, a
// Release carrying an outcome or of a probe, the end of a probe lease;
// Breaker.Advance). Every transition is counted once in
// PoolStats.Counters as "breaker:<transition>" (opened, half_open,
// reopened, closed). Stats reports each engine's breaker as read at its
// Now. Configure stores PoolSpec.Breaker (zero fields take the defaults;
// Failures < 0 turns the breaker off, and every engine then reads closed)
// and keeps every engine's breaker across reconfiguration, like its drain
// flag.
//
// Renew extends a lease's deadline to now+ttl; Resize changes its KV tokens
// (shrinking always succeeds, growth is checked like an acquisition of the
// difference on the same engine, priority and tenant). Release is idempotent:
// releasing an unknown lease reports Released=false and no error. Renew,
// Resize and Release by another holder fail with ErrNotHolder; Renew and Resize
// of a missing or expired lease fail with ErrLeaseNotFound.
//
// A lease ends at its deadline or when its holder's session dies, whichever
// comes first. Expired leases keep counting against capacity until swept; a
// sweep runs at the start of every mutating call and through Sweep, each
// bounded. A backend may also sweep in the background, between calls (the
// etcd backend's watcher does): Sweep then reports only what it removed
// itself, which may be less than what had ended, and a dead session may be
// fully swept before its holder calls KeepAlive again. Counting an expired
// lease a little longer is safe; the reverse never happens.
//
// # Reservation modes
//
// A pool's spec says how its leases reserve KV tokens (PoolSpec.Reserve).
// In a worst_case pool a lease reserves every token its request could
// produce (prompt plus max_tokens, or the context), so admitted demand
// never exceeds capacity; Grow is refused with ErrInvalidArgument. In an
// elastic pool (the default) a lease reserves the prompt and an expected
// output, and its holder calls Grow(ref, kv) as the request generates
// tokens, with kv the absolute KV tokens the engine now holds for it.
//
// Grow is never refused for capacity, quota, draining, stale telemetry or
// the recovery window: it records what the engine already holds, as
// Reassert does. Growth that takes the engine's used KV (reservations plus
// correction, as Admit counts it, on the smaller of the configured and the
// reported capacity) above capacity, or the tenant above its KV quota,
// flags the lease Overgrown; the flag sticks. Because growth counts as
// used capacity, an engine it fills takes no new grant until its leases fit
// again. To leave room for growth, new grants and Resize growth in an
// elastic pool fit only within floor(cap * f) - floor(cap * h), h being
// PoolSpec.GrowthHeadroom; Grow may use the headroom.
//
// Grow to the lease's current size changes nothing and succeeds (a retry
// after an unknown outcome is safe). Grow below it, above the engine's
// capacity, or in a worst_case pool fails with ErrInvalidArgument and
// changes nothing; by another holder with ErrNotHolder; of a missing or
// expired lease with ErrLeaseNotFound, as Resize. GrowthOf is the rule.
//
// # Rate budgets
//
// A tenant's TokensPerMinute and RequestsPerMinute in a pool bound what
// its grants charge in any PoolSpec.RateWindow (a minute) of the ledger
// clock, whatever the number of holders: Acquire checks them in the same
// atomic step as the quotas and the engines, and a grant charges its
// AcquireRequest.ChargedTokens and one request to the tenant's window
// (Lease.Tokens records the charge). The window slides: RateBuckets
// buckets, the current one counting with a whole window before it, so
// every window-long span is inside what is counted (rate.go states the rule
// and its bound). A rate rejection's RetryAfter is when enough of the
// window leaves for the request to fit. Release by the holder trues the
// charge up to Usage.PromptTokens + CompletionTokens (both ways, in the
// bucket of the grant, once: a retried Release is not counted again); a
// Release with no prompt tokens (usage unknown) and a lease the ledger
// ends keep the charge. Reassert and Grow charge nothing. The window is
// kept per tenant in the pool, and survives Configure as reservations do.
//
// # Capacity truth
//
// An engine's capacity is the configured EngineSpec.KVTokens, or the
// capacity its last applied observation reported (KVTokensTotal) when that
// is smaller: a fleet file that claims more than the engine has never
// makes the ledger admit more than the engine holds.
//
// # Completion lengths
//
// Release with usage adds the completion length to the pool's histogram
// counters (see CompletionBucket), once for the pool and once for the
// lease's tenant, so every holder reads one fleet-wide distribution from
// Stats and a new holder starts from what the others learned.
//
// # Reassert
//
// Reassert re-inserts a lease a live holder still uses after the ledger lost
// it (new epoch, failover). It is accepted above capacity — it is real load —
// flagged Reasserted, and the overload it causes blocks new grants until it
// drains. Reassert of a lease id that still exists returns the existing lease
// (Replayed) to its holder and fails with ErrNotHolder for any other; no call
// ever overwrites a lease. A reasserted lease keeps its id and fencing token;
// when its epoch is the current one, the pool's sequence is raised to at
// least its sequence so no later grant can reuse the id. Reassert requires a
// live session, a configured engine, tenant and priority.
//
// A reassert may claim only what its holder could have held (CheckReassert,
// atomically against the pool's epoch E and last sequence S; else
// ErrInvalidArgument naming the bound, and nothing changes):
//
//	lease.ID == MakeLeaseID(lease.Fence)     (ValidateReassert)
//	1 <= Fence.Epoch <= E                    (no fence from the future)
//	1 <= Fence.Seq <= MaxFenceSeq = 2^53-1   (ValidateReassert)
//	Fence.Epoch == E: Fence.Seq <= S + MaxReassertAhead (2^20: a failover
//	                  that kept the epoch lost only its replication lag)
//	KVTokens <= cap_kv, Slots <= the engine's slots (one lease is never
//	                  larger than its engine; cap_kv as in "Capacity truth")
//
// No backend issues a sequence past MaxFenceSeq or wraps one: a grant that
// would, or that would mint an id a lease holds, fails with
// ErrFenceExhausted and changes nothing (a new epoch starts afresh).
//
// Telemetry checks what was re-asserted. A lease reasserted on an engine
// that has been observed is Unconfirmed from its reassert time r: every
// deadline it gets (at Reassert, at Renew) is at most r + ConfirmWithin
// (Options, default 30 s). An applied observation of its engine arriving
// (ledger clock) at a confirms every Unconfirmed lease of the engine with
// r <= a - ConfirmGrace (default 1 s) when running + waiting is at least
// the slots of the engine's leases ExpectedAt a: every reasserted lease,
// and every other lease granted at or before a - ConfirmGrace (newer ones
// may not have reached the engine). KV tokens cannot prove a lease
// (reservations exceed use by design); sequences can. A confirmed lease is
// renewed as any other. An Unconfirmed lease the engine never shows ends
// at its capped deadline, and as any lease the ledger ends on an observed
// engine it is then charged as an orphan until an observation measures
// the engine. On an engine never observed nothing can check a reassert:
// it is taken as claimed, never Unconfirmed (its amounts still bounded).
// A holder may reassert an ended lease again (its session is live), which
// starts a new bound: ConfirmWithin bounds how long one reassert can lie,
// not how often a holder with a live session lies; the audit reports each
// Unconfirmed lease (reassert_unconfirmed) with its holder.
//
// # Totals
//
// The per-engine and per-tenant reserved totals admission reads always
// equal the sums of the lease rows that name them: every call changes both
// in one atomic step. TotalsChecker (every backend, and Checked and the
// remote backend passing it through) compares them in one atomic read.
//
// # Epochs and fencing
//
// Epochs: every response carries the pool's epoch. A pool whose state was
// lost (flushed Redis, wiped etcd, restarted reserver) gets a new epoch when
// it is next configured, and a recovery window (see "Recovery"). A store
// that may have lost only its latest writes (a Redis replica promoted after
// an asynchronous failover) starts the new epoch itself at its first write,
// keeping what it has; see the redis package, "Ledger loss".
//
// Every grant carries a fencing token: the epoch and a sequence number that
// strictly increases per pool within an epoch, at most MaxFenceSeq. Epochs
// are ledger-clock microseconds at creation, so (epoch, sequence) increases
// across epochs too.
//
// # Recovery
//
// A new epoch that begins at B opens the pool's recovery window
// [B, RecoveringUntil = B + Options.RecoveryWindow) (none when the window
// is 0); it is not extended by later calls. While it is open, an engine
// takes new grants and Resize growth only once it has recovered
// (EngineState.Recovered): its last applied observation was taken
// (ObservedAt) and arrived (ledger clock) at or after
// RecoverySince(B, ConfirmGrace), its telemetry is not stale, and in a
// worst_case pool it showed nothing running or waiting. Any other engine
// refuses with ReasonRecovering, its retry hint the smaller of the pool's
// and the rest of the window. KeepAlive, Reassert, Renew, Release, Grow
// and shrinking never refuse for recovery, and from RecoveringUntil on
// every engine takes grants as before. While the window is open, KeepAlive
// reports how many configured engines have recovered (Session.Recovered):
// while none has, the pool refuses every new grant.
//
// An observation that arrives while the window is open sets the engine's
// correction to all it shows (CorrectionOf: KV tokens used, running plus
// waiting sequences), so admission counts every reservation plus every
// observed request until the first observation after the window, which
// sets the usual max(0, observed - reserved). docs/design.md, "Recovery
// after ledger loss", gives the safety argument and its assumptions.
//
// # Observe
//
// Observe records engine telemetry. Observations with ObservedAt not after the
// last applied one are ignored (several reconcilers may report the same
// scrape). An applied observation sets the engine's correction to
// max(0, observed - reserved) for KV tokens and running sequences: load the
// ledger does not know about is charged (during a recovery window, all it
// shows; see "Recovery"). An engine with StaleAfter > 0 whose
// last observation arrived (ledger clock) more than StaleAfter ago, or that
// was never observed, is stale: policy hold keeps the last correction, block
// refuses grants (ReasonTelemetryStale), ignore drops the correction.
//
// A lease the ledger ends itself — its deadline passed, or its holder's
// session died — may still be running on its engine: a paused holder
// (SIGSTOP, a long stall, a partition) cannot abort what it sent. On an
// engine that has been observed, such a lease's KV tokens and slots are
// therefore added to the engine's orphan charge as it ends, and stay
// charged until the next applied observation, which measures what the
// engine still runs. On an engine never observed the capacity returns at
// once (nothing would ever measure it). A lease its holder releases is not
// charged.
//
// An observation measures what an orphaned request holds then, not what it
// will grow to before its paused holder resumes and aborts it. With
// Options.OrphanHold > 0 the orphan charge therefore outlasts observations:
// the first observation that clears it is one that arrives (ledger clock)
// at least OrphanHold after the last of the engine's leases the ledger
// ended. Until then an orphan's measured usage is counted twice, in the
// correction and in the charge, which errs safe. The charge counts with the
// correction everywhere (admission, stale policy ignore, and Stats, which
// reports their sum as the correction). The price is capacity: a crashed
// holder's leases on observed engines return OrphanHold (plus up to one
// observation interval) after they end, not at the next observation.
//
// # What a Ledger does not do
//
// It does not estimate tokens, rank engines, queue requests, retry, or jitter
// retry hints: those belong to the router. It does not scrape engines: the
// reconciler calls Observe. It does not fence callers: a holder that cannot
// confirm its session must stop using its leases on its own clock.
//
// # Concurrency
//
// Every method is safe for concurrent use, and each call is atomic and
// linearizable with respect to every other call on the same pool.
package ledger
