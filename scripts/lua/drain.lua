-- drain.lua: set or clear an engine's drain flag (Ledger.SetDraining).
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch, 2 engine id, 3 draining (1 or 0).
-- Returns: {'ok', epoch} | {'unknown_pool', ''} | {'unknown_engine', epoch, engine}.

local v = redis.call('HMGET', K_STATE, 'meta', 'sweep_at')
local m = meta(v[1], v[2])
if not m then return {'unknown_pool', ''} end
local now = clock()
if now >= m.sweep_at then sweep(now, SWEEP_BATCH) end
local id = ARGV[2]
local spec = redis.call('HGET', K_STATE, 'e:' .. id)
if not engine(id, spec) then return {'unknown_engine', m.epoch, id} end
redis.call('HSET', K_STATE, 'e:' .. id, (string.gsub(spec, '%S+$', ARGV[3])))
return {'ok', m.epoch}
