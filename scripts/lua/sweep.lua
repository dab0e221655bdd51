-- sweep.lua: remove expired leases and dead sessions' leases (Ledger.Sweep).
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 batch (the most leases, and lease-less dead sessions, handled).
-- Returns: {'ok', epoch, expired, revoked, holders removed} | {'unknown_pool', ''}.

failover()
local m = meta(rcall('HGET', K_STATE, 'meta'))
if not m then return {'unknown_pool', ''} end
local now = clock()
local expired, revoked, holders = sweep(now, SWEEP_BATCH)
return {'ok', m.epoch, expired, revoked, holders}
