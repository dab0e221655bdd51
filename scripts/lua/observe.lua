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
-- running sequences, and the arrival time (ledger clock) for staleness.

local m = load_meta()
if not m then return {'unknown_pool', ''} end
local now = clock()
sweep(now, SWEEP_BATCH)
local id = ARGV[2]
local e = load_engine(id)
if not e then return {'unknown_engine', m.epoch, id} end
local ek = P_ENGINE .. id
local last = redis.call('HMGET', ek, 'obs_sec', 'obs_nsec')
if last[1] then
  local s, ns = tonumber(ARGV[7]), tonumber(ARGV[8])
  local ls, lns = tonumber(last[1]), tonumber(last[2])
  if s < ls or (s == ls and ns <= lns) then return {'ok', m.epoch, 0} end
end
local ckv = math.max(0, tonumber(ARGV[3]) - e.rkv)
local cslots = math.max(0, tonumber(ARGV[5]) - e.rslots)
redis.call('HSET', ek, 'obs_used', ARGV[3], 'obs_total', ARGV[4], 'obs_running', ARGV[5],
  'obs_waiting', ARGV[6], 'obs_sec', ARGV[7], 'obs_nsec', ARGV[8], 'obs_arrived', int(now),
  'ckv', int(ckv), 'cslots', int(cslots))
return {'ok', m.epoch, 1}
