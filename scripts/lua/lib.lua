-- lib.lua: helpers shared by every ledger script. lua.go prepends this file
-- to each operation's script, so a script is one self-contained EVAL body.
--
-- KEYS (identical for every pool script, built by keys.go in Go):
--   1 meta        HASH  epoch, seq, recovering_until, created, cap_kv,
--                       cap_slots, retry_after, priority_order
--   2 engines     SET   engine ids that have a hash (configured or removed
--                       but still holding leases)
--   3 tenants     SET   tenant names that have a hash
--   4 priorities  HASH  priority name -> max_fill
--   5 deadlines   ZSET  lease id scored by deadline (ms)
--   6 holders     ZSET  holder id scored by session expiry (ms)
--   7 req         HASH  "<holder> <request id>" -> lease id
--   8 counters    HASH  counter name -> count
--   9 engine key prefix  (.. engine id -> HASH)
--  10 tenant key prefix  (.. tenant name -> HASH)
--  11 lease key prefix   (.. lease id -> HASH)
--  12 holder key prefix  (.. holder id -> SET of lease ids)
-- ARGV[1] is always the sweep batch.
--
-- Numbers: ledger time is milliseconds from redis TIME. Every integer written
-- to Redis or returned goes through int() so large values never reach
-- Redis's own number formatting; replies are strings or small integers.

local K_META, K_ENGINES, K_TENANTS, K_PRIOS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_DEADLINES, K_HOLDERS, K_REQ, K_COUNTERS = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local P_ENGINE, P_TENANT, P_LEASE, P_HOLDER = KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local SWEEP_BATCH = tonumber(ARGV[1])

local function int(x) return string.format('%.0f', x) end
local function num(s) return tonumber(s) or 0 end
local function fill(cap, f) return math.floor(cap * f) end

-- clock returns the ledger time in ms and the raw TIME reply.
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t
end

local function count(name, by)
  redis.call('HINCRBY', K_COUNTERS, name, by or 1)
end

-- load_meta returns the pool's meta or nil when the pool is unknown.
local function load_meta()
  local m = redis.call('HMGET', K_META, 'epoch', 'recovering_until', 'cap_kv', 'cap_slots', 'retry_after')
  if not m[1] then return nil end
  return {epoch = m[1], ru = num(m[2]), cap_kv = num(m[3]), cap_slots = num(m[4]), retry = num(m[5])}
end

-- Lease hash fields, in the order every reply lists them (lease.go decodes
-- this order).
local LEASE_FIELDS = {'id', 'engine', 'tenant', 'priority', 'kv', 'slots', 'holder', 'req',
  'created', 'deadline', 'fence_epoch', 'fence_seq', 'reasserted'}
local L_ID, L_ENGINE, L_TENANT, L_PRIO, L_KV, L_SLOTS, L_HOLDER, L_REQ = 1, 2, 3, 4, 5, 6, 7, 8
local L_CREATED, L_DEADLINE, L_FEPOCH, L_FSEQ, L_REASSERTED = 9, 10, 11, 12, 13

local function get_lease(id)
  local v = redis.call('HMGET', P_LEASE .. id, unpack(LEASE_FIELDS))
  if not v[1] then return nil end
  return v
end

local function req_field(holder, req) return holder .. ' ' .. req end

-- forget removes an engine's or tenant's hash once it is no longer configured
-- and its last lease is gone.
local function forget(key, set, id)
  local v = redis.call('HMGET', key, 'configured', 'nleases')
  if v[1] ~= '1' and num(v[2]) <= 0 then
    redis.call('DEL', key)
    redis.call('SREM', set, id)
  end
end

-- charge adds (kv, slots, n) to an engine's and a tenant's reservations.
local function charge(engine, tenant, kv, slots, n)
  local ek, tk = P_ENGINE .. engine, P_TENANT .. tenant
  redis.call('HINCRBY', ek, 'rkv', int(kv))
  redis.call('HINCRBY', ek, 'rslots', int(slots))
  redis.call('HINCRBY', ek, 'nleases', n)
  redis.call('HINCRBY', tk, 'rkv', int(kv))
  redis.call('HINCRBY', tk, 'rslots', int(slots))
  redis.call('HINCRBY', tk, 'nleases', n)
  if n < 0 then
    forget(ek, K_ENGINES, engine)
    forget(tk, K_TENANTS, tenant)
  end
end

-- put_lease stores a new lease (array in LEASE_FIELDS order) and charges it.
local function put_lease(l)
  local id = l[L_ID]
  local args = {}
  for i, f in ipairs(LEASE_FIELDS) do
    args[#args + 1] = f
    args[#args + 1] = l[i]
  end
  redis.call('HSET', P_LEASE .. id, unpack(args))
  redis.call('ZADD', K_DEADLINES, l[L_DEADLINE], id)
  redis.call('SADD', P_HOLDER .. l[L_HOLDER], id)
  redis.call('HSETNX', K_REQ, req_field(l[L_HOLDER], l[L_REQ]), id)
  redis.call('SADD', K_ENGINES, l[L_ENGINE])
  redis.call('SADD', K_TENANTS, l[L_TENANT])
  charge(l[L_ENGINE], l[L_TENANT], num(l[L_KV]), num(l[L_SLOTS]), 1)
end

-- drop_lease removes a lease, returns its capacity and bumps counter.
local function drop_lease(l, counter)
  local id = l[L_ID]
  redis.call('SREM', P_HOLDER .. l[L_HOLDER], id)
  local rf = req_field(l[L_HOLDER], l[L_REQ])
  if redis.call('HGET', K_REQ, rf) == id then redis.call('HDEL', K_REQ, rf) end
  redis.call('ZREM', K_DEADLINES, id)
  redis.call('DEL', P_LEASE .. id)
  charge(l[L_ENGINE], l[L_TENANT], -num(l[L_KV]), -num(l[L_SLOTS]), -1)
  if counter then count(counter) end
end

-- holder_state returns 'live' (and the expiry), 'dead' (expired session not
-- yet fully swept) or 'none'. A session is live while now < expiry.
local function holder_state(holder, now)
  local s = redis.call('ZSCORE', K_HOLDERS, holder)
  if not s then return 'none' end
  s = tonumber(s)
  if s <= now then return 'dead', s end
  return 'live', s
end

-- sweep removes up to batch expired leases, then leases of dead sessions,
-- then dead sessions left with no lease. Returns expired, revoked, holders.
local function sweep(now, batch)
  local expired, revoked, holders = 0, 0, 0
  local budget = batch
  local ids = redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', now, 'LIMIT', 0, budget)
  for _, id in ipairs(ids) do
    local l = get_lease(id)
    if l then
      drop_lease(l, 'expired')
      expired = expired + 1
    else
      redis.call('ZREM', K_DEADLINES, id)
    end
    budget = budget - 1
  end
  if budget <= 0 then return expired, revoked, holders end
  local dead = redis.call('ZRANGEBYSCORE', K_HOLDERS, '-inf', now, 'LIMIT', 0, budget)
  for _, h in ipairs(dead) do
    if budget <= 0 then break end
    local hk = P_HOLDER .. h
    local lids = redis.call('SRANDMEMBER', hk, budget)
    for _, id in ipairs(lids) do
      local l = get_lease(id)
      if l then
        drop_lease(l, 'revoked')
        revoked = revoked + 1
      else
        redis.call('SREM', hk, id)
      end
      budget = budget - 1
    end
    if #lids == 0 then budget = budget - 1 end
    if redis.call('SCARD', hk) == 0 then
      redis.call('ZREM', K_HOLDERS, h)
      holders = holders + 1
    end
  end
  return expired, revoked, holders
end

-- Engines -------------------------------------------------------------------

local function load_engine(id)
  local v = redis.call('HMGET', P_ENGINE .. id, 'configured', 'kv', 'slots', 'draining',
    'rkv', 'rslots', 'ckv', 'cslots', 'stale_ns', 'policy', 'obs_arrived')
  if v[1] ~= '1' then return nil end
  return {id = id, kv = num(v[2]), slots = num(v[3]), draining = v[4] == '1',
    rkv = num(v[5]), rslots = num(v[6]), ckv = num(v[7]), cslots = num(v[8]),
    stale_ns = num(v[9]), policy = v[10] or '', obs = num(v[11])}
end

-- ledger.EngineState.Stale
local function stale(e, now)
  if e.stale_ns <= 0 then return false end
  return e.obs == 0 or (now - e.obs) * 1e6 > e.stale_ns
end

-- ledger.EngineState.Used
local function used(e, now)
  if e.policy == 'ignore' and stale(e, now) then return e.rkv, e.rslots end
  return e.rkv + e.ckv, e.rslots + e.cslots
end

-- ledger.engineReason: nil when e can take kv tokens and slots.
local function engine_reason(e, now, maxfill, kv, slots)
  if e.draining then return 'draining' end
  if e.policy == 'block' and stale(e, now) then return 'telemetry_stale' end
  local ukv, us = used(e, now)
  if ukv + kv > fill(e.kv, maxfill) then
    if maxfill < 1 and ukv + kv <= e.kv then return 'priority_headroom' end
    return 'engine_kv'
  end
  if us + slots > fill(e.slots, maxfill) then
    if maxfill < 1 and us + slots <= e.slots then return 'priority_headroom' end
    return 'engine_slots'
  end
  return nil
end

-- Tenants and priorities ------------------------------------------------------

local function load_tenant(name)
  local v = redis.call('HMGET', P_TENANT .. name, 'configured', 'kv_share', 'slot_share', 'rkv', 'rslots')
  if v[1] ~= '1' then return nil end
  return {name = name, kv_share = num(v[2]), slot_share = num(v[3]), rkv = num(v[4]), rslots = num(v[5])}
end

-- ledger.TenantQuota
local function quota(t, m)
  local qs = 0
  if t.slot_share > 0 then qs = fill(m.cap_slots, t.slot_share) end
  return fill(m.cap_kv, t.kv_share), qs
end

local function load_maxfill(name)
  local f = redis.call('HGET', K_PRIOS, name)
  if not f then return nil end
  return tonumber(f)
end

-- reject counts a rejection and builds the reply.
local function reject(m, reason, engine, retry)
  count('rejections')
  count('rejections:' .. reason)
  return {'rejected', m.epoch, reason, engine or '', int(retry)}
end
