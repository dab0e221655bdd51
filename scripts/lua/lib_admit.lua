-- lib_admit.lua: the admission rule's helpers (acquire, resize, grow),
-- and the pool's specs kept by meta (spec; release reads the breaker
-- spec through it). lua.go puts it after lib.lua at the top of
-- the library.

-- capacity sets e.cap, ledger.EngineState.CapacityKV: the configured KV
-- tokens, or the total the last applied observation reported (the second
-- value of e:<id>:obs) when that is smaller.
-- An observation's total and a correction's three numbers are kept (memo)
-- by the field's value: an engine is observed about once a second and
-- its fields read by every grant in between.
local obs_total = memo(function(obs) return num(match(obs, '^%S+ (%S+)')) end)
local correction = memo(function(c)
  local ckv, cslots, arrived = triple(c)
  return {ckv, cslots, arrived}
end)

local function capacity(e, obs)
  local total = obs and obs_total(obs) or 0
  e.cap = e.kv
  if total > 0 and total < e.kv then e.cap = total end
end

-- usage adds an engine's e:<id>:r, e:<id>:c, e:<id>:o and e:<id>:obs
-- fields to e: the orphan charge counts with the correction (ckv, cslots),
-- and the observation gives the capacity (and, kept as e.oraw, recovery).
local function usage(e, r, c, o, obs)
  e.rkv, e.rslots, e.n = triple(r)
  if c then
    local x = correction(c)
    e.ckv, e.cslots, e.obs = x[1], x[2], x[3]
  else
    e.ckv, e.cslots, e.obs = 0, 0, 0
  end
  local okv, oslots = triple(o)
  e.ckv, e.cslots = e.ckv + okv, e.cslots + oslots
  e.oraw = obs
  capacity(e, obs)
end

-- ledger.EngineState.AdmissibleKV: floor(cap*f) - floor(cap*h); e.cap must
-- be set (capacity).
local function admissible(e, f, h) return fill(e.cap, f) - fill(e.cap, h) end

-- ledger.EngineState.Stale
local function stale(e, now)
  if e.stale_ns <= 0 then return false end
  return e.obs == 0 or (now - e.obs) * 1e6 > e.stale_ns
end

-- ledger.EngineState.Used
local function used(e, now)
  if e.policy == 'ignore' and stale(e, now) then return e.rkv, e.rslots end
  return e.rkv + e.ckv, e.rslots + e.cslots
end

-- ledger.EngineState.Recovered: e's last applied observation (e.oraw,
-- arrived at e.obs) was taken and arrived at or after since (ms: the
-- epoch's created ms plus CONFIRM_GRACE, ledger.RecoverySince), its
-- telemetry is not stale, and in a worst_case pool it showed nothing
-- running or waiting. The taken time is compared in whole ms, which for
-- a whole-ms since is the exact comparison.
local function recovered(e, now, since, elastic)
  if e.obs <= 0 or e.obs < since or stale(e, now) then return false end
  local _, _, running, waiting, s, ns = match(e.oraw or '', '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$')
  if not s or tonum(s) * 1000 + floor(tonum(ns) / 1000000) < since then return false end
  return elastic or tonum(running) + tonum(waiting) == 0
end

-- recovery sets e.recovering (ledger.Admission.recovering): pool m's
-- recovery window is open at now and e has not recovered since created
-- (the pool's created field, ms) plus CONFIRM_GRACE. usage must have run.
local function recovery(e, m, now, created)
  e.recovering = now < m.ru and not recovered(e, now, num(created) + CONFIRM_GRACE, m.elastic)
end

-- hint is the retry-after of a rejection for reason r in pool m at now
-- (ledger.Admission.recoveryHint): for 'recovering' the pool's hint or the
-- rest of the window, whichever is shorter.
local function hint(m, r, now)
  if r == 'recovering' then return min(m.retry, m.ru - now) end
  return m.retry
end

-- ledger.engineReason: nil when e can take kv tokens and slots in a pool
-- with growth headroom h (recovery must have run on e).
local function engine_reason(e, now, maxfill, h, kv, slots)
  if e.draining then return 'draining' end
  if e.recovering then return 'recovering' end
  if e.policy == 'block' and stale(e, now) then return 'telemetry_stale' end
  local ukv, us = used(e, now)
  if ukv + kv > admissible(e, maxfill, h) then
    if maxfill < 1 and ukv + kv <= admissible(e, 1, h) then return 'priority_headroom' end
    return 'engine_kv'
  end
  if us + slots > fill(e.slots, maxfill) then
    if maxfill < 1 and us + slots <= e.slots then return 'priority_headroom' end
    return 'engine_slots'
  end
  return nil
end

-- ledger.grantReason: engine_reason for a new grant, with the engine's
-- breaker (e.braw, its e:<id>:b) checked right after draining under the
-- pool's breaker spec bs. It sets e.breaker and e.bt to the breaker read
-- at now and the transition that reading made (breaker_at).
local function grant_reason(e, now, bs, maxfill, h, kv, slots)
  if e.draining then return 'draining' end
  e.breaker, e.bt = breaker_at(e.braw, now, bs)
  local b = e.breaker
  if b.state == 'open' or (b.state == 'half_open' and b.probes >= bs.probes) then return 'breaker_open' end
  return engine_reason(e, now, maxfill, h, kv, slots)
end

-- ledger.TenantQuota
local function quota(t, m)
  local qs = 0
  if t.slot_share > 0 then qs = fill(m.cap_slots, t.slot_share) end
  return fill(m.cap_kv, t.kv_share), qs
end

-- reject counts a rejection under its reason and builds the reply. The
-- total, rejections, is the sum of the reasons' counters (stats.lua), one
-- HINCRBY fewer on the path a full pool takes most.
local function reject(m, reason, engine_id, retry)
  rcall('HINCRBY', K_STATE, 'c:rejections:' .. reason, '1')
  return {'rejected', m.epoch, reason, engine_id or '', int(retry)}
end

-- spec returns a configuration field of pool m as the state held it while
-- meta read as m (nil when absent): an engine's, a tenant's or a
-- priority's spec (c m.especs, m.tspecs or m.pspecs, prefix 'e:', 't:' or
-- 'p:', k its id or name) or the pool's breaker spec (c m.fields, prefix
-- '', k 'breaker'). It is kept in c (false: absent), read with one HGET by
-- the first call of the configuration that asks. Two reads of one meta
-- read the same field: configure.lua and drain.lua, which write them, give
-- meta a new generation with every one they write (lib.lua's next_gen).
-- The one other change, forget_engine and forget_tenant deleting a
-- removed engine's or tenant's spec with its last lease, changes no
-- answer: acquire reads a removed spec and none alike (unknown), and grow
-- and resize read only a lease's engine and tenant, which are not
-- forgotten while it holds them.
local function spec(m, c, prefix, k)
  local s = c[k]
  if s == nil then
    s = rcall('HGET', K_STATE, prefix .. k) or false
    c[k] = s
  end
  return s or nil
end

-- acquire_read is acquire's HMGET of the pool: meta, sweep_at, seq, repl,
-- then tenant tf's reservations and the first candidate's (fields ef, as
-- efield gives them) reservations, correction, orphan charge, breaker and
-- last observation. Its arguments are named in the call, not unpacked
-- from a table built for it.
local function acquire_read(tf, ef)
  return rcall('HMGET', K_STATE, 'meta', 'sweep_at', 'seq', 'repl', tf.r, ef.r, ef.c, ef.o, ef.b, ef.obs)
end
