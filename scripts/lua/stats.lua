-- stats.lua: a pool's totals for audit (Ledger.Stats). Read only.
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch (unused: reads never sweep).
-- Returns: {'unknown_pool', ''} | {'ok', epoch, now ms, recovering_until ms,
--   cap_kv, cap_slots, live holders, outstanding leases,
--   {{engine id, {field, value, ...}}...}, {{tenant name, {field, value, ...}}...},
--   priority order, {name, max_fill, ...}, {counter, count, ...},
--   reserve ('' when configured before reservation modes: elastic),
--   growth headroom, the pool's breaker field ('' before breakers),
--   the pool's rate_window ('': a minute)}. A tenant's fields include its
--   budgets (tpm, rpm: '' before rate budgets) and its raw t:<name>:w
--   (rates): Go prunes it at now.
-- Each engine's breaker is its raw e:<id>:b (field breaker, absent when
-- never written): Go reads it at now with the pool's spec.

local v = rcall('HMGET', K_STATE, 'meta', 'order', 'breaker', 'rate_window')
local m = meta(v[1])
if not m then return {'unknown_pool', ''} end
local now = clock()
-- Engines and tenants are listed as (name, value) pairs with the field names
-- of the schema in internal/ledger/redis/doc.go before state was packed.
local engines = {}
for _, id in ipairs(rcall('SMEMBERS', K_ENGINES)) do
  local f = 'e:' .. id
  local x = rcall('HMGET', K_STATE, f, f .. ':url', f .. ':r', f .. ':c', f .. ':obs', f .. ':o', f .. ':b')
  if x[1] then
    local cfg, kv, slots, stale_ns, policy, draining = match(x[1], '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$')
    if policy == '-' then policy = '' end
    local rkv, rslots, leases = triple(x[3])
    local h = {'configured', cfg, 'url', x[2] or '', 'kv', kv, 'slots', slots, 'stale_ns', stale_ns,
      'policy', policy, 'draining', draining, 'rkv', int(rkv), 'rslots', int(rslots), 'nleases', int(leases)}
    if x[4] then
      local ckv, cslots, arrived = triple(x[4])
      for _, p in ipairs({'ckv', int(ckv), 'cslots', int(cslots), 'obs_arrived', int(arrived)}) do h[#h + 1] = p end
    end
    if x[6] then
      local okv, oslots, until_ms = triple(x[6])
      for _, p in ipairs({'okv', int(okv), 'oslots', int(oslots), 'orphan_until', int(until_ms)}) do h[#h + 1] = p end
    end
    if x[7] then
      h[#h + 1] = 'breaker'
      h[#h + 1] = x[7]
    end
    if x[5] then
      local names = {'obs_used', 'obs_total', 'obs_running', 'obs_waiting', 'obs_sec', 'obs_nsec'}
      local j = 0
      for val in gmatch(x[5], '%S+') do
        j = j + 1
        h[#h + 1] = names[j]
        h[#h + 1] = val
      end
    end
    engines[#engines + 1] = {id, h}
  end
end
local tenants = {}
for _, name in ipairs(rcall('SMEMBERS', K_TENANTS)) do
  local f = 't:' .. name
  local x = rcall('HMGET', K_STATE, f, f .. ':r', f .. ':w')
  if x[1] then
    local cfg, kvs, ss, tpm, rpm = match(x[1], '^(%S+) (%S+) (%S+) ?(%S*) ?(%S*)$')
    local rkv, rslots, leases = triple(x[2])
    tenants[#tenants + 1] = {name, {'configured', cfg, 'kv_share', kvs, 'slot_share', ss,
      'rkv', int(rkv), 'rslots', int(rslots), 'nleases', int(leases),
      'tpm', tpm, 'rpm', rpm, 'rates', x[3] or ''}}
  end
end
local prios = {}
for name in gmatch(v[2] or '', '%S+') do
  prios[#prios + 1] = name
  prios[#prios + 1] = rcall('HGET', K_STATE, 'p:' .. name) or ''
end
-- Counters: each c:<name>, plus its place in a group field (GROUPS), the
-- two added where a counter has both (a pool written before groups), and
-- each n:<name> to its own counter and to the pool's (lib.lua). The total
-- rejections is the sum of c:rejections:<reason>: reject (lib_admit.lua)
-- counts only the reason, and a c:rejections written before it (always
-- with its reason's) is that sum already.
local counters, at = {}, {}
local function count(name, val)
  local i = at[name]
  if i then
    counters[i] = int(num(counters[i]) + num(val))
  else
    counters[#counters + 1] = name
    counters[#counters + 1] = val
    at[name] = #counters
  end
end
local all = rcall('HGETALL', K_STATE)
for i = 1, #all, 2 do
  local f = all[i]
  if f == 'c:rejections' then -- the reasons' sum (above)
  elseif sub(f, 1, 2) == 'c:' then
    count(sub(f, 3), all[i + 1])
    if sub(f, 3, 13) == 'rejections:' then count('rejections', all[i + 1]) end
  elseif sub(f, 1, 2) == 'n:' then
    -- A tenant's completion-length counter, which counts for the pool's
    -- too (its name up to the tenant's: lib.lua's n:<name>).
    local name = sub(f, 3)
    count(name, all[i + 1])
    count(match(name, '^([^/]*/[^/]*)/'), all[i + 1])
  elseif GROUPS[f] then
    local names, j = GROUPS[f], 0
    for val in gmatch(all[i + 1], '%S+') do
      j = j + 1
      if names[j] then count(names[j], val) end
    end
  end
end
return {'ok', m.epoch, int(now), int(m.ru), int(m.cap_kv), int(m.cap_slots),
  rcall('ZCOUNT', K_HOLDERS, '(' .. int(now), '+inf'),
  rcall('ZCARD', K_DEADLINES), engines, tenants, v[2] or '', prios, counters,
  m.reserve, format('%.17g', m.headroom), v[3] or '', v[4] or ''}
