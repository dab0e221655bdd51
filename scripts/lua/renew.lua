-- renew.lua: extend a lease's deadline to now+ttl (Ledger.Renew).
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch, 2 lease id, 3 holder, 4 ttl ms.
-- Returns: {'ok', epoch, lease...} | {'unknown_pool', ''}
--        | {'lease_not_found' | 'not_holder', epoch}.
--
-- A lease past its deadline, or whose holder's session is no longer live,
-- has ended: lease_not_found, even before a sweep removes it.

local m = load_meta()
if not m then return {'unknown_pool', ''} end
local now = clock()
sweep(now, SWEEP_BATCH)
local id, holder = ARGV[2], ARGV[3]
local l = get_lease(id)
if not l then return {'lease_not_found', m.epoch} end
if l[L_HOLDER] ~= holder then return {'not_holder', m.epoch} end
if num(l[L_DEADLINE]) <= now or holder_state(holder, now) ~= 'live' then
  return {'lease_not_found', m.epoch}
end
local deadline = int(now + tonumber(ARGV[4]))
redis.call('HSET', P_LEASE .. id, 'deadline', deadline)
redis.call('ZADD', K_DEADLINES, deadline, id)
l[L_DEADLINE] = deadline
return {'ok', m.epoch, unpack(l)}
