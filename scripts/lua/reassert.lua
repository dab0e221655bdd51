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

local m = load_meta()
if not m then return {'unknown_pool', ''} end
local now = clock()
local id, holder = ARGV[2], ARGV[3]
local state = holder_state(holder, now)
sweep(now, SWEEP_BATCH)
if state == 'dead' then return {'session_expired', m.epoch} end
if state == 'none' then return {'no_session', m.epoch} end

local prev = get_lease(id)
if prev then
  if prev[L_HOLDER] ~= holder then return {'not_holder', m.epoch} end
  if num(prev[L_DEADLINE]) > now then
    count('replays')
    return {'replayed', m.epoch, unpack(prev)}
  end
  drop_lease(prev, 'expired')
end

local engine, tenant, prio = ARGV[4], ARGV[5], ARGV[6]
if not load_engine(engine) then return {'unknown_engine', m.epoch, engine} end
if not load_tenant(tenant) then return {'unknown_tenant', m.epoch, tenant} end
if not load_maxfill(prio) then return {'unknown_priority', m.epoch, prio} end

-- A current-epoch sequence the pool's counter (HINCRBY, exact in Lua below
-- 2^53) could not carry would make later grants fail or collide.
if ARGV[11] == m.epoch and tonumber(ARGV[12]) >= 2 ^ 53 then
  return {'invalid_argument', m.epoch, 'fence sequence ' .. ARGV[12] .. ' of the current epoch is too large'}
end
if ARGV[11] == m.epoch and tonumber(ARGV[12]) > num(redis.call('HGET', K_META, 'seq')) then
  redis.call('HSET', K_META, 'seq', ARGV[12])
end
local created = ARGV[10]
if created == '0' then created = int(now) end
local l = {id, engine, tenant, prio, ARGV[7], ARGV[8], holder, ARGV[9],
  created, int(now + tonumber(ARGV[13])), ARGV[11], ARGV[12], '1'}
put_lease(l)
count('reasserts')
return {'ok', m.epoch, unpack(l)}
