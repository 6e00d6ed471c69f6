-- cancel.lua: cancels one job, whatever its state.
--
-- KEYS[1] due zset   KEYS[2] lease zset   KEYS[3] tok hash   KEYS[4] dead zset
-- KEYS[5] att hash
-- ARGV[1] payload hash prefix   ARGV[2] shards   ARGV[3] buckets   ARGV[4] id
--
-- Contract: the job's payload and every trace of it are deleted. Returns 1 if it was
-- pending, 2 if it was claimed and its start had not been checked (start.lua will refuse it:
-- it never runs), 4 if its run had started (that run goes on, its ack will be refused, no
-- other follows), 3 if it was in the dead set, 0 if the id is unknown.
-- Bound: O(log N).
-- bucket(prefix, id, shards, buckets) is prepended from bucket.lua when loaded (scripts.rs).
local id = ARGV[4]
if redis.call('HDEL', bucket(ARGV[1], id, tonumber(ARGV[2]), tonumber(ARGV[3])), id) == 0 then
  return 0
end
redis.call('HDEL', KEYS[5], id)
if redis.call('ZREM', KEYS[1], id) == 1 then return 1 end
if redis.call('ZREM', KEYS[2], id) == 1 then
  local rec = redis.call('HGET', KEYS[3], id) or ''
  redis.call('HDEL', KEYS[3], id)
  if string.sub(rec, -2) == ':s' then return 4 end
  return 2
end
redis.call('ZREM', KEYS[4], id)
return 3
