-- cancel.lua: cancels one job, whatever its state.
--
-- KEYS[1] due zset   KEYS[2] lease zset (token -> expiry)   KEYS[3] tok hash
-- KEYS[4] dead zset   KEYS[5] att hash   KEYS[6] held hash (token -> records left)
-- ARGV[1] the payload hash that holds the job (the whole key, in the shard's hash slot:
-- `keys::bucket_of`)   ARGV[2] id
--
-- Contract: the job's payload and every trace of it are deleted. Returns 1 if it was
-- pending, 3 if it was in the dead set, 0 if the id is unknown. A claimed job's record
-- (token) is removed and its batch let go by one (held.lua), so every later start check
-- (start.lua) refuses its claim; whether a start check may already have passed is told by
-- its claim's start time (its due time, or earlier by the worker's check ahead: revoke.lua)
-- against the server's TIME, since start.lua passes only at or after it: 2 if that time is
-- still ahead (no start passed: it never runs), 4 if it has come (its run may have
-- started: such a run goes on, its ack is refused, no other follows; a start check not
-- yet made is refused).
-- Bound: O(log N).
-- let_go and revoke are prepended from held.lua and revoke.lua when loaded (scripts.rs).
local id = ARGV[2]
if redis.call('HDEL', ARGV[1], id) == 0 then return 0 end
redis.call('HDEL', KEYS[5], id)
if redis.call('ZREM', KEYS[1], id) == 1 then return 1 end
local was = revoke(KEYS[2], KEYS[3], KEYS[6], id)
if was then return was end
redis.call('ZREM', KEYS[4], id)
return 3
