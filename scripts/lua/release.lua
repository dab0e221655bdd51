-- release.lua: end a lease, idempotently (Ledger.Release).
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch, 2 lease id, 3 holder, 4 actual prompt tokens,
--       5 actual completion tokens, 6 the completion-length counter of the
--       pool (ledger.CompletionCounters; the tenant's is it, '/', tenant,
--       and counts for both: see n:<name> in lib.lua; empty: the answer
--       did not finish, no histogram sample), 7 the
--       dispatch's outcome (ledger.Outcome; empty: no evidence).
-- Returns: {'ok', epoch, released (1 or 0)} | {'unknown_pool', ''}
--        | {'not_holder', epoch}.
--
-- An unknown lease reports 0. A lease that had already ended (deadline
-- passed, or its holder's session died) is removed as expired or revoked
-- and also reports 0. Only a release by the holder counts the usage and
-- reports the outcome to the engine's breaker (breaker_report) and trues
-- its tenant's rate window up to the usage (rate_true_up), so a retried
-- release never counts twice.

local id, holder, prompt, completion = ARGV[2], ARGV[3], num(ARGV[4]), num(ARGV[5])
local outcome = ARGV[7]

-- The common release, inline: the holder releases a live lease that is
-- neither a probe nor unconfirmed and charged nothing to a rate window
-- (its record is of the current form, seventeen fields, since and probe
-- '0', which the pattern below alone matches), with no outcome or a
-- success its engine's breaker need not hear (breaker_quiet), before
-- anything may have expired (now < sweep_at: no sweep, and the holder's
-- session is live), and neither its engine nor its tenant holds no lease
-- after it (nothing to forget). It makes the calls and writes of the path
-- below (drop_lease, charge) reading only the eight fields it needs of
-- the record, with no lease table, closure or list; any other release
-- takes that path, given the record read here.
local rec = rcall('HGET', K_LEASES, id)
local eid, tname, skv, sslots, lholder, lreq, sdeadline, owns
if rec then
  eid, tname, skv, sslots, lholder, lreq, sdeadline, owns =
    match(rec, '^%S+ (%S+) (%S+) %S+ (%S+) (%S+) (%S+) (%S+) %S+ (%S+) %S+ %S+ %S+ (%S+) %S+ 0 0$')
end
if eid and lholder == holder and (outcome == '' or outcome == 'ok') then
  local ef, tf = efield(eid), tfield(tname)
  local v = rcall('HMGET', K_STATE, 'meta', 'sweep_at', ef.r, tf.r, 'g:release', ef.b)
  local m = meta(v[1], v[2])
  if m then
    local now = clock()
    local ekv, es, en = triple(v[3])
    local tkv, ts, tn = triple(v[4])
    if now < m.sweep_at and sdeadline + 0 > now and en > 1 and tn > 1
      and (outcome == '' or not v[6] or breaker_quiet(v[6], spec(m, m.fields, '', 'breaker'))) then
      local kv, slots = skv + 0, sslots + 0
      unlist_lease(id, holder, lreq, owns)
      rcall('HSET', K_STATE, ef.r, fmt3(ekv - kv, es - slots, en - 1), tf.r, fmt3(tkv - kv, ts - slots, tn - 1),
        'g:release', group_add(v[5], 1, kv, prompt, completion))
      if ARGV[6] ~= '' then rcall('HINCRBY', K_STATE, 'n:' .. ARGV[6] .. '/' .. tname, '1') end
      return {'ok', m.epoch, 1}
    end
  end
end

-- cnt lists the counters a release of the lease open_lease read adds
-- (drop_lease), made as open_lease reads it, and cf the fields charge
-- reads for it (charge_fields).
local cnt, cf
-- One HMGET reads the pool with what the charge reads (open_lease; from
-- v[3]), for a release by the holder, then, for an outcome 'ok', the
-- engine's breaker at v[ib] (breaker_quiet; the pool's breaker spec, read
-- only when a breaker is stored, is kept by meta: spec in lib_admit.lua).
local ib
local m, now, l, v = open_lease(id, function(x)
  cnt = {'g:release', {1, num(x[L_KV]), prompt, completion}}
  local f = charge_fields(x[L_ENGINE], x[L_TENANT], cnt)
  cf = f
  if outcome == 'ok' then
    f[#f + 1] = efield(x[L_ENGINE]).b
    ib = #f + 2
  end
  return f
end, false, true, parse_lease(rec))
if not m then return {'unknown_pool', ''} end
if not l then return {'ok', m.epoch, 0} end
if l[L_HOLDER] ~= holder then return {'not_holder', m.epoch} end
if num(l[L_DEADLINE]) <= now then
  drop_lease(l, {'expired', 1}, now)
  return {'ok', m.epoch, 0}
end
if now >= m.sweep_at and holder_state(holder, now) == 'dead' then
  drop_lease(l, {'revoked', 1}, now)
  return {'ok', m.epoch, 0}
end
-- The breaker hears a probe lease's release, and an outcome unless it is
-- a success that changes nothing (breaker_quiet: then drop_lease need not
-- read the breaker again).
local report
if l[L_PROBE] == '1' or (outcome ~= '' and not (outcome == 'ok' and
  (not v[ib] or breaker_quiet(v[ib], spec(m, m.fields, '', 'breaker'))))) then
  report = function(b, at, s, probe) return breaker_report(b, at, s, num(l[L_CREATED]), probe, outcome) end
end
rate_true_up(l, now, prompt, completion)
drop_lease(l, cnt, now, report, v, 3, cf)
if ARGV[6] ~= '' then
  -- The completion-length counters, the pool's and the tenant's, in one
  -- field: the tenant's, n:<pool's name>/<tenant>, which stats.lua also
  -- adds to the pool's. HINCRBY adds to it, cheaper than reading,
  -- formatting and writing it (with '1' a string: redis.call formats a
  -- number argument).
  rcall('HINCRBY', K_STATE, 'n:' .. ARGV[6] .. '/' .. l[L_TENANT], '1')
end
return {'ok', m.epoch, 1}
