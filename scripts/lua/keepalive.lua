-- keepalive.lua: create or extend a holder session (Ledger.KeepAlive).
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch, 2 holder id, 3 ttl ms.
-- Returns: {'ok', epoch, expires ms, live holders, recovering_until ms}
--        | {'unknown_pool', ''} | {'session_expired', epoch}.
--
-- A session that was already dead when the call arrived reports
-- session_expired, even if this call's sweep removed its last lease: the
-- holder learns its leases were revoked. Once a sweep has removed the dead
-- session, the holder id may start afresh. While now < sweep_at no session
-- is dead, so the holder's state is only read when a sweep is due.

failover()
local v = redis.call('HMGET', K_STATE, 'meta', 'sweep_at')
local m = meta(v[1], v[2])
if not m then return {'unknown_pool', ''} end
local now = clock()
local holder = ARGV[2]
if now >= m.sweep_at then
  local state = holder_state(holder, now)
  local _
  _, _, _, m.sweep_at = sweep(now, SWEEP_BATCH)
  if state == 'dead' then return {'session_expired', m.epoch} end
end
local expires = now + tonumber(ARGV[3])
redis.call('ZADD', K_HOLDERS, int(expires), holder)
if expires < m.sweep_at then redis.call('HSET', K_STATE, 'sweep_at', int(expires)) end
local live = redis.call('ZCOUNT', K_HOLDERS, '(' .. int(now), '+inf')
return {'ok', m.epoch, int(expires), live, int(m.ru)}
