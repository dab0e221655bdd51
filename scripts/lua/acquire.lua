-- acquire.lua: grant capacity on the first fitting candidate (Ledger.Acquire).
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch, 2 tenant, 3 priority, 4 kv_tokens, 5 slots, 6 holder,
--       7 request id, 8 ttl ms, 9 candidate count N, 10..9+N candidate ids,
--       10+N the tokens a grant charges to a rated tenant's rate window
--       (ledger.AcquireRequest.ChargedTokens).
-- Returns: {'ok' | 'replayed', epoch, lease...}   (lease fields as in lib.lua)
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
-- One HMGET reads the pool: meta, the tenant, the priority, every
-- candidate's spec and last observation (unknown engines and "too large"
-- need them all), the pool's breaker spec, its created ms and the first
-- candidate's usage and breaker; later candidates are parsed, and their usage and breaker
-- read, only when the ones before refuse. One HSET writes the grant back.

failover()
local tenant_name, prio, holder, req = ARGV[2], ARGV[3], ARGV[6], ARGV[7]
local kv, slots, ttl, n = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[8]), tonumber(ARGV[9])
local tf, ef1 = 't:' .. tenant_name, 'e:' .. ARGV[10]
local fields = {'meta', 'sweep_at', 'seq', 'c:grants', tf, tf .. ':r', 'p:' .. prio, ef1 .. ':r', ef1 .. ':c', ef1 .. ':o',
  'breaker', ef1 .. ':b', 'created'}
local F_SPECS = #fields
for j = 1, n do fields[F_SPECS + j] = 'e:' .. ARGV[9 + j] end
local F_OBS = #fields
for j = 1, n do fields[F_OBS + j] = 'e:' .. ARGV[9 + j] .. ':obs' end
local v = redis.call('HMGET', K_STATE, unpack(fields))
local m = meta(v[1], v[2])
if not m then return {'unknown_pool', ''} end
local now = clock()
local state = holder_state(holder, now)
if now >= m.sweep_at then
  sweep(now, SWEEP_BATCH)
  v = redis.call('HMGET', K_STATE, unpack(fields))
  m = meta(v[1], v[2])
end
if state == 'dead' then return {'session_expired', m.epoch} end
if state == 'none' then return {'no_session', m.epoch} end

-- Idempotence: the same (holder, request id) returns its outstanding lease.
local prev = redis.call('HGET', K_REQ, holder .. ' ' .. req)
if prev then
  local l = get_lease(prev)
  if l and num(l[L_DEADLINE]) > now then
    redis.call('HINCRBY', K_STATE, 'c:replays', 1)
    return {'replayed', m.epoch, unpack(l, 1, L_N)}
  end
  if l then
    drop_lease(l, {'expired', 1}, now)
    v = redis.call('HMGET', K_STATE, unpack(fields))
  else
    redis.call('HDEL', K_REQ, holder .. ' ' .. req)
  end
end

local t = tenant(tenant_name, v[5], v[6])
if not t then return {'unknown_tenant', m.epoch, tenant_name} end
local maxfill = tonumber(v[7])
if not maxfill then return {'unknown_priority', m.epoch, prio} end
-- Candidates are parsed only as the rule reaches them; all must exist.
for j = 1, n do
  local s = v[F_SPECS + j]
  if not s or string.byte(s) ~= 49 then return {'unknown_engine', m.epoch, ARGV[9 + j]} end -- 49: '1', configured
end
local cands = {engine(ARGV[10], v[F_SPECS + 1])}
usage(cands[1], v[8], v[9], v[10], v[F_OBS + 1])
recovery(cands[1], m, now, v[13])
cands[1].braw = v[12]
local bspec = breaker_spec(v[11])
local function cand(j)
  local e = cands[j]
  if not e then
    e = engine(ARGV[9 + j], v[F_SPECS + j])
    local ef = 'e:' .. e.id
    local u = redis.call('HMGET', K_STATE, ef .. ':r', ef .. ':c', ef .. ':o', ef .. ':b')
    usage(e, u[1], u[2], u[3], v[F_OBS + j])
    recovery(e, m, now, v[13])
    e.braw = u[4]
    cands[j] = e
  end
  return e
end

-- ledger.Admit
local qkv, qslots = quota(t, m)
if kv > qkv or (qslots > 0 and slots > qslots) then return reject(m, 'too_large', '', 0) end
local tokens = tonumber(ARGV[10 + n])
if t.tpm > 0 and tokens > t.tpm then return reject(m, 'too_large', '', 0) end
local fits = false
for j = 1, n do
  local s = cands[j]
  if not s then
    s = engine(ARGV[9 + j], v[F_SPECS + j])
    capacity(s, v[F_OBS + j])
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
local chosen, first
for j = 1, n do
  local e = cand(j)
  local r = grant_reason(e, now, bspec, maxfill, m.headroom, kv, slots)
  if not r then
    chosen = e
    break
  end
  if j == 1 then first = r end
end
if not chosen then return reject(m, first, cands[1].id, hint(m, first, now)) end

-- ledger.NextSeq: never past MAX_SEQ, and never an id a lease holds.
local seq = num(v[3])
if seq >= MAX_SEQ then
  return {'fence_exhausted', m.epoch, 'the pool\'s fencing sequence ' .. int(seq) .. ' reached its maximum ' .. int(MAX_SEQ)}
end
seq = seq + 1
local id = string.format('%x-%x', tonumber(m.epoch), seq)
local taken = redis.call('HGET', K_LEASES, id)
if taken then
  return {'fence_exhausted', m.epoch, 'lease id ' .. id .. ' of the next sequence is held by ' .. parse_lease(taken)[L_HOLDER]}
end
local deadline = now + ttl
-- ledger.Breaker.Grant: a grant on a half-open engine is a probe.
local probe = chosen.breaker.state == 'half_open'
if probe then chosen.breaker.probes = chosen.breaker.probes + 1 end
local l = {id, chosen.id, tenant_name, prio, ARGV[4], ARGV[5], holder, req,
  int(now), int(deadline), m.epoch, int(seq), '0', '0', '0', probe and '1' or '0'}
l[L_SINCE], l[L_TOKENS] = '0', '0'
if rates then
  rate_charge(rates, now, tokens)
  l[L_TOKENS] = int(tokens)
end
put_lease(l)
local w = {'seq', int(seq), 'c:grants', int(num(v[4]) + 1),
  'e:' .. chosen.id .. ':r', fmt3(chosen.rkv + kv, chosen.rslots + slots, chosen.n + 1),
  tf .. ':r', fmt3(t.rkv + kv, t.rslots + slots, t.n + 1)}
if rates then
  w[#w + 1] = tf .. ':w'
  w[#w + 1] = rate_fmt(rates)
end
breaker_write(w, chosen.id, chosen.breaker, chosen.braw)
if chosen.bt then redis.call('HINCRBY', K_STATE, 'c:breaker:' .. chosen.bt, 1) end
if deadline < m.sweep_at then
  w[#w + 1] = 'sweep_at'
  w[#w + 1] = int(deadline)
end
redis.call('HSET', K_STATE, unpack(w))
return {'ok', m.epoch, unpack(l, 1, L_N)}
