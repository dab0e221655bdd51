-- list.lua: outstanding leases of a pool, expired ones not yet swept
-- included (Ledger.List). Read only.
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch (unused), 2 engine, 3 holder, 4 tenant ('' = any).
-- Returns: {'ok', epoch, {lease...}, {lease...}, ...} | {'unknown_pool', ''}.
-- Leases are unordered; the caller sorts by fence.

local m = meta(rcall('HGET', K_STATE, 'meta'))
if not m then return {'unknown_pool', ''} end
local engine_id, holder, tenant_name = ARGV[2], ARGV[3], ARGV[4]
local records
if holder ~= '' then
  records = {}
  for _, id in ipairs(rcall('SMEMBERS', P_HOLDER .. holder)) do
    records[#records + 1] = rcall('HGET', K_LEASES, id)
  end
else
  records = rcall('HVALS', K_LEASES)
end
local out = {'ok', m.epoch}
for _, s in ipairs(records) do
  local l = parse_lease(s)
  if l and (engine_id == '' or l[L_ENGINE] == engine_id) and (tenant_name == '' or l[L_TENANT] == tenant_name)
      and (holder == '' or l[L_HOLDER] == holder) then
    out[#out + 1] = {unpk(l, 1, L_N)}
  end
end
return out
