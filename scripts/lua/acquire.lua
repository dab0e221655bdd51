-- acquire.lua: grant capacity on the first fitting candidate (Ledger.Acquire).
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch, 2 tenant, 3 priority, 4 kv_tokens, 5 slots, 6 holder,
--       7 request id, 8 ttl ms, 9 candidate count N, 10..9+N candidate ids,
--       10+N the tokens a grant charges to a rated tenant's rate window
--       (ledger.AcquireRequest.ChargedTokens).
-- Returns: {'ok', epoch, record}: a new grant, its lease record as stored
--          (lib.lua), one string where the lease's fields would be
--          seventeen: decodeGrant (ledger.go) reads the fields the request does not
--          give (id, engine, created, deadline, fence seq, probe, tokens)
--        | {'replayed', epoch, lease...}   (lease fields as in lib.lua)
--        | {'rejected', epoch, reason, engine or '', retry-after ms}
--        | {'unknown_pool', ''} | {'no_session' | 'session_expired', epoch}
--        | {'unknown_tenant' | 'unknown_priority' | 'unknown_engine', epoch, name}
--        | {'fence_exhausted', epoch, why}.
--
-- The admission rule is ledger.Admit (internal/ledger/admit.go), check for
-- check: too large for the tenant's quota, its token budget or every
-- candidate, tenant KV then slot quota, its token then request rate
-- (lib_rate.lua), then each candidate in order (draining, circuit
-- breaker, recovery while the window is open (recovered since the pool's
-- created ms plus CONFIRM_GRACE), stale telemetry under "block", KV,
-- slots, priority headroom); a grant on a half-open engine is a probe
-- lease; a rejection names the first candidate's reason. KV fits within
-- floor(cap*max_fill) - floor(cap*growth_headroom), cap the smaller of the
-- configured and the last reported capacity.
--
-- One HMGET reads the pool: meta, sweep_at, seq, repl (failover_seen),
-- the tenant's reservations, the first candidate's usage, breaker and last
-- observation. The specs (the tenant's, the priority's and every
-- candidate's: unknown engines need them all) are kept by meta (spec in
-- lib_admit.lua), read only by the first call of a configuration. What
-- only some grants need is read when the rule reaches it: the
-- pool's breaker spec when a candidate has a breaker stored, created
-- while the recovery window is open, a later candidate's usage when the
-- ones before refuse, its observation when the first cannot hold the
-- request at all. One HSET writes the grant back and HINCRBY counts it
-- (cheaper than reading, formatting and writing the counter: a number
-- argument to redis.call is formatted too, so the 1 is a string).

local tenant_name, prio, holder, req = ARGV[2], ARGV[3], ARGV[6], ARGV[7]
local kv, slots, ttl, n = ARGV[4] + 0, ARGV[5] + 0, ARGV[8] + 0, ARGV[9] + 0 -- numbers from the client (num)
local tf, ef1 = tfield(tenant_name), efield(ARGV[10])
local v = acquire_read(tf, ef1)
if failover_seen(v[1], v[4]) then v = acquire_read(tf, ef1) end
local m = meta(v[1], v[2])
if not m then return {'unknown_pool', ''} end
local now = clock()
local state = holder_state(holder, now, m.sweep_at)
if now >= m.sweep_at then
  sweep(now, SWEEP_BATCH)
  v = acquire_read(tf, ef1)
  m = meta(v[1], v[2])
end
if state == 'dead' then return {'session_expired', m.epoch} end
if state == 'none' then return {'no_session', m.epoch} end

-- Idempotence: the same (holder, request id) returns its outstanding lease.
local rkey = holder .. ' ' .. req
local prev = rcall('HGET', K_REQ, rkey)
if prev then
  local l = get_lease(prev)
  if l and num(l[L_DEADLINE]) > now then
    rcall('HINCRBY', K_STATE, 'c:replays', '1')
    return {'replayed', m.epoch, unpk(l, 1, L_N)}
  end
  if l then
    drop_lease(l, {'expired', 1}, now)
    v = acquire_read(tf, ef1)
  else
    rcall('HDEL', K_REQ, rkey)
  end
end

local es = m.especs -- every candidate's spec, once the loop below has read them (spec)
local t = tenant(tenant_name, spec(m, m.tspecs, 't:', tenant_name), v[5])
if not t then return {'unknown_tenant', m.epoch, tenant_name} end
local maxfill = spec(m, m.pspecs, 'p:', prio)
if not maxfill then return {'unknown_priority', m.epoch, prio} end
maxfill = maxfill + 0
-- Candidates are parsed only as the rule reaches them; all must exist
-- (m.known: the ids a call of this meta found configured, their specs in es).
local known = m.known
for j = 1, n do
  local id = ARGV[9 + j]
  if not known[id] then
    local s = spec(m, es, 'e:', id)
    if not s or byte(s) ~= 49 then return {'unknown_engine', m.epoch, id} end -- 49: '1', configured
    known[id] = true
  end
end
local created -- the pool's created field, read once the recovery window needs it
local e1 = engine(ARGV[10], es[ARGV[10]])
usage(e1, v[6], v[7], v[8], v[10])
if now < m.ru then
  created = rcall('HGET', K_STATE, 'created')
  recovery(e1, m, now, created)
end
e1.braw = v[9]

-- ledger.Admit
local qkv, qslots = quota(t, m)
if kv > qkv or (qslots > 0 and slots > qslots) then return reject(m, 'too_large', '', 0) end
local tokens = ARGV[10 + n] + 0
if t.tpm > 0 and tokens > t.tpm then return reject(m, 'too_large', '', 0) end
local fits = false
for j = 1, n do
  local s = e1
  if j > 1 then
    s = engine(ARGV[9 + j], es[ARGV[9 + j]], false, j)
    capacity(s, rcall('HGET', K_STATE, efield(s.id).obs) or nil)
  end
  if kv <= admissible(s, maxfill, m.headroom) and slots <= fill(s.slots, maxfill) then
    fits = true
    break
  end
end
if not fits then return reject(m, 'too_large', '', 0) end
if t.rkv + kv > qkv then return reject(m, 'tenant_kv_quota', '', m.retry) end
if qslots > 0 and t.rslots + slots > qslots then return reject(m, 'tenant_slot_quota', '', m.retry) end
local rates -- a rated tenant's window, charged by the grant
if t.tpm > 0 or t.rpm > 0 then
  rates = rate_open(tf, now)
  local r, after = rate_reason(rates, now, t, tokens)
  if r then return reject(m, r, '', after) end
end
local bspec -- the pool's breaker spec, read once a candidate has a breaker stored
local chosen, first
for j = 1, n do
  local e = e1
  if j > 1 then
    e = engine(ARGV[9 + j], es[ARGV[9 + j]], false, j)
    local ef = efield(e.id)
    local u = rcall('HMGET', K_STATE, ef.r, ef.c, ef.o, ef.b, ef.obs)
    usage(e, u[1], u[2], u[3], u[5])
    if now < m.ru then
      created = created or rcall('HGET', K_STATE, 'created')
      recovery(e, m, now, created)
    end
    e.braw = u[4]
  end
  local r
  if e.draining then
    r = 'draining'
  elseif e.braw then
    bspec = bspec or breaker_spec(spec(m, m.fields, '', 'breaker'))
    r = grant_reason(e, now, bspec, maxfill, m.headroom, kv, slots)
  else
    -- No breaker stored: it reads closed under any spec (breaker_at), and
    -- stays so (e.breaker nil).
    r = engine_reason(e, now, maxfill, m.headroom, kv, slots)
  end
  if not r then
    chosen = e
    break
  end
  if j == 1 then first = r end
end
if not chosen then return reject(m, first, e1.id, hint(m, first, now)) end

-- ledger.NextSeq: never past MAX_SEQ, and never an id a lease holds.
local seq = num(v[3])
if seq >= MAX_SEQ then
  return {'fence_exhausted', m.epoch, 'the pool\'s fencing sequence ' .. int(seq) .. ' reached its maximum ' .. int(MAX_SEQ)}
end
seq = seq + 1
-- now, deadline and seq are whole and below 2^53 (ms from TIME, a
-- time.Duration's ms, seq checked above), so '%d' writes them as int does.
local id, sseq = m.xepoch .. format('-%x', seq), format('%d', seq)
local deadline = now + ttl
-- ledger.Breaker.Grant: a grant on a half-open engine is a probe.
local probe = chosen.braw and chosen.breaker.state == 'half_open'
if probe then chosen.breaker.probes = chosen.breaker.probes + 1 end
local screated, sdeadline = format('%d', now), format('%d', deadline)
local sprobe, stokens = probe and '1' or '0', rates and int(tokens) or '0'
-- put_lease, with the check that no lease holds id in the same HSETNX.
local owns = rcall('HSETNX', K_REQ, rkey, id) == 1 and '1' or '0'
-- The record lease_record writes for this lease (not reasserted, not
-- overgrown, confirmed), in one concatenation instead of a lease table.
local rec = id .. ' ' .. chosen.id .. ' ' .. tenant_name .. ' ' .. prio .. ' ' .. ARGV[4] .. ' ' .. ARGV[5] .. ' '
  .. holder .. ' ' .. req .. ' ' .. screated .. ' ' .. sdeadline .. ' ' .. m.epoch .. ' ' .. sseq .. ' 0 ' .. owns
  .. ' 0 0 ' .. sprobe .. (stokens ~= '0' and ' ' .. stokens or '')
if rcall('HSETNX', K_LEASES, id, rec) == 0 then
  if owns == '1' then rcall('HDEL', K_REQ, rkey) end
  return {'fence_exhausted', m.epoch, 'lease id ' .. id .. ' of the next sequence is held by ' .. get_lease(id)[L_HOLDER]}
end
rcall('ZADD', K_DEADLINES, sdeadline, id)
rcall('SADD', P_HOLDER .. holder, id)
local er, r1, r2 = efield(chosen.id).r, fmt3(chosen.rkv + kv, chosen.rslots + slots, chosen.n + 1),
  fmt3(t.rkv + kv, t.rslots + slots, t.n + 1)
if rates or chosen.braw or deadline < m.sweep_at then
  local w = {'seq', sseq, er, r1, tf.r, r2}
  if rates then
    rate_charge(rates, now, tokens)
    w[#w + 1] = tf.w
    w[#w + 1] = rate_fmt(rates)
  end
  if chosen.braw then breaker_write(w, chosen.id, chosen.breaker, chosen.braw) end
  if deadline < m.sweep_at then
    w[#w + 1] = 'sweep_at'
    w[#w + 1] = sdeadline
  end
  rcall('HSET', K_STATE, unpk(w))
else
  rcall('HSET', K_STATE, 'seq', sseq, er, r1, tf.r, r2)
end
if chosen.bt then rcall('HINCRBY', K_STATE, 'c:breaker:' .. chosen.bt, '1') end
rcall('HINCRBY', K_STATE, 'c:grants', '1')
return {'ok', m.epoch, rec}
