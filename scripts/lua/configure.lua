-- configure.lua: apply a pool spec idempotently (Ledger.Configure).
--
-- KEYS: the pool keys listed in lib.lua.
-- ARGV: 1 sweep batch, 2 recovery window ms (0 = none), 3 retry-after ms,
--       4 priority order (names joined by spaces), 5 reserve mode
--       (elastic or worst_case), 6 growth headroom, 7 the breaker spec
--       ("failures cooldown_ms probes successes", defaults applied), 8
--       engine count E, then E x {id, url, kv_tokens, slots, stale_after ns, stale policy},
--       then tenant count T, then T x {name, kv_share, slot_share,
--       tokens_per_minute, requests_per_minute}, then priority count P,
--       then P x {name, max_fill}, then the rate window ms (0: a minute).
-- Returns: {'ok', epoch, created (1 when this call started a new epoch)}.
--
-- A missing meta field means the pool's state is lost or was never there: a
-- new epoch (TIME in microseconds) starts with its recovery window. The
-- window is kept (field window) for the epoch failover (lib.lua) starts on
-- a promoted replica. Engines' drain flag, breaker and telemetry, tenants'
-- reservations and rate windows, and all leases survive re-application;
-- engines and tenants left out of the spec are marked unconfigured and kept
-- until their last lease ends. Field hashtable (lib.lua) keeps the state
-- hash a hash table.

-- retire handles the members of set (engine ids or tenant names, fields
-- prefix .. name) that the spec left out of keep: one still holding leases
-- is marked unconfigured, one without is forgotten.
local function retire(set, prefix, keep, forget)
  for _, name in ipairs(rcall('SMEMBERS', set)) do
    if not keep[name] then
      local f = prefix .. name
      local x = rcall('HMGET', K_STATE, f, f .. ':r')
      local _, _, leases = triple(x[2])
      if leases > 0 and x[1] then
        rcall('HSET', K_STATE, f, (gsub(x[1], '^%S+', '0')))
      else
        forget(name)
      end
    end
  end
end

failover()
local now, t = clock()
local created = 0
local v = rcall('HMGET', K_STATE, 'meta', 'order')
local epoch, ru
if v[1] then
  epoch, ru = match(v[1], '^(%S+) (%S+)')
else
  epoch = t[1] .. format('%06d', tonum(t[2]))
  local window = tonum(ARGV[2])
  ru = '0'
  if window > 0 then ru = int(now + window) end
  rcall('HSET', K_STATE, 'seq', 0, 'created', int(now))
  created = 1
end
sweep(now, SWEEP_BATCH)

local i = 8
local n = tonum(ARGV[i]); i = i + 1
local keep, cap_kv, cap_slots = {}, 0, 0
for _ = 1, n do
  local id, url, kv, slots, stale_ns, policy = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  i = i + 6
  keep[id] = true
  cap_kv = cap_kv + tonum(kv)
  cap_slots = cap_slots + tonum(slots)
  if policy == '' then policy = '-' end
  local f = 'e:' .. id
  local old = rcall('HGET', K_STATE, f)
  local draining = old and match(old, '(%S+)$') or '0'
  rcall('SADD', K_ENGINES, id)
  rcall('HSET', K_STATE, f, concat({'1', kv, slots, stale_ns, policy, draining}, ' '), f .. ':url', url)
end
retire(K_ENGINES, 'e:', keep, forget_engine)

n = tonum(ARGV[i]); i = i + 1
keep = {}
for _ = 1, n do
  local name, kv_share, slot_share, tpm, rpm = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  i = i + 5
  keep[name] = true
  rcall('SADD', K_TENANTS, name)
  rcall('HSET', K_STATE, 't:' .. name, concat({'1', kv_share, slot_share, tpm, rpm}, ' '))
end
retire(K_TENANTS, 't:', keep, forget_tenant)

for name in gmatch(v[2] or '', '%S+') do rcall('HDEL', K_STATE, 'p:' .. name) end
n = tonum(ARGV[i]); i = i + 1
for _ = 1, n do
  rcall('HSET', K_STATE, 'p:' .. ARGV[i], ARGV[i + 1])
  i = i + 2
end
if tonum(ARGV[i]) > 0 then
  rcall('HSET', K_STATE, 'rate_window', ARGV[i])
else
  rcall('HDEL', K_STATE, 'rate_window')
end

-- With a new configuration generation (lib.lua's next_gen): the specs
-- above may have changed.
rcall('HSET', K_STATE, 'meta',
  concat({epoch, ru, int(cap_kv), int(cap_slots), ARGV[3], ARGV[5], ARGV[6], next_gen(v[1], t)}, ' '),
  'order', ARGV[4], 'breaker', ARGV[7], 'window', ARGV[2], 'hashtable', HASHTABLE)
if created == 1 then failover() end -- records this server (see lib.lua)
return {'ok', epoch, created}
