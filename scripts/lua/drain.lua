-- drain.lua: set or clear an engine's drain flag (Ledger.SetDraining).
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch, 2 engine id, 3 draining (1 or 0).
-- Returns: {'ok', epoch} | {'unknown_pool', ''} | {'unknown_engine', epoch, engine}.

local m = load_meta()
if not m then return {'unknown_pool', ''} end
local now = clock()
sweep(now, SWEEP_BATCH)
local id = ARGV[2]
if not load_engine(id) then return {'unknown_engine', m.epoch, id} end
redis.call('HSET', P_ENGINE .. id, 'draining', ARGV[3])
return {'ok', m.epoch}
