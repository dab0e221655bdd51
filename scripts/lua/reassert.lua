-- reassert.lua: re-insert a lease its live holder still uses after the
-- ledger lost it (Ledger.Reassert).
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch, 2 lease id, 3 holder, 4 engine, 5 tenant, 6 priority,
--       7 kv_tokens, 8 slots, 9 request id, 10 created ms (0 = now),
--       11 fence epoch, 12 fence seq, 13 ttl ms.
-- Returns: {'ok' | 'replayed', epoch, lease...} | {'unknown_pool', ''}
--        | {'no_session' | 'session_expired' | 'not_holder', epoch}
--        | {'invalid_argument', epoch, why}
--        | {'unknown_engine' | 'unknown_tenant' | 'unknown_priority', epoch, name}.
--
-- No capacity check: the load is real, so it counts even above capacity and
-- the overload blocks new grants until it drains. When the fence is of the
-- current epoch the pool's sequence is raised to at least its sequence.

local v = redis.call('HMGET', K_STATE, 'meta', 'sweep_at', 'seq')
local m = meta(v[1], v[2])
if not m then return {'unknown_pool', ''} end
local now = clock()
local id, holder = ARGV[2], ARGV[3]
local state = holder_state(holder, now)
if now >= m.sweep_at then
  local _
  _, _, _, m.sweep_at = sweep(now, SWEEP_BATCH)
end
if state == 'dead' then return {'session_expired', m.epoch} end
if state == 'none' then return {'no_session', m.epoch} end

local prev = get_lease(id)
if prev then
  if prev[L_HOLDER] ~= holder then return {'not_holder', m.epoch} end
  if num(prev[L_DEADLINE]) > now then
    redis.call('HINCRBY', K_STATE, 'c:replays', 1)
    return {'replayed', m.epoch, unpack(prev, 1, L_N)}
  end
  drop_lease(prev, {'expired', 1}, now)
end

local engine_id, tenant_name, prio = ARGV[4], ARGV[5], ARGV[6]
local ef, tf = 'e:' .. engine_id, 't:' .. tenant_name
local x = redis.call('HMGET', K_STATE, ef, tf, 'p:' .. prio)
if not engine(engine_id, x[1]) then return {'unknown_engine', m.epoch, engine_id} end
if not tenant(tenant_name, x[2]) then return {'unknown_tenant', m.epoch, tenant_name} end
if not x[3] then return {'unknown_priority', m.epoch, prio} end

-- A current-epoch sequence the pool's counter (exact in Lua below 2^53)
-- could not carry would make later grants fail or collide.
if ARGV[11] == m.epoch and tonumber(ARGV[12]) >= 2 ^ 53 then
  return {'invalid_argument', m.epoch, 'fence sequence ' .. ARGV[12] .. ' of the current epoch is too large'}
end
local extra = {}
if ARGV[11] == m.epoch and tonumber(ARGV[12]) > num(v[3]) then
  extra = {'seq', ARGV[12]}
end
local created = ARGV[10]
if created == '0' then created = int(now) end
local deadline = now + tonumber(ARGV[13])
local l = {id, engine_id, tenant_name, prio, ARGV[7], ARGV[8], holder, ARGV[9],
  created, int(deadline), ARGV[11], ARGV[12], '1', '0'}
put_lease(l)
if deadline < m.sweep_at then
  extra[#extra + 1] = 'sweep_at'
  extra[#extra + 1] = int(deadline)
end
charge(engine_id, tenant_name, num(ARGV[7]), num(ARGV[8]), 1, {'reasserts', 1}, extra)
return {'ok', m.epoch, unpack(l, 1, L_N)}
