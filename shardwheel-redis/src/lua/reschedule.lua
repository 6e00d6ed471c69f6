-- reschedule.lua: moves one job to a new due time, whatever its state.
--
-- KEYS[1] due zset   KEYS[2] lease zset (token -> expiry)   KEYS[3] tok hash
-- KEYS[4] dead zset   KEYS[5] att hash   KEYS[6] held hash (token -> records left)
-- ARGV[1] the payload hash that holds the job (the whole key, in the shard's hash slot:
-- `keys::bucket_of`)   ARGV[2] id
-- ARGV[3] 'd' (ARGV[4] is a delay in ms from the server's TIME) or 'a' (Unix ms)
-- ARGV[4] the delay or due time   ARGV[5] new payload, or absent to keep it
--
-- Contract: if the id is unknown, returns 0 and changes nothing. Otherwise the job enters
-- the due set at the new time with its attempts reset, and the result says where it was:
-- 1 pending, 3 dead (revived), or claimed: its claim is revoked (its record removed, so
-- start.lua refuses it from now on and the job runs at its new time under a new claim),
-- and as in cancel.lua, 2 if the claim's start time was still ahead by the server's TIME (no
-- start passed: the job runs only at its new time), 4 if it had come (a run may have
-- started: it goes on, its ack is refused; the job runs again at its new time).
-- Bound: O(log N).
-- let_go and revoke are prepended from held.lua and revoke.lua when loaded (scripts.rs).
local hash, id = ARGV[1], ARGV[2]
if redis.call('HEXISTS', hash, id) == 0 then return 0 end
if ARGV[5] then redis.call('HSET', hash, id, ARGV[5]) end
local when = tonumber(ARGV[4])
if ARGV[3] == 'd' then
  local t = redis.call('TIME')
  when = when + tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
redis.call('HDEL', KEYS[5], id)
local was = 1
if redis.call('ZSCORE', KEYS[1], id) == false then
  was = revoke(KEYS[2], KEYS[3], KEYS[6], id)
  if not was then
    redis.call('ZREM', KEYS[4], id)
    was = 3
  end
end
redis.call('ZADD', KEYS[1], when, id)
return was
