-- list.lua: outstanding leases of a pool, expired ones not yet swept
-- included (Ledger.List). Read only.
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch (unused), 2 engine, 3 holder, 4 tenant ('' = any).
-- Returns: {'ok', epoch, {lease...}, {lease...}, ...} | {'unknown_pool', ''}.
-- Leases are unordered; the caller sorts by fence.

local m = load_meta()
if not m then return {'unknown_pool', ''} end
local engine, holder, tenant = ARGV[2], ARGV[3], ARGV[4]
local ids
if holder ~= '' then
  ids = redis.call('SMEMBERS', P_HOLDER .. holder)
else
  ids = redis.call('ZRANGE', K_DEADLINES, 0, -1)
end
local out = {'ok', m.epoch}
for _, id in ipairs(ids) do
  local l = get_lease(id)
  if l and (engine == '' or l[L_ENGINE] == engine) and (tenant == '' or l[L_TENANT] == tenant)
      and (holder == '' or l[L_HOLDER] == holder) then
    out[#out + 1] = l
  end
end
return out
