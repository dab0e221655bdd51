-- lib_rate.lua: tenants' rate windows (ledger/rate.go, function for
-- function), for the scripts that charge or true them up (acquire,
-- release). lua.go inserts this file after lib.lua (and lib_admit.lua)
-- for them only.
--
-- A window is the pool's rate_window field (ms; absent: a minute) cut into
-- RATE_BUCKETS buckets; a rated tenant's t:<name>:w is its buckets, oldest
-- first, as "at tokens requests at tokens requests ..." (at: the bucket's
-- start in ms, a multiple of the width). At now a bucket counts while
-- at >= bucket_start(now) - window. ledger.RateUse, ChargeRate,
-- TrueUpRate and rateReason are the rule; TestRatesMatchGo holds these
-- to it.

local RATE_BUCKETS = 60 -- ledger.RateBuckets

-- rate_open reads the pool's window and the buckets still counted at now
-- of the tenant whose field names are tf (tfield): {win, width, buckets =
-- {{at, tokens, requests}...}}.
local function rate_open(tf, now)
  local x = rcall('HMGET', K_STATE, 'rate_window', tf.w)
  local win = num(x[1])
  if win <= 0 then win = 60000 end
  local width = win / RATE_BUCKETS
  local from = now - now % width - win
  local bs = {}
  for at, tok, req in gmatch(x[2] or '', '(%S+) (%S+) (%S+)') do
    at = tonum(at)
    if at >= from then bs[#bs + 1] = {at, tonum(tok), tonum(req)} end
  end
  return {win = win, width = width, buckets = bs}
end

-- rate_fmt is t:<name>:w of window w.
local function rate_fmt(w)
  local out = {}
  for _, b in ipairs(w.buckets) do out[#out + 1] = fmt3(b[1], b[2], b[3]) end
  return concat(out, ' ')
end

-- rate_frees is ledger.rateFrees: ms after now when enough of w's buckets
-- (total in all, amount at index i of a bucket) stop counting that need
-- more fits budget.
local function rate_frees(w, now, total, need, budget, i)
  for _, b in ipairs(w.buckets) do
    total = total - b[i]
    if total + need <= budget then return b[1] + w.win + w.width - now end
  end
  return w.win + w.width
end

-- rate_reason is ledger.rateReason for tenant t (t.tpm, t.rpm) charging
-- tokens: the reason and the retry ms, or nil when it fits.
local function rate_reason(w, now, t, tokens)
  local ut, ur = 0, 0
  for _, b in ipairs(w.buckets) do ut, ur = ut + b[2], ur + b[3] end
  local reason, retry = nil, 0
  if t.tpm > 0 and ut + tokens > t.tpm then
    reason, retry = 'tenant_token_rate', rate_frees(w, now, ut, tokens, t.tpm, 2)
  end
  if t.rpm > 0 and ur + 1 > t.rpm then
    reason = reason or 'tenant_request_rate'
    retry = max(retry, rate_frees(w, now, ur, 1, t.rpm, 3))
  end
  return reason, retry
end

-- rate_charge is ledger.ChargeRate: tokens and one request added to the
-- bucket holding now, kept oldest first when the window changed width.
local function rate_charge(w, now, tokens)
  local at, bs = now - now % w.width, w.buckets
  local i = #bs
  while i > 0 and bs[i][1] > at do i = i - 1 end
  if i > 0 and bs[i][1] == at then
    bs[i][2], bs[i][3] = bs[i][2] + tokens, bs[i][3] + 1
  else
    table.insert(bs, i + 1, {at, tokens, 1})
  end
end

-- rate_true_up is ledger.RateTrueUp then TrueUpRate at now for a release
-- of lease l that used prompt + completion tokens: the difference from
-- its charge goes to the bucket of its grant if it still counts (never
-- below zero). Nothing when l was not charged or the usage is unknown.
local function rate_true_up(l, now, prompt, completion)
  local charged = num(l[L_TOKENS])
  if charged <= 0 or prompt <= 0 then return end
  local delta = prompt + completion - charged
  if delta == 0 then return end
  local tf = tfield(l[L_TENANT])
  local w = rate_open(tf, now)
  local created = num(l[L_CREATED])
  local at = created - created % w.width
  for _, b in ipairs(w.buckets) do
    if b[1] == at then b[2] = max(0, b[2] + delta) end
  end
  local f = rate_fmt(w)
  if f == '' then
    rcall('HDEL', K_STATE, tf.w)
  else
    rcall('HSET', K_STATE, tf.w, f)
  end
end
