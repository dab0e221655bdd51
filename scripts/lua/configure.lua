-- configure.lua: apply a pool spec idempotently (Ledger.Configure).
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch, 2 recovery window ms (0 = none), 3 retry-after ms,
--       4 priority order (names joined by spaces),
--       5 engine count E, then E x {id, url, kv_tokens, slots, stale_after ns, stale policy},
--       then tenant count T, then T x {name, kv_share, slot_share},
--       then priority count P, then P x {name, max_fill}.
-- Returns: {'ok', epoch, created (1 when this call started a new epoch)}.
--
-- A missing meta hash means the pool's state is lost or was never there: a
-- new epoch (TIME in microseconds) starts with its recovery window. Engines'
-- drain flag and telemetry, tenants' reservations and all leases survive
-- re-application; engines and tenants left out of the spec are marked
-- unconfigured and kept until their last lease ends.

local now, t = clock()
local created = 0
if redis.call('EXISTS', K_META) == 0 then
  local epoch = t[1] .. string.format('%06d', tonumber(t[2]))
  local window = tonumber(ARGV[2])
  local ru = 0
  if window > 0 then ru = now + window end
  redis.call('HSET', K_META, 'epoch', epoch, 'seq', 0, 'recovering_until', int(ru), 'created', int(now))
  created = 1
end
sweep(now, SWEEP_BATCH)

local i = 5
local n = tonumber(ARGV[i]); i = i + 1
local keep, cap_kv, cap_slots = {}, 0, 0
for _ = 1, n do
  local id, url, kv, slots, stale_ns, policy = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  i = i + 6
  keep[id] = true
  cap_kv = cap_kv + tonumber(kv)
  cap_slots = cap_slots + tonumber(slots)
  redis.call('SADD', K_ENGINES, id)
  redis.call('HSET', P_ENGINE .. id, 'configured', 1, 'url', url, 'kv', kv, 'slots', slots,
    'stale_ns', stale_ns, 'policy', policy)
end
for _, id in ipairs(redis.call('SMEMBERS', K_ENGINES)) do
  if not keep[id] then
    redis.call('HSET', P_ENGINE .. id, 'configured', 0)
    forget(P_ENGINE .. id, K_ENGINES, id)
  end
end

n = tonumber(ARGV[i]); i = i + 1
keep = {}
for _ = 1, n do
  local name, kv_share, slot_share = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  i = i + 3
  keep[name] = true
  redis.call('SADD', K_TENANTS, name)
  redis.call('HSET', P_TENANT .. name, 'configured', 1, 'kv_share', kv_share, 'slot_share', slot_share)
end
for _, name in ipairs(redis.call('SMEMBERS', K_TENANTS)) do
  if not keep[name] then
    redis.call('HSET', P_TENANT .. name, 'configured', 0)
    forget(P_TENANT .. name, K_TENANTS, name)
  end
end

n = tonumber(ARGV[i]); i = i + 1
redis.call('DEL', K_PRIOS)
for _ = 1, n do
  redis.call('HSET', K_PRIOS, ARGV[i], ARGV[i + 1])
  i = i + 2
end

redis.call('HSET', K_META, 'cap_kv', int(cap_kv), 'cap_slots', int(cap_slots),
  'retry_after', ARGV[3], 'priority_order', ARGV[4])
return {'ok', redis.call('HGET', K_META, 'epoch'), created}
