-- status.lua: where one job is (read only).
--
-- KEYS[1] due zset   KEYS[2] lease zset (token -> expiry)   KEYS[3] tok hash
-- KEYS[4] dead zset   KEYS[5] att hash   KEYS[6] held hash (token -> records left)
-- ARGV[1] the payload hash that holds the job (the whole key, in the shard's hash slot:
-- `keys::bucket_of`)   ARGV[2] id
--
-- Contract: returns {state, time ms, attempts, payload} with state 1 pending (time: due),
-- 2 claimed (time: its batch's lease expiry), 3 dead (time: when it died), or {0} if
-- unknown.
-- Bound: O(1) calls, O(log N) each.
local id = ARGV[2]
local payload = redis.call('HGET', ARGV[1], id)
if not payload then return {0} end
local attempts = tonumber(redis.call('HGET', KEYS[5], id) or '0')
local score = redis.call('ZSCORE', KEYS[1], id)
if score then return {1, tonumber(score), attempts, payload} end
local rec = redis.call('HGET', KEYS[3], id)
if rec then
  local token, attempt = string.match(rec, '^(%d+):[^:]*:(%d+)')
  score = redis.call('ZSCORE', KEYS[2], token)
  return {2, tonumber(score or '0'), tonumber(attempt), payload}
end
score = redis.call('ZSCORE', KEYS[4], id)
return {3, tonumber(score or '0'), attempts, payload}
