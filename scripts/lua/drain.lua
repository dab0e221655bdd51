-- drain.lua: set or clear an engine's drain flag (Ledger.SetDraining).
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch, 2 engine id, 3 draining (1 or 0).
-- Returns: {'ok', epoch} | {'unknown_pool', ''} | {'unknown_engine', epoch, engine}.

local m = open_pool()
if not m then return {'unknown_pool', ''} end
local id = ARGV[2]
local spec = rcall('HGET', K_STATE, 'e:' .. id)
if not engine(id, spec) then return {'unknown_engine', m.epoch, id} end
rcall('HSET', K_STATE, 'e:' .. id, (gsub(spec, '%S+$', ARGV[3])))
return {'ok', m.epoch}
