-- drain.lua: set or clear an engine's drain flag (Ledger.SetDraining).
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch, 2 engine id, 3 draining (1 or 0).
-- Returns: {'ok', epoch} | {'unknown_pool', ''} | {'unknown_engine', epoch, engine}.

local m = open_pool()
if not m then return {'unknown_pool', ''} end
local id = ARGV[2]
local x = rcall('HMGET', K_STATE, 'e:' .. id, 'meta')
if not engine(id, x[1]) then return {'unknown_engine', m.epoch, id} end
-- With a new configuration generation (lib.lua's with_gen): acquire keeps
-- the specs it read by meta.
local _, t = clock()
rcall('HSET', K_STATE, 'e:' .. id, (gsub(x[1], '%S+$', ARGV[3])), 'meta', with_gen(x[2], t))
return {'ok', m.epoch}
