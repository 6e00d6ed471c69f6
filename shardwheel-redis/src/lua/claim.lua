-- claim.lua: reaps expired leases, then claims the shard's jobs due within a window.
--
-- KEYS[1] due zset   KEYS[2] lease zset (id -> lease expiry ms)   KEYS[3] tok hash
-- (id -> "token:due:attempt" while claimed)   KEYS[4] dead zset   KEYS[5] token counter
-- KEYS[6] att hash (id -> attempts so far, for jobs that have been tried and not acked)
-- ARGV[1] payload hash prefix   ARGV[2] shards   ARGV[3] buckets   ARGV[4] window ms
-- ARGV[5] lease ms (after the due time)   ARGV[6] most jobs to claim
-- ARGV[7] most expired leases to reap     ARGV[8] attempts before the dead-letter set
--
-- Contract: with now = the server's TIME, (1) up to ARGV[7] leases expired at now are
-- taken back: the job returns to due at now, or goes to the dead set if it has used its
-- ARGV[8] attempts; (2) up to ARGV[6] jobs due at or before now + window, earliest first,
-- leave the due set for the lease set with a fresh token (a per-shard counter, so a
-- token is never reused), lease expiry = max(due, now) + lease ms, attempt count + 1.
-- A job is in exactly one of due, lease, dead at any time, and only the holder of its
-- current token can start (start.lua), ack, fail or release it. The claim's record is
-- written here only: start.lua reads it, and cancel.lua or reschedule.lua remove it.
-- Returns {now, {id, due, token, attempt, payload, ...}, reaped count, TIME seconds, TIME
-- microseconds} (the last two let the worker bound the server's clock to the microsecond).
-- Bound: O((reap + claim) log N), both capped by the arguments (the client allows at most
-- 3000 claims, so the variadic calls stay within Lua's stack); about one redis call per
-- claimed job (its payload) plus a few per batch. Numbers go to redis.call as text made with
-- '%d' (as in schedule.lua: Redis 7.0 prints a Lua number with '%.17g', several times the
-- cost), which took 5 % off a claimed job's server instructions under callgrind.
-- bucket(prefix, id, shards, buckets) is prepended from bucket.lua when loaded (scripts.rs).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix, shards, buckets = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local window, lease = tonumber(ARGV[4]), tonumber(ARGV[5])
local max_claim, max_reap, max_attempts = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])

local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, max_reap)
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[2], id)
  local rec = redis.call('HGET', KEYS[3], id)
  redis.call('HDEL', KEYS[3], id)
  local attempt = 1
  if rec then attempt = tonumber(string.match(rec, '^%d+:%-?%d+:(%d+)')) end
  redis.call('HSET', KEYS[6], id, attempt)
  if attempt >= max_attempts then
    redis.call('ZADD', KEYS[4], now, id)
  else
    redis.call('ZADD', KEYS[1], now, id)
  end
end

-- The attempts hash exists only while some job of the shard has failed or expired.
local has_att = redis.call('EXISTS', KEYS[6]) == 1
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now + window, 'WITHSCORES', 'LIMIT', 0, max_claim)
local n = #due / 2
local out = {}
if n > 0 then
  -- ZRANGEBYSCORE from -inf returns the first n by rank: remove exactly those.
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - 1)
  local token = redis.call('INCRBY', KEYS[5], n) - n
  local leases, tokens = {}, {}
  for i = 1, #due, 2 do
    local id = due[i]
    local at = tonumber(due[i + 1])
    token = token + 1
    local attempt = 1
    if has_att then attempt = tonumber(redis.call('HGET', KEYS[6], id) or '0') + 1 end
    leases[#leases + 1] = string.format('%d', math.max(at, now) + lease)
    leases[#leases + 1] = id
    tokens[#tokens + 1] = id
    tokens[#tokens + 1] = string.format('%d:%d:%d', token, at, attempt)
    local payload = redis.call('HGET', bucket(prefix, id, shards, buckets), id) or ''
    out[#out + 1] = id
    out[#out + 1] = at
    out[#out + 1] = token
    out[#out + 1] = attempt
    out[#out + 1] = payload
  end
  -- Variadic writes: one call each for the batch (at most 2 * 3000 arguments).
  redis.call('ZADD', KEYS[2], unpack(leases))
  redis.call('HSET', KEYS[3], unpack(tokens))
end
return {now, out, #expired, tonumber(t[1]), tonumber(t[2])}
