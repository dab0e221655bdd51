-- totals.lua: every engine's and tenant's recorded reservations and the
-- lease rows they must sum (ledger.TotalsChecker). Read only.
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch (unused: reads never sweep).
-- Returns: {'unknown_pool', ''} | {'ok', epoch, {engine id, rkv, rslots, nleases, ...},
--   {tenant name, rkv, rslots, nleases, ...}, {engine, tenant, kv, slots, ...}}:
--   the recorded totals (e:<id>:r, t:<name>:r) of every engine and tenant
--   the sets list or a lease names, then each lease row's amounts. The
--   caller compares them (ledger.CompareTotals): one script, one instant.

local m = meta(rcall('HGET', K_STATE, 'meta'))
if not m then return {'unknown_pool', ''} end
local rows, seen = {}, {e = {}, t = {}}
local names = {e = rcall('SMEMBERS', K_ENGINES), t = rcall('SMEMBERS', K_TENANTS)}
for _, kind in ipairs({'e', 't'}) do
  for _, n in ipairs(names[kind]) do seen[kind][n] = true end
end
for _, rec in ipairs(rcall('HVALS', K_LEASES)) do
  local l = parse_lease(rec)
  for kind, n in pairs({e = l[L_ENGINE], t = l[L_TENANT]}) do
    if not seen[kind][n] then
      seen[kind][n] = true
      names[kind][#names[kind] + 1] = n
    end
  end
  rows[#rows + 1] = l[L_ENGINE]
  rows[#rows + 1] = l[L_TENANT]
  rows[#rows + 1] = l[L_KV]
  rows[#rows + 1] = l[L_SLOTS]
end
local out = {'ok', m.epoch}
for _, kind in ipairs({'e', 't'}) do
  local recorded = {}
  for _, n in ipairs(names[kind]) do
    local kv, slots, leases = triple(rcall('HGET', K_STATE, kind .. ':' .. n .. ':r'))
    recorded[#recorded + 1] = n
    recorded[#recorded + 1] = int(kv)
    recorded[#recorded + 1] = int(slots)
    recorded[#recorded + 1] = int(leases)
  end
  out[#out + 1] = recorded
end
out[#out + 1] = rows
return out
