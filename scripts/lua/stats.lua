-- stats.lua: a pool's totals for audit (Ledger.Stats). Read only.
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch (unused: reads never sweep).
-- Returns: {'unknown_pool', ''} | {'ok', epoch, now ms, recovering_until ms,
--   cap_kv, cap_slots, live holders, outstanding leases,
--   {{engine id, HGETALL of its hash}...}, {{tenant name, HGETALL}...},
--   priority order, HGETALL priorities, HGETALL counters}.

local m = load_meta()
if not m then return {'unknown_pool', ''} end
local now = clock()
local engines = {}
for _, id in ipairs(redis.call('SMEMBERS', K_ENGINES)) do
  engines[#engines + 1] = {id, redis.call('HGETALL', P_ENGINE .. id)}
end
local tenants = {}
for _, name in ipairs(redis.call('SMEMBERS', K_TENANTS)) do
  tenants[#tenants + 1] = {name, redis.call('HGETALL', P_TENANT .. name)}
end
return {'ok', m.epoch, int(now), int(m.ru), int(m.cap_kv), int(m.cap_slots),
  redis.call('ZCOUNT', K_HOLDERS, '(' .. int(now), '+inf'),
  redis.call('ZCARD', K_DEADLINES), engines, tenants,
  redis.call('HGET', K_META, 'priority_order') or '',
  redis.call('HGETALL', K_PRIOS), redis.call('HGETALL', K_COUNTERS)}
