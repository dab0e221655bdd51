-- lib.lua: helpers shared by every ledger operation. lua.go puts this file,
-- lib_admit.lua and lib_rate.lua at the top of one Redis function library,
-- then each operation's file as the body of its function.
--
-- KEYS (identical for every pool script, built by keys.go in Go):
--   1 state      HASH  the pool's state, fields below
--   2 engines    SET   engine ids that have fields in state (configured, or
--                      removed but still holding leases)
--   3 tenants    SET   tenant names that have fields in state
--   4 deadlines  ZSET  lease id scored by deadline (ms)
--   5 holders    ZSET  holder id scored by session expiry (ms)
--   6 req        HASH  "<holder> <request id>" -> lease id
--   7 leases     HASH  lease id -> lease record (see get_lease)
--   8 holder key prefix  (.. holder id -> SET of lease ids)
-- ARGV[1], the "sweep batch" of each script's header, is always
-- "<sweep batch> <orphan hold ms> <confirm within ms> <confirm grace ms>
-- <on promotion> <cluster>", parsed below into SWEEP_BATCH, ORPHAN_HOLD,
-- CONFIRM_WITHIN, CONFIRM_GRACE (ledger.Options.SweepBatch, or Sweep's
-- max, OrphanHold, ConfirmWithin and ConfirmGrace), ON_PROMOTION ('epoch',
-- or 'keep' when the client waits for replicas: see failover) and CLUSTER
-- ('1' on Redis Cluster, else '0'); a script's own arguments start at
-- ARGV[2].
--
-- State fields. Values of several parts are joined by single spaces (ids,
-- names and numbers never contain one), so a hot script reads a pool in one
-- HMGET of a few fields and writes it back in one HSET:
--   meta        "epoch recovering_until cap_kv cap_slots retry_after reserve
--               growth_headroom gen" (reserve: elastic or worst_case; a
--               meta of the five fields before them, written before
--               reservation modes, reads as elastic with no headroom). gen
--               is the pool's configuration generation, TIME in
--               microseconds or one more than the last, whichever is
--               later: configure.lua and drain.lua, the only writers of
--               the specs (e:<id>, t:<name>, p:<name>), write a new one
--               with every spec they write, so two reads of the same meta
--               read the same specs (acquire keeps them by meta: spec);
--               a meta written before gen has none
--   seq         last fencing sequence of the epoch
--   sweep_at    ms before which nothing can have expired: at most every
--               lease deadline and session expiry (see sweep)
--   created     ms the epoch began (its recovery: lib_admit.lua's recovery);
--               order  priority names joined by spaces
--   e:<id>      "configured kv slots stale_ns policy draining" (policy '-'
--               when none)
--   e:<id>:r    "rkv rslots nleases" (reservations)
--   e:<id>:c    "ckv cslots obs_arrived" (telemetry correction)
--   e:<id>:o    "okv oslots until_ms" (orphan charge: leases the ledger
--               ended on an observed engine; counts with the correction
--               until an observation arrives at or after until_ms, see
--               drop_lease and observe.lua)
--   e:<id>:url; e:<id>:obs "used total running waiting sec nsec"
--   e:<id>:u    "since slots n": since the ms of the latest Reassert that
--               left an unconfirmed lease on the engine, slots and n the
--               sums of the slots and the count of the engine's unconfirmed
--               leases (Reassert adds, drop_lease and observe.lua's
--               confirmation take away); present while observations should
--               look for leases to confirm (see observe.lua). Written
--               before the sums it is since alone: the sums unknown until
--               observe.lua's next scan counts them
--   e:<id>:b    "state failures successes opened_ms probes failed_ms": the
--               engine's circuit breaker (ledger.Breaker; state closed,
--               open or half_open; opened_ms 0 when it never opened;
--               failed_ms its latest counted failure, LastFailureAt, 0
--               when none); absent reads closed with every count 0, and
--               the five fields written before failed_ms read failed_ms 0
--   breaker     "failures cooldown_ms probes successes": the pool's
--               breaker spec, defaults applied (ledger.BreakerSpec;
--               failures < 0: off); absent (a pool configured before
--               breakers) reads the defaults
--   t:<name>    "configured kv_share slot_share tokens_per_minute
--               requests_per_minute" (the budgets: 0 none; a field of the
--               three before them, written before rate budgets, reads 0 0)
--   t:<name>:r  "rkv rslots nleases"
--   t:<name>:w  a rated tenant's rate window (lib_rate.lua)
--   rate_window ms: the pool's rate window (ledger.PoolSpec.RateWindow;
--               absent reads a minute)
--   p:<name>    max_fill
--   c:<name>    counter (ledger.Counter* names, "rejections:<reason>";
--               the total rejections is their sum, stats.lua)
--   g:<group>   the counters one operation adds to on every call, in one
--               field: their values joined by spaces, in GROUPS' order
--               (g:release). A counter's value is its c:<name>
--               (written before groups) plus its place in a group
--               (stats.lua adds them)
--   n:<name>    a tenant's completion-length counter ("completions/<bound>/
--               <tenant>", ledger.CompletionCounters), which counts for
--               the pool's ("completions/<bound>") as well: a release adds
--               to it alone, and Stats adds it to both, plus the
--               c:<name> fields of either written before n: fields
--   repl        "<master_replid> <cluster node id, or ->" of the server that
--               last wrote the pool (see failover)
--   window      the recovery window in ms Configure was given (0: none); a
--               pool configured before this field reads 10000
--   hashtable   HASHTABLE, written by Configure and read by nothing: a
--               value longer than hash-max-listpack-value (64 bytes by
--               default) makes Redis store the hash as a hash table, which
--               it never turns back into a listpack. A listpack (Redis's
--               encoding for a small hash) finds a field by scanning every
--               field before it, for each field of each HMGET and HSET; a
--               hash table finds it in constant time. The hot scripts
--               read and write some twenty fields a call.
--
-- Numbers: ledger time is milliseconds from redis TIME. Every integer written
-- to Redis or returned goes through int() so large values never reach
-- Redis's own number formatting; replies are strings or small integers.

-- The call's keys and options: the library's functions run one at a time,
-- each starting with open_call, which sets these for the helpers below.
local K_STATE, K_ENGINES, K_TENANTS, K_DEADLINES, K_HOLDERS, K_REQ, K_LEASES, P_HOLDER
local SWEEP_BATCH, ORPHAN_HOLD, CONFIRM_WITHIN, CONFIRM_GRACE, ON_PROMOTION, CLUSTER
local OPTIONS -- the ARGV[1] the six options were parsed from
-- The Lua and Redis functions the code calls, as upvalues: one lookup a
-- call where a global such as string.format takes two. Redis offers none
-- of them where the library's top level runs (FUNCTION LOAD), so the
-- first open_call sets them.
local rcall, tonum, unpk, floor, min, max, format, match, byte, sub, find, gmatch, gsub, concat

-- open_call starts a call with KEYS and ARGV: it sets the keys, and the
-- options when ARGV[1] differs from the last call's (a router sends the
-- same one on every call).
local function open_call(keys, argv)
  if not rcall then
    rcall, tonum, unpk, floor, min, max = redis.call, tonumber, unpack, math.floor, math.min, math.max
    format, match, byte, sub, find = string.format, string.match, string.byte, string.sub, string.find
    gmatch, gsub, concat = string.gmatch, string.gsub, table.concat
  end
  K_STATE, K_ENGINES, K_TENANTS, K_DEADLINES = keys[1], keys[2], keys[3], keys[4]
  K_HOLDERS, K_REQ, K_LEASES, P_HOLDER = keys[5], keys[6], keys[7], keys[8]
  if argv[1] == OPTIONS then return end
  local sb, oh, cw, cg, op, cl = match(argv[1], '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$')
  SWEEP_BATCH, ORPHAN_HOLD, CONFIRM_WITHIN, CONFIRM_GRACE = tonum(sb), tonum(oh), tonum(cw), tonum(cg)
  ON_PROMOTION, CLUSTER, OPTIONS = op, cl, argv[1]
end
local HASHTABLE = 'this value is longer than hash-max-listpack-value, so Redis keeps the ledger state hash a hash table'
local NEVER = 9007199254740992 -- sweep_at when nothing is outstanding (2^53)
local MAX_SEQ = 9007199254740991 -- ledger.MaxFenceSeq, 2^53-1: exact here

-- int formats x as '%.0f' does. A whole number of magnitude below 2^53
-- (every count, amount and ms the ledger keeps) goes through '%d' (a C
-- long): the same digits, and glibc formats a long several times faster
-- than a double; -0 gives '0'.
local function int(x)
  if x == floor(x) and x < 9007199254740992 and x > -9007199254740992 then return format('%d', x) end
  return format('%.0f', x)
end
-- num is the number decimal string s holds, 0 when s is nil, false or
-- empty (an absent field, an empty capture). It converts with Lua's
-- arithmetic coercion, one strtod; tonumber checks its argument with one
-- and converts it with a second. s must hold a number when it is not
-- empty: every field the ledger writes does.
local function num(s)
  if s and s ~= '' then return s + 0 end
  return 0
end
local function fill(cap, f) return floor(cap * f) end

-- clock returns the ledger time in ms and the raw TIME reply.
local function clock()
  local t = rcall('TIME')
  return t[1] * 1000 + floor(t[2] / 1000), t
end

-- memo returns parse with its results kept, by the string parsed, in the
-- library's state between calls: for the fields a call parses every time
-- and that change only when the pool is configured or an engine drained (a
-- pool's meta, an engine's or a tenant's spec). parse must be a function of
-- the string alone and its results are shared: read-only. The cache starts
-- over once it holds 256 strings, so it stays small (the garbage collector
-- walks it on every cycle).
local function memo(parse)
  local cache, n = {}, 0
  return function(s)
    local r = cache[s]
    if r == nil then
      r = parse(s)
      if n >= 256 then cache, n = {}, 0 end
      cache[s], n = r, n + 1
    end
    return r
  end
end

-- Field names made of a prefix and a name, kept (memo) so that a call
-- looks them up instead of building them: cfield('grants') is
-- 'c:grants', pfield('batch') 'p:batch', efield(id) is an engine's
-- {spec = 'e:<id>', r = 'e:<id>:r', c, o, b, obs, u}, tfield(name) a
-- tenant's {spec = 't:<name>', r, w}.
local cfield = memo(function(name) return 'c:' .. name end)
local efield = memo(function(id)
  local f = 'e:' .. id
  return {spec = f, r = f .. ':r', c = f .. ':c', o = f .. ':o', b = f .. ':b', obs = f .. ':obs', u = f .. ':u'}
end)
local tfield = memo(function(name)
  local f = 't:' .. name
  return {spec = f, r = f .. ':r', w = f .. ':w'}
end)
local pfield = memo(function(name) return 'p:' .. name end)

-- scratch returns table k of pool: a table the library keeps between
-- calls, for a hot call to fill instead of building a new one. A table of
-- a dozen named fields built on every call costs about six thousand
-- instructions (allocation, rehashing as it fills, the collector);
-- refilling the same names in one whose slots exist allocates nothing.
-- Its filler must set every field any code sets on such a table, so that
-- nothing a previous call left is read (scripts/lua's
-- TestScratchFieldsAllSet checks engine's and tenant's), and a scratch
-- table lives only until the next scratch of its k: never keep one across
-- calls, nor two uses of one k at once. (Emptying it first with next
-- costs about as much as a new table.)
local function scratch(pool, k)
  local t = pool[k]
  if not t then
    t = {}
    pool[k] = t
  end
  return t
end

-- meta parses the meta and sweep_at fields; nil when the pool is unknown.
-- m.xepoch is the epoch in hex, as lease ids write it; m.elastic is false
-- in a worst_case pool; m.headroom is the pool's growth
-- headroom (ledger.PoolSpec.GrowthHeadroom). The table is the memo's, one
-- per meta string, not a copy: every field is read-only but sweep_at,
-- which meta sets on every call and the call may lower (after a sweep),
-- so a call reads only the sweep_at it set itself.
--
-- m.especs, m.tspecs and m.pspecs keep, by engine id, tenant name and
-- priority name, the spec fields (e:<id>, t:<name>, p:<name>; false when
-- absent) calls have read while meta was this string, and m.fields the
-- pool's breaker spec (breaker, which only configure.lua writes, with
-- meta): see spec in lib_admit.lua. m.known holds (true) the engine ids
-- acquire found configured in m.especs, so that a later call checks each
-- candidate with one lookup.
local meta_spec = memo(function(s)
  local epoch, ru, ckv, cs, retry, reserve, headroom =
    match(s, '^(%S+) (%S+) (%S+) (%S+) (%S+) ?(%S*) ?(%S*) ?%S*$')
  return {epoch = epoch, xepoch = format('%x', tonum(epoch)), ru = tonum(ru), cap_kv = tonum(ckv),
    cap_slots = tonum(cs), retry = tonum(retry), reserve = reserve, elastic = reserve ~= 'worst_case',
    headroom = num(headroom), sweep_at = 0, especs = {}, tspecs = {}, pspecs = {}, fields = {}, known = {}}
end)

-- next_gen returns the configuration generation (see the meta field
-- above) that follows meta string s's (nil: none, as in a meta written
-- before generations or no meta): TIME t in microseconds, or s's
-- generation plus one when that is later.
local function next_gen(s, t)
  local gen = s and match(s, '^%S+ %S+ %S+ %S+ %S+ %S+ %S+ (%S+)$')
  return int(max(tonum(t[1]) * 1000000 + tonum(t[2]), num(gen) + 1))
end

-- with_gen returns meta string s with the next configuration generation
-- (next_gen). A meta written before reservation modes gains the two
-- fields it read as (elastic, no headroom).
local function with_gen(s, t)
  local head, reserve, headroom = match(s, '^(%S+ %S+ %S+ %S+ %S+) ?(%S*) ?(%S*)')
  if reserve == '' then reserve = 'elastic' end
  if headroom == '' then headroom = '0' end
  return head .. ' ' .. reserve .. ' ' .. headroom .. ' ' .. next_gen(s, t)
end

local function meta(s, sweep_at)
  if not s then return nil end
  local m = meta_spec(s)
  m.sweep_at = num(sweep_at)
  return m
end

-- triple parses "a b c" (reservations, corrections, orphan charges) into
-- numbers.
local function triple(s)
  if not s then return 0, 0, 0 end
  local a, b, c = match(s, '^(%S+) (%S+) (%S+)$')
  return a + 0, b + 0, c + 0
end

-- fmt3 is int(a) .. ' ' .. int(b) .. ' ' .. int(c), in one format when
-- all three are whole and below 2^53 (always, for the amounts and counts
-- it formats).
local function fmt3(a, b, c)
  if a % 1 == 0 and b % 1 == 0 and c % 1 == 0 and a < 9007199254740992 and b < 9007199254740992
    and c < 9007199254740992 and a > -9007199254740992 and b > -9007199254740992 and c > -9007199254740992 then
    return format('%d %d %d', a, b, c)
  end
  return int(a) .. ' ' .. int(b) .. ' ' .. int(c)
end

-- Leases: a lease is a table of the L_N fields every reply lists, in the
-- order scripts.go decodes (unconfirmed is '1' while L_SINCE is not '0';
-- probe is '1' for a probe lease, ledger.Lease.Probe; tokens is what the
-- grant charged to its tenant's rate window, ledger.Lease.Tokens), then
-- owns_req ('1' when the lease set its req entry) and since. Its record is
-- fields 1..13, owns_req, overgrown, since, probe, then tokens only when
-- not '0': since is the ms of the Reassert that left the lease
-- unconfirmed, '0' for every other lease (ledger.Lease.Unconfirmed). The
-- flags came last, each in its turn, so a record written before overgrown
-- (14 fields), before since (15), before probe (16) or without tokens
-- (17) reads them as '0'.
local L_ID, L_ENGINE, L_TENANT, L_PRIO, L_KV, L_SLOTS, L_HOLDER, L_REQ = 1, 2, 3, 4, 5, 6, 7, 8
local L_CREATED, L_DEADLINE, L_FEPOCH, L_FSEQ, L_REASSERTED, L_OVERGROWN, L_UNCONF = 9, 10, 11, 12, 13, 14, 15
local L_PROBE, L_TOKENS, L_OWNS, L_SINCE = 16, 17, 18, 19
local L_N = 17
local LEASE_PATTERN = '^(%S*) (%S*) (%S*) (%S*) (%S*) (%S*) (%S*) (%S*) (%S*) (%S*) (%S*) (%S*) (%S*) (%S*) ?(%S*) ?(%S*) ?(%S*) ?(%S*)()$'

-- parse_lease reads a lease record; nil when s is. The pattern's last
-- capture, the record's length plus one, is never read: it makes the
-- table's array part hold L_SINCE too, so setting it does not grow the
-- table.
local function parse_lease(s)
  if not s then return nil end
  local l = {match(s, LEASE_PATTERN)}
  l[L_OVERGROWN], l[L_OWNS], l[L_SINCE], l[L_PROBE], l[L_TOKENS] = l[15], l[14], l[16], l[17], l[18]
  if l[L_OVERGROWN] ~= '1' then l[L_OVERGROWN] = '0' end
  if num(l[L_SINCE]) <= 0 then l[L_SINCE] = '0' end
  if l[L_PROBE] ~= '1' then l[L_PROBE] = '0' end
  if num(l[L_TOKENS]) <= 0 then l[L_TOKENS] = '0' end
  l[L_UNCONF] = l[L_SINCE] == '0' and '0' or '1'
  return l
end

local function get_lease(id) return parse_lease(rcall('HGET', K_LEASES, id)) end

-- lease_record is lease l's record.
local function lease_record(l)
  return concat(l, ' ', 1, 13) .. ' ' .. l[L_OWNS] .. ' ' .. l[L_OVERGROWN] .. ' ' .. l[L_SINCE] .. ' ' .. l[L_PROBE]
    .. (l[L_TOKENS] ~= '0' and ' ' .. l[L_TOKENS] or '')
end

-- set_lease stores lease l and returns its record (decodeRecord in
-- internal/ledger/redis reads a reply of it).
local function set_lease(l)
  local rec = lease_record(l)
  rcall('HSET', K_LEASES, l[L_ID], rec)
  return rec
end

-- put_lease stores a new lease (without charging it).
local function put_lease(l)
  local id = l[L_ID]
  l[L_OWNS] = rcall('HSETNX', K_REQ, l[L_HOLDER] .. ' ' .. l[L_REQ], id) == 1 and '1' or '0'
  set_lease(l)
  rcall('ZADD', K_DEADLINES, l[L_DEADLINE], id)
  rcall('SADD', P_HOLDER .. l[L_HOLDER], id)
end

-- forget removes a removed engine's or tenant's fields with its last lease.
local function forget_engine(id)
  local f = 'e:' .. id
  rcall('HDEL', K_STATE, f, f .. ':url', f .. ':r', f .. ':c', f .. ':o', f .. ':obs', f .. ':u', f .. ':b')
  rcall('SREM', K_ENGINES, id)
end

local function forget_tenant(name)
  local f = 't:' .. name
  rcall('HDEL', K_STATE, f, f .. ':r', f .. ':w')
  rcall('SREM', K_TENANTS, name)
end

-- Counter groups: the counters one operation adds to on every call, kept
-- in one field g:<group> so that the call reads, parses, formats and
-- writes one field where it would four. GROUPS lists each group's
-- counters (ledger.Counter* names) in their order in the field: four of
-- them (group_add); a group only ever gains names at its end, so a field
-- written with fewer reads its missing counters as 0. Two counters in a
-- group cost more than in fields of their own (grow's stay so).
local GROUPS = {
  ['g:release'] = {'releases', 'released_kv_tokens', 'actual_prompt_tokens', 'actual_completion_tokens'},
}

-- group_add is the value of a four-counter group field s (nil: absent)
-- with d1..d4 (its counters' deltas, in order) added. Counters are whole
-- numbers below 2^53, so one '%d' format writes them all.
local function group_add(s, d1, d2, d3, d4)
  local a, b, c, e = match(s or '0', '^(%S+) ?(%S*) ?(%S*) ?(%S*)')
  a, b, c, e = num(a) + d1, num(b) + d2, num(c) + d3, num(e) + d4
  if a % 1 == 0 and b % 1 == 0 and c % 1 == 0 and e % 1 == 0 and a < 9007199254740992 and b < 9007199254740992
    and c < 9007199254740992 and e < 9007199254740992 and a > -9007199254740992 and b > -9007199254740992
    and c > -9007199254740992 and e > -9007199254740992 then
    return format('%d %d %d %d', a, b, c, e)
  end
  -- Not all counts: each as int formats it, never through a C long.
  return int(a) .. ' ' .. int(b) .. ' ' .. int(c) .. ' ' .. int(e)
end

-- charge_fields lists the fields charge reads for engine eid, tenant
-- tname and counters cnt, in its order: a counter's c:<name>, or a
-- group's own field name (g:<group>) as given.
local function charge_fields(eid, tname, cnt)
  local f = {efield(eid).r, tfield(tname).r}
  for i = 1, #cnt, 2 do
    local name = cnt[i]
    f[#f + 1] = GROUPS[name] and name or cfield(name)
  end
  return f
end

-- charge adds (kv, slots, n) to engine eid's and tenant tname's reservations and
-- cnt (counter name, delta, ...; or a group's field name, then a table of
-- its counters' deltas) to counters, writing them with the
-- (field, value, ...) pairs in extra in one HSET. A removed engine or
-- tenant is forgotten with its last lease. pre, when given, holds what
-- charge would read first (the fields charge_fields names), read by the
-- caller's own HMGET, from pre[at] on; f, when given, is the list
-- charge_fields made for them (it may go on past them).
local function charge(eid, tname, kv, slots, n, cnt, extra, pre, at, f)
  f = f or charge_fields(eid, tname, cnt)
  local v, o = pre, (at or 1) - 1
  if not v then v, o = rcall('HMGET', K_STATE, unpk(f)), 0 end
  local ekv, es, en = triple(v[o + 1])
  local tkv, ts, tn = triple(v[o + 2])
  en, tn = en + n, tn + n
  local w = extra or {}
  w[#w + 1] = f[1]
  w[#w + 1] = fmt3(ekv + kv, es + slots, en)
  w[#w + 1] = f[2]
  w[#w + 1] = fmt3(tkv + kv, ts + slots, tn)
  for i = 1, #cnt, 2 do
    local d, k = cnt[i + 1], 2 + (i + 1) / 2
    w[#w + 1] = f[k]
    if type(d) == 'table' then
      w[#w + 1] = group_add(v[o + k], d[1], d[2], d[3], d[4])
    else
      w[#w + 1] = int(num(v[o + k]) + d)
    end
  end
  rcall('HSET', K_STATE, unpk(w))
  if n < 0 and (en <= 0 or tn <= 0) then
    local x = rcall('HMGET', K_STATE, efield(eid).spec, tfield(tname).spec)
    if en <= 0 and sub(x[1] or '', 1, 1) ~= '1' then forget_engine(eid) end
    if tn <= 0 and sub(x[2] or '', 1, 1) ~= '1' then forget_tenant(tname) end
  end
end

-- Breakers (ledger.Breaker, internal/ledger/breaker.go) ---------------------

local BREAKER_CLOSED = 'closed 0 0 0 0 0' -- e:<id>:b when absent

-- breaker_spec parses the pool's breaker field; absent, the defaults
-- (ledger.DefaultBreaker*).
-- The spec is kept (memo), by the field's value, and shared: read-only.
local breaker_spec_of = memo(function(s)
  local f, c, p, n = match(s, '^(%S+) (%S+) (%S+) (%S+)$')
  if not f then return {failures = 5, cooldown = 10000, probes = 1, successes = 2} end
  return {failures = tonum(f), cooldown = tonum(c), probes = tonum(p), successes = tonum(n)}
end)
local function breaker_spec(s) return breaker_spec_of(s or '') end

-- breaker_at parses an engine's e:<id>:b and reads it at now with spec s:
-- ledger.Breaker.Advance. It returns the breaker and the transition the
-- reading made ('half_open' when an open breaker's cooldown has passed,
-- else nil). With the breaker off it reads closed, keeping its probes.
local function breaker_at(raw, now, s)
  local st, f, n, at, p, fa = match(raw or BREAKER_CLOSED, '^(%S+) (%S+) (%S+) (%S+) (%S+) ?(%S*)$')
  local b = {state = st, failures = tonum(f), successes = tonum(n), opened = tonum(at), probes = tonum(p),
    failed = num(fa)}
  if s.failures < 0 then
    return {state = 'closed', failures = 0, successes = 0, opened = 0, probes = b.probes, failed = 0}
  end
  if b.state == 'open' and now >= b.opened + s.cooldown then
    b.state, b.successes = 'half_open', 0
    return b, 'half_open'
  end
  return b
end

local function fmt_breaker(b)
  return b.state .. ' ' .. int(b.failures) .. ' ' .. int(b.successes) .. ' ' .. int(b.opened) .. ' ' .. int(b.probes)
    .. ' ' .. int(b.failed)
end

-- breaker_quiet reports whether a success of a lease that is no probe
-- leaves an engine's breaker as it is stored, raw (nil: none), under the
-- pool's breaker field spec: ledger.Breaker.Report changes nothing and
-- breaker_write stores nothing. So it is with no breaker stored (closed,
-- every count 0), and, under a breaker that is on, with a closed one that
-- counts no failure (the success resets the count to the 0 it is; a
-- closed breaker does not move with time) written in six fields, as
-- fmt_breaker writes them.
local function breaker_quiet(raw, spec)
  if not raw then return true end
  return match(raw, '^closed 0 %S+ %S+ %S+ %S+$') ~= nil and breaker_spec(spec).failures >= 0
end

-- breaker_write adds to w the (field, value) pair storing engine id's
-- breaker b, unless it is raw, what the engine stored (nil: closed).
local function breaker_write(w, id, b, raw)
  local s = fmt_breaker(b)
  if s ~= (raw or BREAKER_CLOSED) then
    w[#w + 1] = efield(id).b
    w[#w + 1] = s
  end
end

-- breaker_report is ledger.Breaker.Report (release.lua): it applies
-- outcome o of a released lease (created: its grant time in ms,
-- L_CREATED; probe: a probe lease) to b, read with breaker_at at now
-- under spec s, and returns the transition it made, or nil. A success
-- resets the count only if its lease was granted in a later millisecond
-- than the latest counted failure (ledger.Breaker.Fresh; failed 0: none
-- counted). At the library's top, not in release.lua's body, so that a
-- release does not make it anew.
local function breaker_report(b, now, s, created, probe, o)
  if probe then b.probes = max(0, b.probes - 1) end
  if s.failures < 0 or o == '' then return nil end
  local failed = o ~= 'ok'
  if b.state == 'closed' then
    if not failed then
      if b.failed == 0 or created > b.failed then b.failures = 0 end
      return nil
    end
    b.failures, b.failed = b.failures + 1, now
    if b.failures >= s.failures then
      b.state, b.failures, b.opened = 'open', 0, now
      return 'opened'
    end
  elseif b.state == 'half_open' and probe then
    if failed then
      b.state, b.successes, b.opened, b.failed = 'open', 0, now, now
      return 'reopened'
    end
    b.successes = b.successes + 1
    if b.successes >= s.successes then
      b.state, b.successes, b.failures = 'closed', 0, 0
      return 'closed'
    end
  end
  return nil
end

-- mark_sums parses an engine's e:<id>:u: the reassert ms as written, the
-- slots and the count of the engine's unconfirmed leases (nil, nil in a
-- mark written before the sums).
local function mark_sums(u)
  local since, slots, n = match(u, '^(%S+) (%S+) (%S+)$')
  if not since then return u, nil, nil end
  return since, slots + 0, n + 0
end

-- mark_add returns mark u (nil: none yet, sums 0) with slots and n added
-- to its sums and its reassert ms since (nil: u's own); nil when u was
-- written before the sums, which stay unknown until observe.lua's scan.
local function mark_add(u, since, slots, n)
  local usince, uslots, un = '', 0, 0
  if u then usince, uslots, un = mark_sums(u) end
  if not uslots then return nil end
  return (since or usince) .. ' ' .. int(max(0, uslots + slots)) .. ' ' .. int(max(0, un + n))
end

-- unlist_lease removes lease id of holder from its holder's set, the
-- request index (req its request id; only when it owns its entry, owns
-- '1'), the deadlines and the leases: what drop_lease and release.lua's
-- inline path remove of every lease they end.
local function unlist_lease(id, holder, req, owns)
  rcall('SREM', P_HOLDER .. holder, id)
  if owns == '1' then rcall('HDEL', K_REQ, holder .. ' ' .. req) end
  rcall('ZREM', K_DEADLINES, id)
  rcall('HDEL', K_LEASES, id)
end

-- drop_lease removes a lease, returns its capacity and adds cnt to counters.
-- A lease the ledger ends at now (cnt 'expired' or 'revoked') may still run
-- on its engine: on an engine that has been observed its amounts are added
-- to the engine's orphan charge, which counts with the correction until
-- the first observation arriving at or after until = max(until, now +
-- ORPHAN_HOLD) (ledger.EndedByLedger, ledger.Options.OrphanHold). When
-- the ledger ends a probe lease it frees its slot of the engine's probe
-- budget (ledger.Breaker.Unprobe); when its holder releases it, report
-- (release.lua's ledger.Breaker.Report, nil elsewhere) applies the
-- outcome. Either stores the breaker read at now and counts its
-- transitions. pre, at and f are charge's (for cnt as given: unused once
-- the breaker adds a counter).
local function drop_lease(l, cnt, now, report, pre, at, f)
  local ncnt = #cnt
  unlist_lease(l[L_ID], l[L_HOLDER], l[L_REQ], l[L_OWNS])
  local extra = {}
  local ef = efield(l[L_ENGINE])
  local ended = cnt[1] == 'expired' or cnt[1] == 'revoked'
  if ended then
    local x = rcall('HMGET', K_STATE, ef.c, ef.o)
    local _, _, arrived = triple(x[1])
    if arrived > 0 then
      local okv, oslots, until_ms = triple(x[2])
      extra = {ef.o, fmt3(okv + num(l[L_KV]), oslots + num(l[L_SLOTS]), max(until_ms, now + ORPHAN_HOLD))}
    end
  end
  -- An unconfirmed lease leaves its engine's sums (e:<id>:u; a mark
  -- without sums stays as it is).
  if l[L_SINCE] ~= '0' then
    local u = rcall('HGET', K_STATE, ef.u)
    u = u and mark_add(u, nil, -num(l[L_SLOTS]), -1)
    if u then
      extra[#extra + 1] = ef.u
      extra[#extra + 1] = u
    end
  end
  if report or (ended and l[L_PROBE] == '1') then
    local x = rcall('HMGET', K_STATE, 'breaker', ef.b)
    local s = breaker_spec(x[1])
    local b, t = breaker_at(x[2], now, s)
    local t2
    if report then
      t2 = report(b, now, s, l[L_PROBE] == '1')
    else
      b.probes = max(0, b.probes - 1)
    end
    breaker_write(extra, l[L_ENGINE], b, x[2])
    for _, tr in ipairs({t or '', t2 or ''}) do
      if tr ~= '' then
        cnt[#cnt + 1] = 'breaker:' .. tr
        cnt[#cnt + 1] = 1
      end
    end
  end
  if #cnt ~= ncnt then pre, f = nil, nil end -- the breaker's counters are not in them
  charge(l[L_ENGINE], l[L_TENANT], -num(l[L_KV]), -num(l[L_SLOTS]), -1, cnt, extra, pre, at, f)
end

-- holder_state returns 'live', 'dead' (expired session not yet fully
-- swept) or 'none'. A session is live while now < expiry. Before sweep_at
-- (the pool's, when given) every session expires later still, so one
-- that exists is live: ZRANK tells, answering an integer where ZSCORE's
-- score costs a float format and parse.
local function holder_state(holder, now, sweep_at)
  if sweep_at and now < sweep_at then
    if rcall('ZRANK', K_HOLDERS, holder) then return 'live' end
    return 'none'
  end
  local s = rcall('ZSCORE', K_HOLDERS, holder)
  if not s then return 'none' end
  s = s + 0
  if s <= now then return 'dead' end
  return 'live'
end

-- end_leases drops the leases of ids, counting each under reason ('expired'
-- or 'revoked'), and removes an id whose lease is already gone from the
-- index that listed it (redis.call(cmd, key, id)). Returns how many it
-- dropped.
local function end_leases(ids, reason, now, cmd, key)
  local n = 0
  for _, id in ipairs(ids) do
    local l = get_lease(id)
    if l then
      drop_lease(l, {reason, 1}, now)
      n = n + 1
    else
      rcall(cmd, key, id)
    end
  end
  return n
end

-- sweep removes up to batch expired leases, then leases of dead sessions,
-- then dead sessions left with no lease, and recomputes sweep_at from the
-- earliest deadline and session expiry left. Returns expired, revoked,
-- holders, sweep_at.
--
-- sweep_at stays a lower bound: every ZADD to deadlines or holders lowers it
-- to its score, so while now < sweep_at nothing has expired, every session
-- is live and scripts skip the sweep. A lease's holder always has a session
-- entry (sessions are removed only once their lease set is empty), so while
-- now < sweep_at a lease's holder is live too.
local function sweep(now, batch)
  local revoked, holders = 0, 0
  local budget = batch
  local ids = rcall('ZRANGEBYSCORE', K_DEADLINES, '-inf', now, 'LIMIT', '0', budget)
  local expired = end_leases(ids, 'expired', now, 'ZREM', K_DEADLINES)
  budget = budget - #ids
  if budget > 0 then
    local dead = rcall('ZRANGEBYSCORE', K_HOLDERS, '-inf', now, 'LIMIT', '0', budget)
    for _, h in ipairs(dead) do
      if budget <= 0 then break end
      local hk = P_HOLDER .. h
      local lids = rcall('SRANDMEMBER', hk, budget)
      revoked = revoked + end_leases(lids, 'revoked', now, 'SREM', hk)
      budget = budget - #lids
      if #lids == 0 then budget = budget - 1 end
      if rcall('SCARD', hk) == 0 then
        rcall('ZREM', K_HOLDERS, h)
        holders = holders + 1
      end
    end
  end
  local at = NEVER
  local d = rcall('ZRANGE', K_DEADLINES, '0', '0', 'WITHSCORES')
  if d[2] then at = min(at, tonum(d[2])) end
  d = rcall('ZRANGE', K_HOLDERS, '0', '0', 'WITHSCORES')
  if d[2] then at = min(at, tonum(d[2])) end
  rcall('HSET', K_STATE, 'sweep_at', int(at))
  return expired, revoked, holders, at
end

-- Failover -------------------------------------------------------------------

local DEFAULT_WINDOW = 10000 -- ledger.DefaultRecoveryWindow, for pools without 'window'

-- failover (failover_seen) runs before any write in every script that
-- writes a known pool but release, grow and a resize that does not grow
-- (see open_lease: they admit nothing and mint no id), on the meta and repl its first read found. A replica
-- promoted to primary (Sentinel, a Redis Cluster failover, REPLICAOF NO
-- ONE) holds the pool as the old primary had it some writes ago, as does a
-- primary restarted from its RDB or AOF: grants it acknowledged, sequence
-- numbers it issued and sessions it extended may be missing, and a later
-- grant could take capacity a lost lease holds or reuse its id. Every such
-- server has a replication id (INFO's master_replid) other than the one
-- recorded in repl by the server that last wrote the pool, and there
-- failover starts a new epoch in place, as Configure starts one for a lost
-- pool: epoch = the later of TIME in microseconds and the old epoch + 1,
-- the pool's recovery window from now, sequence 0, created = now (when
-- the epoch began), counter failovers.
-- Leases, sessions and specs the server holds stay. Holders see the new
-- epoch at their next KeepAlive and re-assert every lease they hold (the
-- ones still here are replayed), so the lost ones come back before the
-- window ends. Two cases only record the new server:
--   - Redis Cluster (CLUSTER '1'), another node than the recorded one, and
--     the recorded id is not this node's previous one (master_replid2): the
--     slot was migrated, and MIGRATE moves each key whole;
--   - ON_PROMOTION 'keep' (the client acknowledges a change only once
--     wait_replicas replicas have it) on a promoted replica of the recorded
--     server (its master_replid2 is the recorded id): Sentinel and Redis
--     Cluster promote the replica with the most replicated data, which has
--     every acknowledged write.
-- A pool with no repl (first write by this version) records it.
--
-- failover_seen takes the pool's meta and repl fields, read by the
-- caller's own HMGET (nil meta: an unknown pool, nothing to do), and
-- returns true when it started a new epoch (meta, seq and created
-- changed). The common case, this server wrote the pool last, costs one
-- INFO and one comparison.
-- repl is "<40 hex> <node>": the server that wrote it shows the line
-- repl_line(repl) in INFO replication (the id, then the line's end; the
-- previous id's line is master_replid2).
local repl_line = memo(function(repl)
  if byte(repl, 41) == 32 then return 'master_replid:' .. sub(repl, 1, 40) .. '\r' end
  return false
end)

local function failover_seen(meta_s, repl)
  if not meta_s then return false end
  local info = rcall('INFO', 'replication')
  -- Plain finds: an unanchored pattern would be tried at every byte of
  -- the reply before the id.
  local line = repl and repl_line(repl)
  if line and find(info, line, 1, true) then return false end
  local at = find(info, 'master_replid:', 1, true)
  local id = at and match(info, '^%x+', at + 14)
  local rid, rnode = match(repl or '', '^(%S+) (%S+)$')
  local node = '-'
  if CLUSTER == '1' then node = rcall('CLUSTER', 'MYID') end
  local started = false
  if rid then
    local promoted = rid == match(info, 'master_replid2:(%x+)')
    local migrated = CLUSTER == '1' and rnode ~= node and not promoted
    if not migrated and not (promoted and ON_PROMOTION == 'keep') then
      local now, t = clock()
      local old = match(meta_s, '^(%S+)')
      local epoch = max(tonum(t[1]) * 1000000 + tonum(t[2]), tonum(old) + 1)
      local window = tonum(rcall('HGET', K_STATE, 'window') or DEFAULT_WINDOW)
      local ru = '0'
      if window > 0 then ru = int(now + window) end
      rcall('HSET', K_STATE, 'meta', (gsub(meta_s, '^%S+ %S+', int(epoch) .. ' ' .. ru, 1)), 'seq', 0,
        'created', int(now))
      rcall('HINCRBY', K_STATE, 'c:failovers', 1)
      started = true
    end
  end
  rcall('HSET', K_STATE, 'repl', id .. ' ' .. node)
  return started
end

-- failover reads the pool's meta and repl and runs failover_seen: for the
-- scripts that read the pool only after it.
local function failover()
  local v = rcall('HMGET', K_STATE, 'meta', 'repl')
  failover_seen(v[1], v[2])
end

-- open_pool starts a lease operation: it loads the pool's meta, runs
-- failover_seen, reads the ledger clock and runs the bounded sweep when
-- something may have expired. It returns nil for an unknown pool, else the
-- meta and now.
local function open_pool()
  local v = rcall('HMGET', K_STATE, 'meta', 'sweep_at', 'repl')
  if failover_seen(v[1], v[3]) then v = rcall('HMGET', K_STATE, 'meta', 'sweep_at') end
  local m = meta(v[1], v[2])
  if not m then return nil end
  local now = clock()
  if now >= m.sweep_at then
    local _
    _, _, _, m.sweep_at = sweep(now, SWEEP_BATCH)
  end
  return m, now
end

-- lease_fields lists what open_lease's HMGET reads: meta, sweep_at, when
-- there is a lease l the fields more(l) names, then, with check, repl.
local function lease_fields(l, more, check)
  local f = l and {'meta', 'sweep_at', unpk(more(l))} or {'meta', 'sweep_at'}
  if check then f[#f + 1] = 'repl' end
  return f
end

-- open_lease is open_pool for an operation on lease id that reads the
-- pool's fields more(l) names for the lease l: it reads the lease first,
-- so that one HMGET loads meta, sweep_at and those fields (none when there
-- is no lease). It returns nil for an unknown pool, else the meta, now,
-- the lease (nil: none) and the HMGET's values, more's from index 3. A
-- sweep, which may end the lease or change the fields, reads both again.
--
-- With got, l0 is the lease (nil: none) the caller read already.
--
-- With check it runs failover_seen first, as every operation that admits
-- capacity must (a resize that grows). Release, grow and a resize that
-- shrinks do not: they admit nothing (a release or a shrink frees what
-- its lease holds, a growth charges what the engine already holds, with
-- no capacity, quota or recovery check) and mint no lease id, and holders learn the epoch from KeepAlive, never from their
-- replies. On a promoted server they act on the leases it holds, as
-- they would in its new epoch, and its first acquire, resize, keepalive,
-- renew, reassert, observe or configuration starts that epoch (see
-- failover_seen).
local function open_lease(id, more, check, got, l0)
  local l = l0
  if not got then l = get_lease(id) end
  local f = lease_fields(l, more, check)
  local v = rcall('HMGET', K_STATE, unpk(f))
  if check and failover_seen(v[1], v[#f]) then v = rcall('HMGET', K_STATE, unpk(f)) end
  local m = meta(v[1], v[2])
  if not m then return nil end
  local now = clock()
  if now >= m.sweep_at then
    local _
    _, _, _, m.sweep_at = sweep(now, SWEEP_BATCH)
    l = get_lease(id)
    v = rcall('HMGET', K_STATE, unpk(lease_fields(l, more)))
  end
  return m, now, l, v
end

-- held checks lease l (nil: none) for an operation by holder: it returns
-- l when it is live, or nil and the status to reply: 'lease_not_found'
-- when there is none or it has ended (deadline passed, or its holder's
-- session is no longer live, even before a sweep removes it),
-- 'not_holder' when another holder owns it.
local function held(m, now, l, holder)
  if not l then return nil, 'lease_not_found' end
  if l[L_HOLDER] ~= holder then return nil, 'not_holder' end
  if num(l[L_DEADLINE]) <= now or (now >= m.sweep_at and holder_state(holder, now) ~= 'live') then
    return nil, 'lease_not_found'
  end
  return l
end

-- held_lease is held for lease id.
local function held_lease(m, now, id, holder) return held(m, now, get_lease(id), holder) end

-- Engines -------------------------------------------------------------------

-- engine parses a configured engine's e:<id> field; nil when the engine is
-- unknown or removed (with removed, a removed engine's last spec).
local engine_spec = memo(function(s)
  local cfg, kv, slots, stale_ns, policy, draining = match(s, '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$')
  return {configured = cfg == '1', kv = tonum(kv), slots = tonum(slots), stale_ns = tonum(stale_ns), policy = policy,
    draining = draining == '1'}
end)

-- engine returns engine id's table, from its spec s. It is a scratch
-- table (scratch), number slot of ENGINES (1 when not given): a call that
-- holds several engines at once gives each its own slot (acquire: its
-- candidate's place). Every field usage, recovery and grant_reason set is
-- set here too (TestScratchFieldsAllSet), so no value of an earlier call
-- is read and a filled table never grows.
local ENGINES = {}
local function engine(id, s, removed, slot)
  if not s then return nil end
  local c = engine_spec(s)
  if not c.configured and not removed then return nil end
  local e = scratch(ENGINES, slot or 1)
  e.id, e.kv, e.slots, e.stale_ns, e.policy, e.draining = id, c.kv, c.slots, c.stale_ns, c.policy, c.draining
  e.rkv, e.rslots, e.n, e.ckv, e.cslots, e.obs, e.oraw, e.cap = 0, 0, 0, 0, 0, 0, false, 0
  e.recovering, e.braw, e.breaker, e.bt = false, false, false, false
  return e
end

-- Tenants -------------------------------------------------------------------

-- tenant parses a configured tenant's t:<name> and t:<name>:r fields; nil
-- when the tenant is unknown or removed (with removed, a removed tenant's
-- last spec). t.tpm and t.rpm are its rate budgets (0: none).
local tenant_spec = memo(function(s)
  local cfg, kvs, ss, tpm, rpm = match(s, '^(%S+) (%S+) (%S+) ?(%S*) ?(%S*)$')
  return {configured = cfg == '1', kv_share = tonum(kvs), slot_share = tonum(ss), tpm = num(tpm), rpm = num(rpm)}
end)

-- tenant returns tenant name's table, from its spec s and reservations
-- r: a scratch table (scratch) of TENANTS, one per call.
local TENANTS = {}
local function tenant(name, s, r, removed)
  if not s then return nil end
  local c = tenant_spec(s)
  if not c.configured and not removed then return nil end
  local t = scratch(TENANTS, 1)
  t.name, t.kv_share, t.slot_share, t.tpm, t.rpm = name, c.kv_share, c.slot_share, c.tpm, c.rpm
  t.rkv, t.rslots, t.n = triple(r)
  return t
end
