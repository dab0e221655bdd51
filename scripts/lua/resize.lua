-- resize.lua: set a lease's KV tokens (Ledger.Resize).
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch, 2 lease id, 3 holder, 4 new kv_tokens.
-- Returns: {'ok', epoch, lease...} | {'ok', epoch, record} (a changed
--          lease's record as stored: lib.lua)
--        | {'rejected', epoch, reason, engine or '', retry-after ms}
--        | {'unknown_pool', ''} | {'lease_not_found' | 'not_holder', epoch}
--        | {'unknown_engine' | 'unknown_tenant' | 'unknown_priority', epoch, name}.
--
-- Shrinking always succeeds. Growth is ledger.AdmitGrowth: too large for
-- the tenant quota or the engine's admissible KV (floor(cap*max_fill) -
-- floor(cap*growth_headroom)), tenant KV quota, then the engine rule for
-- the difference (slots unchanged; recovery while the window is open).

local id, holder, newkv = ARGV[2], ARGV[3], tonum(ARGV[4])
-- One HMGET reads the pool with what a shrink needs, the engine's and
-- the tenant's reservations (open_lease; from v[3]); a growth reads the
-- rest of what its checks need with a second, and the specs kept by meta
-- (spec in lib_admit.lua).
-- A growth admits capacity, so it looks for a failover first (open_lease's
-- check); a shrink, or no change, admits nothing and, as a release, does
-- not. The lease is read first to tell which.
local l0 = get_lease(id)
local m, now, l, v = open_lease(id, function(x)
  return {efield(x[L_ENGINE]).r, tfield(x[L_TENANT]).r}
end, l0 ~= nil and newkv > num(l0[L_KV]), true, l0)
if not m then return {'unknown_pool', ''} end
local status
l, status = held(m, now, l, holder)
if not l then return {status, m.epoch} end
local delta = newkv - num(l[L_KV])
if delta == 0 then return {'ok', m.epoch, unpk(l, 1, L_N)} end
local ef, tf = efield(l[L_ENGINE]), tfield(l[L_TENANT])
if delta > 0 then
  local e = engine(l[L_ENGINE], spec(m, m.especs, 'e:', l[L_ENGINE]))
  if not e then return {'unknown_engine', m.epoch, l[L_ENGINE]} end
  local u = rcall('HMGET', K_STATE, ef.c, ef.o, ef.obs, 'created')
  usage(e, v[3], u[1], u[2], u[3])
  recovery(e, m, now, u[4])
  local t = tenant(l[L_TENANT], spec(m, m.tspecs, 't:', l[L_TENANT]), v[4])
  if not t then return {'unknown_tenant', m.epoch, l[L_TENANT]} end
  local maxfill = tonum(spec(m, m.pspecs, 'p:', l[L_PRIO]))
  if not maxfill then return {'unknown_priority', m.epoch, l[L_PRIO]} end
  local qkv = quota(t, m)
  if newkv > qkv or newkv > admissible(e, maxfill, m.headroom) then return reject(m, 'too_large', '', 0) end
  if t.rkv + delta > qkv then return reject(m, 'tenant_kv_quota', '', m.retry) end
  local r = engine_reason(e, now, maxfill, m.headroom, delta, 0)
  if r then return reject(m, r, e.id, hint(m, r, now)) end
end
local ekv, es, en = triple(v[3])
local tkv, ts, tn = triple(v[4])
rcall('HSET', K_STATE, ef.r, fmt3(ekv + delta, es, en), tf.r, fmt3(tkv + delta, ts, tn))
l[L_KV] = ARGV[4]
return {'ok', m.epoch, set_lease(l)}
