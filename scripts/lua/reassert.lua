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
-- the overload blocks new grants until it drains. But ledger.CheckReassert
-- first: a fence of the current epoch at most MAX_AHEAD past the pool's
-- sequence (then the sequence is raised to it), none from a later epoch,
-- and amounts no larger than the engine (its smaller of configured and
-- reported KV capacity, its slots). The id (ARGV[2]) is the one its fence
-- makes (ledger.ValidateReassert checked it) and no other lease's: an
-- existing id is replayed to its holder and refused to anyone else. On an
-- engine that has been observed the lease is unconfirmed (since = now),
-- its deadline at most now + CONFIRM_WITHIN, and the engine marked (e:<id>:u,
-- with the lease added to the sums of its unconfirmed leases) so that
-- observe.lua looks for it.

local MAX_AHEAD = 1048576 -- ledger.MaxReassertAhead

failover()
local v = rcall('HMGET', K_STATE, 'meta', 'sweep_at', 'seq')
local m = meta(v[1], v[2])
if not m then return {'unknown_pool', ''} end
local now = clock()
local id, holder = ARGV[2], ARGV[3]
local state = holder_state(holder, now, m.sweep_at)
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
    rcall('HINCRBY', K_STATE, 'c:replays', '1')
    return {'replayed', m.epoch, unpk(prev, 1, L_N)}
  end
  drop_lease(prev, {'expired', 1}, now)
end

local engine_id, tenant_name, prio = ARGV[4], ARGV[5], ARGV[6]
local ef, tf = 'e:' .. engine_id, 't:' .. tenant_name
local x = rcall('HMGET', K_STATE, ef, tf, 'p:' .. prio, ef .. ':obs', ef .. ':c', ef .. ':u')
local e = engine(engine_id, x[1])
if not e then return {'unknown_engine', m.epoch, engine_id} end
if not tenant(tenant_name, x[2]) then return {'unknown_tenant', m.epoch, tenant_name} end
if not x[3] then return {'unknown_priority', m.epoch, prio} end

-- ledger.CheckReassert. Epochs are decimal strings of up to 16 digits and
-- sequences at most MAX_SEQ: both exact as Lua numbers.
local fepoch, fseq, epoch = tonum(ARGV[11]), tonum(ARGV[12]), tonum(m.epoch)
local seq = num(v[3])
local function invalid(why) return {'invalid_argument', m.epoch, why} end
if fepoch > epoch then
  return invalid('fence ' .. ARGV[11] .. '.' .. ARGV[12] .. ' is from epoch ' .. ARGV[11] ..
    ', after the pool\'s current epoch ' .. m.epoch)
end
if fepoch == epoch and fseq > seq + MAX_AHEAD then
  return invalid('fence ' .. ARGV[11] .. '.' .. ARGV[12] .. ' is ' .. int(fseq - seq) .. ' past the pool\'s sequence ' ..
    int(seq) .. ' in the current epoch, more than ' .. MAX_AHEAD .. ' (MaxReassertAhead)')
end
local cap = e.kv
local total = num(x[4] and match(x[4], '^%S+ (%S+)'))
if total > 0 and total < cap then cap = total end
if tonum(ARGV[7]) > cap then
  return invalid('kv_tokens = ' .. ARGV[7] .. ', more than engine ' .. engine_id .. '\'s capacity ' .. int(cap))
end
if tonum(ARGV[8]) > e.slots then
  return invalid('slots = ' .. ARGV[8] .. ', more than engine ' .. engine_id .. '\'s ' .. int(e.slots))
end

local extra = {}
if fepoch == epoch and fseq > seq then
  extra = {'seq', ARGV[12]}
end
local created = ARGV[10]
if created == '0' then created = int(now) end
local _, _, arrived = triple(x[5])
local checked = arrived > 0
local deadline = now + tonum(ARGV[13])
local since = '0'
if checked then
  deadline = min(deadline, now + CONFIRM_WITHIN)
  since = int(now)
  -- The mark: this reassert's ms, and the sums of the engine's
  -- unconfirmed leases with this one added (a mark written before the
  -- sums stays without them: observe.lua's next scan counts them).
  extra[#extra + 1] = ef .. ':u'
  extra[#extra + 1] = mark_add(x[6] or nil, since, num(ARGV[8]), 1) or since
end
local l = {id, engine_id, tenant_name, prio, ARGV[7], ARGV[8], holder, ARGV[9],
  created, int(deadline), ARGV[11], ARGV[12], '1', '0', checked and '1' or '0', '0'}
l[L_SINCE], l[L_TOKENS] = since, '0' -- a reasserted lease is not charged again
put_lease(l)
if deadline < m.sweep_at then
  extra[#extra + 1] = 'sweep_at'
  extra[#extra + 1] = int(deadline)
end
charge(engine_id, tenant_name, num(ARGV[7]), num(ARGV[8]), 1, {'reasserts', 1}, extra)
return {'ok', m.epoch, unpk(l, 1, L_N)}
