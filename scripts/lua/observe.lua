-- observe.lua: record engine telemetry (Ledger.Observe).
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch, 2 engine id, 3 kv tokens used, 4 kv tokens total,
--       5 running, 6 waiting, 7 observed_at unix seconds, 8 its nanoseconds.
-- Returns: {'ok', epoch, applied (1 or 0)} | {'unknown_pool', ''}
--        | {'unknown_engine', epoch, engine}.
--
-- Observations not after the last applied one are ignored. An applied one
-- sets the correction to max(0, observed - reserved) for KV tokens and
-- running sequences (while the recovery window is open, all it shows: KV
-- used, running plus waiting; ledger.CorrectionOf), and the arrival time
-- (ledger clock) for staleness and recovery. It
-- clears the engine's orphan charge (see drop_lease in lib.lua) when it
-- arrives at or after the charge's until ms, and leaves it otherwise.
--
-- While the engine is marked (e:<id>:u, set by reassert.lua) an applied
-- observation confirms its unconfirmed leases (ledger.Confirms): when it
-- shows at least as many sequences (running + waiting) as the slots of the
-- engine's leases ledger.ExpectedAt now (every reasserted one, every other
-- granted CONFIRM_GRACE or more ago), the leases reasserted CONFIRM_GRACE
-- or more ago are confirmed (since '0'). That reads every lease of the
-- pool, which only a marked engine costs, and only an observation that may
-- confirm: every unconfirmed lease is a reasserted one, so the slots
-- expected are at least the sum of the unconfirmed leases' slots the mark
-- keeps, and an observation showing fewer sequences confirms nothing
-- without the scan (a mark written before the sums is scanned for, and
-- the scan writes them). The mark goes once none is left.

local m, now = open_pool()
if not m then return {'unknown_pool', ''} end
local id = ARGV[2]
local ef = 'e:' .. id
local x = rcall('HMGET', K_STATE, ef, ef .. ':r', ef .. ':obs', ef .. ':o', ef .. ':u')
if not engine(id, x[1]) then return {'unknown_engine', m.epoch, id} end
if x[3] then
  local ls, lns = match(x[3], '(%S+) (%S+)$')
  ls, lns = tonum(ls), tonum(lns)
  local s, ns = tonum(ARGV[7]), tonum(ARGV[8])
  if s < ls or (s == ls and ns <= lns) then return {'ok', m.epoch, 0} end
end
local rkv, rslots = triple(x[2])
local ckv = max(0, tonum(ARGV[3]) - rkv)
local cslots = max(0, tonum(ARGV[5]) - rslots)
if now < m.ru then -- ledger.CorrectionOf in the recovery window: all it shows
  ckv, cslots = tonum(ARGV[3]), tonum(ARGV[5]) + tonum(ARGV[6])
end
rcall('HSET', K_STATE, ef .. ':c', fmt3(ckv, cslots, now),
  ef .. ':obs', concat({ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]}, ' '))
if x[4] then
  local _, _, until_ms = triple(x[4])
  if now >= until_ms then rcall('HDEL', K_STATE, ef .. ':o') end
end
local shown = tonum(ARGV[5]) + tonum(ARGV[6])
local mark_since, uslots, un
if x[5] then mark_since, uslots, un = mark_sums(x[5]) end
if un and un <= 0 then
  rcall('HDEL', K_STATE, ef .. ':u')
elseif un and shown < uslots then
  -- Fewer sequences than the unconfirmed leases' slots: below what is
  -- expected, so nothing is confirmed and the mark stays as it is.
  return {'ok', m.epoch, 1}
elseif x[5] then
  local expected, pending = 0, {}
  local by = now - CONFIRM_GRACE
  for _, rec in ipairs(rcall('HVALS', K_LEASES)) do
    local l = parse_lease(rec)
    if l[L_ENGINE] == id then
      if l[L_REASSERTED] == '1' or num(l[L_CREATED]) <= by then expected = expected + num(l[L_SLOTS]) end
      if l[L_SINCE] ~= '0' then pending[#pending + 1] = l end
    end
  end
  local confirm = #pending > 0 and shown >= expected
  local lslots, ln = 0, 0 -- the sums of the unconfirmed leases left
  for _, l in ipairs(pending) do
    if confirm and num(l[L_SINCE]) <= by then
      l[L_SINCE] = '0'
      set_lease(l)
    else
      lslots, ln = lslots + num(l[L_SLOTS]), ln + 1
    end
  end
  if ln == 0 then
    rcall('HDEL', K_STATE, ef .. ':u')
  else
    rcall('HSET', K_STATE, ef .. ':u', mark_add(nil, mark_since, lslots, ln))
  end
end
return {'ok', m.epoch, 1}
