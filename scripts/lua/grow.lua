-- grow.lua: raise an elastic lease's KV tokens to what its engine already
-- holds for it (Ledger.Grow).
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch, 2 lease id, 3 holder, 4 new kv_tokens, 5 pool name
--       (for error messages).
-- Returns: {'ok', epoch, lease...} | {'ok', epoch, record} (a grown lease's
--          record as stored: lib.lua) | {'unknown_pool', ''}
--        | {'lease_not_found' | 'not_holder', epoch}
--        | {'invalid_argument', epoch, why}
--        | {'unknown_engine' | 'unknown_tenant', epoch, name}.
--
-- The lease checks are resize.lua's (held); then ledger.GrowthOf: a worst_case
-- pool, kv below the lease's or above the engine's capacity (the smaller
-- of its last spec and its last reported total; a removed engine or tenant
-- still grows) are invalid; kv equal to the lease's changes nothing. Else
-- the difference is charged to the lease, its engine and its tenant with
-- no capacity, quota, draining, staleness or recovery check: the engine
-- already holds it. The lease is flagged overgrown (sticky) when the
-- engine's used KV plus the difference passes its capacity or the
-- tenant's reservations plus the difference pass its KV quota. Counters:
-- growths, grown_kv_tokens and, when this growth itself passed capacity or
-- quota (not merely grew a lease flagged before), overgrowths. The
-- deadline does not change.

local id, holder, newkv = ARGV[2], ARGV[3], tonum(ARGV[4])
-- One HMGET reads the pool with what the checks and the charge need
-- (open_lease), the specs kept by meta aside (spec in lib_admit.lua); one
-- HSET writes the charge (charge's, without its reads).
local m, now, l, v = open_lease(id, function(x)
  local ef, tf = efield(x[L_ENGINE]), tfield(x[L_TENANT])
  return {ef.r, ef.c, ef.o, ef.obs, tf.r}
end, false)
if not m then return {'unknown_pool', ''} end
local status
l, status = held(m, now, l, holder)
if not l then return {status, m.epoch} end
if not m.elastic then
  return {'invalid_argument', m.epoch, 'pool ' .. ARGV[5] ..
    ' reserves worst_case: its leases hold every output token already; Grow is for elastic pools'}
end
local have = num(l[L_KV])
if newkv < have then
  return {'invalid_argument', m.epoch, 'grow lease ' .. id .. ' to ' .. ARGV[4] ..
    ' kv_tokens, below the ' .. l[L_KV] .. ' it holds (Resize shrinks)'}
end
local ef, tf = efield(l[L_ENGINE]), tfield(l[L_TENANT])
local e = engine(l[L_ENGINE], spec(m, m.especs, 'e:', l[L_ENGINE]), true)
if not e then return {'unknown_engine', m.epoch, l[L_ENGINE]} end
usage(e, v[3], v[4], v[5], v[6])
if newkv > e.cap then
  return {'invalid_argument', m.epoch, 'grow lease ' .. id .. ' to ' .. ARGV[4] ..
    ' kv_tokens, more than engine ' .. e.id .. ' holds in all (' .. int(e.cap) .. ')'}
end
local delta = newkv - have
if delta == 0 then return {'ok', m.epoch, unpk(l, 1, L_N)} end
local t = tenant(l[L_TENANT], spec(m, m.tspecs, 't:', l[L_TENANT]), v[7], true)
if not t then return {'unknown_tenant', m.epoch, l[L_TENANT]} end
local ukv = used(e, now)
if ukv + delta > e.cap or t.rkv + delta > quota(t, m) then
  l[L_OVERGROWN] = '1'
  rcall('HINCRBY', K_STATE, 'c:overgrowths', '1')
end
l[L_KV] = ARGV[4]
local rec = set_lease(l)
rcall('HSET', K_STATE, ef.r, fmt3(e.rkv + delta, e.rslots, e.n), tf.r, fmt3(t.rkv + delta, t.rslots, t.n))
-- HINCRBY adds to a counter for less than reading, formatting and writing
-- it ('1' a string: redis.call formats a number argument).
rcall('HINCRBY', K_STATE, 'c:growths', '1')
rcall('HINCRBY', K_STATE, 'c:grown_kv_tokens', int(delta))
return {'ok', m.epoch, rec}
