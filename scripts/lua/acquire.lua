-- acquire.lua: grant capacity on the first fitting candidate (Ledger.Acquire).
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch, 2 tenant, 3 priority, 4 kv_tokens, 5 slots, 6 holder,
--       7 request id, 8 ttl ms, 9 candidate count N, 10..9+N candidate ids.
-- Returns: {'ok' | 'replayed', epoch, lease...}   (lease fields as in lib.lua)
--        | {'rejected', epoch, reason, engine or '', retry-after ms}
--        | {'unknown_pool', ''} | {'no_session' | 'session_expired', epoch}
--        | {'unknown_tenant' | 'unknown_priority' | 'unknown_engine', epoch, name}.
--
-- The admission rule is ledger.Admit (internal/ledger/admit.go), check for
-- check: recovery window, too large for the tenant's quota or for every
-- candidate, tenant KV then slot quota, then each candidate in order
-- (draining, stale telemetry under "block", KV, slots, priority headroom);
-- a rejection names the first candidate's reason.

local m = load_meta()
if not m then return {'unknown_pool', ''} end
local now = clock()
local tenant, prio, holder, req = ARGV[2], ARGV[3], ARGV[6], ARGV[7]
local kv, slots, ttl = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[8])
local state = holder_state(holder, now)
sweep(now, SWEEP_BATCH)
if state == 'dead' then return {'session_expired', m.epoch} end
if state == 'none' then return {'no_session', m.epoch} end

-- Idempotence: the same (holder, request id) returns its outstanding lease.
local prev = redis.call('HGET', K_REQ, req_field(holder, req))
if prev then
  local l = get_lease(prev)
  if l and num(l[L_DEADLINE]) > now then
    count('replays')
    return {'replayed', m.epoch, unpack(l)}
  end
  if l then drop_lease(l, 'expired') else redis.call('HDEL', K_REQ, req_field(holder, req)) end
end

local t = load_tenant(tenant)
if not t then return {'unknown_tenant', m.epoch, tenant} end
local maxfill = load_maxfill(prio)
if not maxfill then return {'unknown_priority', m.epoch, prio} end
local n = tonumber(ARGV[9])
local cands = {}
for j = 1, n do
  local e = load_engine(ARGV[9 + j])
  if not e then return {'unknown_engine', m.epoch, ARGV[9 + j]} end
  cands[j] = e
end

-- ledger.Admit
if now < m.ru then return reject(m, 'recovering', '', m.ru - now) end
local qkv, qslots = quota(t, m)
if kv > qkv or (qslots > 0 and slots > qslots) then return reject(m, 'too_large', '', 0) end
local fits = false
for _, e in ipairs(cands) do
  if kv <= fill(e.kv, maxfill) and slots <= fill(e.slots, maxfill) then
    fits = true
    break
  end
end
if not fits then return reject(m, 'too_large', '', 0) end
if t.rkv + kv > qkv then return reject(m, 'tenant_kv_quota', '', m.retry) end
if qslots > 0 and t.rslots + slots > qslots then return reject(m, 'tenant_slot_quota', '', m.retry) end
local chosen, first
for j, e in ipairs(cands) do
  local r = engine_reason(e, now, maxfill, kv, slots)
  if not r then
    chosen = e
    break
  end
  if j == 1 then first = r end
end
if not chosen then return reject(m, first, cands[1].id, m.retry) end

local seq = redis.call('HINCRBY', K_META, 'seq', 1)
local id = string.format('%x-%x', tonumber(m.epoch), seq)
local l = {id, chosen.id, tenant, prio, ARGV[4], ARGV[5], holder, req,
  int(now), int(now + ttl), m.epoch, int(seq), '0'}
put_lease(l)
count('grants')
return {'ok', m.epoch, unpack(l)}
