-- renew.lua: extend a lease's deadline to now+ttl (Ledger.Renew).
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch, 2 lease id, 3 holder, 4 ttl ms.
-- Returns: {'ok', epoch, record} (the lease's record as stored: lib.lua)
--        | {'unknown_pool', ''}
--        | {'lease_not_found' | 'not_holder', epoch}.
--
-- A lease past its deadline, or whose holder's session is no longer live,
-- has ended: lease_not_found, even before a sweep removes it. An
-- unconfirmed lease's deadline is never set past its since + CONFIRM_WITHIN
-- (ledger.CappedDeadline).

local m, now = open_pool()
if not m then return {'unknown_pool', ''} end
local id, holder = ARGV[2], ARGV[3]
local l, status = held_lease(m, now, id, holder)
if not l then return {status, m.epoch} end
local deadline = now + tonum(ARGV[4])
if l[L_SINCE] ~= '0' then deadline = min(deadline, num(l[L_SINCE]) + CONFIRM_WITHIN) end
l[L_DEADLINE] = int(deadline)
local rec = set_lease(l)
rcall('ZADD', K_DEADLINES, l[L_DEADLINE], id)
if deadline < m.sweep_at then rcall('HSET', K_STATE, 'sweep_at', l[L_DEADLINE]) end
return {'ok', m.epoch, rec}
