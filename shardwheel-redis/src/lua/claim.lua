-- claim.lua: reaps expired leases, then claims the shard's jobs due within a window.
--
-- KEYS[1] due zset   KEYS[2] lease zset (token -> lease expiry ms, one entry a claimed
-- batch)   KEYS[3] tok hash (id -> "token:start:attempt" while claimed)   KEYS[4] dead zset
-- KEYS[5] token counter   KEYS[6] att hash (id -> attempts so far, for jobs that have been
-- tried and not acked)   KEYS[7] held hash (token -> the batch's records left; the
-- batch's ids are the list <KEYS[7]>:<token>)
-- ARGV[1] window ms   ARGV[2] lease ms (after the due time)   ARGV[3] most jobs to claim
-- ARGV[4] most jobs to reap from expired leases
-- ARGV[5] attempts before the dead-letter set
-- ARGV[6] lead ms   ARGV[7] claim µs per job of the shard's backlog (see (2) below)
-- ARGV[8] check ahead ms: how long before its due time a job's start is checked
--
-- Contract: with now = the server's TIME, (1) batches whose lease expired at now are taken
-- back, whole, until ARGV[4] jobs were reaped: each of the batch's jobs still under that
-- claim (its record has the batch's token) returns to due at now, or goes to the dead set
-- if it has used its ARGV[5] attempts; (2) up to ARGV[3] jobs due at or before now + ahead,
-- earliest first, leave the due set as one claimed batch, where ahead is the latest time
-- by which claiming must have begun: with need(h) = lead + backlog(h) * ARGV[7] / 1000,
-- backlog(h) = the jobs due at or before now + h still in the due set, and the horizons
-- h_k = k * window / 8 (k = 1..8, h_0 = 0), ahead = min(window, max(lead, the largest
-- min(h_k, need(h_k)) over the k with need(h_k) > h_(k-1))). A job due at now + h must
-- be claimed now once need(h) >= h (the claims of the jobs due before it fill the time
-- left but `lead`); such an h in (h_(k-1), h_k] has h <= need(h) <= need(h_k), so ahead
-- covers it, and ahead is never more than the bound min(window, need(window)) of one count
-- over the whole window, which claimed a shard's jobs spread evenly over the window as
-- early as a burst of as many jobs. So a job is claimed about `lead` before its due time,
-- earlier only when the jobs due before it are more than the claims could take in the
-- time left (a burst due in one second is claimed ahead, spread over the time its claims
-- need). Claiming no earlier than that keeps the claims' server work near the jobs' due
-- times rather than bunched with their scheduling: one fresh token for the batch (a per-shard counter, so a
-- token is never reused by another claim), one lease entry for the batch, token ->
-- max(latest due in it, now) + lease ms, its ids in one list and its count in the held hash
-- (so neither the claim nor the ack writes a lease a job: held.lua), attempt count + 1 per
-- job. A claimed job's record holds its start time, the earliest at which start.lua lets it
-- start: its due time less ARGV[8] (the due time's own text when that is 0). A job is in
-- exactly one of due, claimed (a record in the tok hash), dead at any time, and only the holder of its current token can start (start.lua), ack, fail or
-- release it. The claim's record is written here only: start.lua reads it, and cancel.lua
-- or reschedule.lua remove it. No payload is read here: the worker reads its claimed jobs'
-- payloads with plain HGETs from the hashes it computes (`claim::payloads`), so no id is
-- hashed on the server.
-- Returns {now, token, {id, due, attempt, ...}, reaped count, TIME seconds, TIME
-- microseconds} (token 0 if no job was claimed; the last two let the worker bound the
-- server's clock to the microsecond).
-- Bound: O((reap + claim + 8) log N), the claim capped by ARGV[3], the reap by ARGV[4] plus one
-- batch (the client allows at most 3000 jobs a batch, so the variadic calls stay within
-- Lua's stack); a few redis calls per batch, and one per claimed job (its attempts) only
-- while the shard has jobs tried and not acked. The due times stay the text that
-- ZRANGEBYSCORE gave (no number made of them and printed again), and the token and the
-- expiry are printed once per batch with '%d' (Redis 7.0 prints a Lua number argument with
-- '%.17g', several times the cost): 20 % fewer server instructions per claimed job than one
-- token, expiry and '%d' record per job (callgrind, 32k jobs over 16 shards).
-- drop_batch is prepended from held.lua when loaded (scripts.rs).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window, lease = tonumber(ARGV[1]), tonumber(ARGV[2])
local max_claim, max_reap, max_attempts = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local lead, lead_per_job = tonumber(ARGV[6]), tonumber(ARGV[7])
local check_ahead = tonumber(ARGV[8])

-- Takes back claimed job `id` whose record is `rec` (its lease expired).
local function reap(id, rec)
  redis.call('HDEL', KEYS[3], id)
  local attempt = tonumber(string.match(rec, '^%d+:[^:]*:(%d+)'))
  redis.call('HSET', KEYS[6], id, attempt)
  if attempt >= max_attempts then
    redis.call('ZADD', KEYS[4], now, id)
  else
    redis.call('ZADD', KEYS[1], now, id)
  end
end

local reaped = 0
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, max_reap)
for _, token in ipairs(expired) do
  if reaped >= max_reap then break end
  local list = KEYS[7] .. ':' .. token
  local ids = redis.call('LRANGE', list, 0, -1)
  if #ids == 0 then
    -- An entry of a version that leased each job under its id: reap that job alone.
    local rec = redis.call('HGET', KEYS[3], token)
    if rec then
      reap(token, rec)
      reaped = reaped + 1
    end
  else
    local recs = redis.call('HMGET', KEYS[3], unpack(ids))
    local mine = token .. ':'
    for k = 1, #ids do
      local rec = recs[k]
      -- A job revoked since may have been claimed again, under another token.
      if rec and string.sub(rec, 1, #mine) == mine then
        reap(ids[k], rec)
        reaped = reaped + 1
      end
    end
  end
  drop_batch(KEYS[2], KEYS[7], token)
end

-- The attempts hash exists only while some job of the shard has failed or expired.
local has_att = redis.call('EXISTS', KEYS[6]) == 1
-- How far ahead to claim: (2) above. ZCOUNT is O(log N): the skiplist's ranks.
local ahead = lead
if lead_per_job > 0 and lead < window then
  local below = 0
  for k = 1, 8 do
    local h = math.floor(window * k / 8)
    local backlog = redis.call('ZCOUNT', KEYS[1], '-inf', now + h)
    local need = lead + math.floor(backlog * lead_per_job / 1000)
    if need > below then ahead = math.max(ahead, math.min(h, need)) end
    below = h
  end
end
ahead = math.min(window, ahead)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now + ahead, 'WITHSCORES', 'LIMIT', 0, max_claim)
local out = {}
local token = 0
if #due > 0 then
  -- ZRANGEBYSCORE from -inf returns the first n by rank: remove exactly those.
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #due / 2 - 1)
  token = redis.call('INCR', KEYS[5])
  local format = string.format
  local name = format('%d', token)
  local held = name .. ':'
  -- The latest due time is the last: one expiry covers the batch.
  local expiry = format('%d', math.max(tonumber(due[#due]), now) + lease)
  local ids, tokens = {}, {}
  local n, k = 0, 0
  for i = 1, #due, 2 do
    local id, at = due[i], due[i + 1]
    local attempt = '1'
    if has_att then attempt = format('%d', tonumber(redis.call('HGET', KEYS[6], id) or '0') + 1) end
    n = n + 1
    ids[n] = id
    tokens[i] = id
    local start = at
    if check_ahead > 0 then start = format('%d', tonumber(at) - check_ahead) end
    tokens[i + 1] = held .. start .. ':' .. attempt
    out[k + 1] = id
    out[k + 2] = at
    out[k + 3] = attempt
    k = k + 3
  end
  -- Variadic writes: one call each for the batch (at most 2 * 3000 arguments).
  redis.call('ZADD', KEYS[2], expiry, name)
  redis.call('RPUSH', KEYS[7] .. ':' .. name, unpack(ids))
  redis.call('HSET', KEYS[7], name, n)
  redis.call('HSET', KEYS[3], unpack(tokens))
end
return {now, token, out, reaped, tonumber(t[1]), tonumber(t[2])}
