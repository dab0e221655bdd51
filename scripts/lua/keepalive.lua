-- keepalive.lua: create or extend a holder session (Ledger.KeepAlive).
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch, 2 holder id, 3 ttl ms.
-- Returns: {'ok', epoch, expires ms, live holders, recovering_until ms,
--           recovered engines}
--        | {'unknown_pool', ''} | {'session_expired', epoch}.
--
-- A session that was already dead when the call arrived reports
-- session_expired, even if this call's sweep removed its last lease: the
-- holder learns its leases were revoked. Once a sweep has removed the dead
-- session, the holder id may start afresh. While now < sweep_at no session
-- is dead, so the holder's state is only read when a sweep is due.

failover()
local v = rcall('HMGET', K_STATE, 'meta', 'sweep_at')
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
local expires = now + tonum(ARGV[3])
rcall('ZADD', K_HOLDERS, int(expires), holder)
if expires < m.sweep_at then rcall('HSET', K_STATE, 'sweep_at', int(expires)) end
local live = rcall('ZCOUNT', K_HOLDERS, '(' .. int(now), '+inf')
-- While the recovery window is open, how many configured engines have
-- recovered (lib_admit.lua's recovered; ledger.Session.Recovered).
local n_recovered = 0
if now < m.ru then
  local since = num(rcall('HGET', K_STATE, 'created')) + CONFIRM_GRACE
  for _, id in ipairs(rcall('SMEMBERS', K_ENGINES)) do
    local ef = 'e:' .. id
    local x = rcall('HMGET', K_STATE, ef, ef .. ':c', ef .. ':obs')
    local e = engine(id, x[1])
    if e then
      local _, _, arrived = triple(x[2])
      e.obs, e.oraw = arrived, x[3]
      if recovered(e, now, since, m.elastic) then n_recovered = n_recovered + 1 end
    end
  end
end
return {'ok', m.epoch, int(expires), live, int(m.ru), n_recovered}
