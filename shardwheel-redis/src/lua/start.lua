#!lua flags=no-writes
-- start.lua: the fenced start of the claimed jobs of one shard that came due at a worker.
--
-- KEYS[1] due zset   KEYS[2] lease zset   KEYS[3] tok hash   KEYS[4] dead zset
-- KEYS[5] att hash
-- ARGV[1] payload hash prefix   ARGV[2] shards   ARGV[3] buckets (ARGV[1..3] are not used
-- here)   ARGV[4..] pairs: id, token
--
-- Contract: with now = the server's TIME, a job starts only if it is still the same job
-- under a live lease: its record in the tok hash carries the given token (so it was not
-- cancelled, rescheduled, settled or taken back since that claim), its lease has not
-- expired (lease expiry > now), and its due time is at or before now. Per job the result is
-- 1 start (also on a repeated call), 0 revoked (do not run), 2 not yet due by the server's
-- clock (try again at its due time).
-- Read only (the flag above: the server refuses a write here). It writes nothing, so it is
-- not propagated to the AOF or replicas and costs no fsync. What makes a run "started" is
-- the due time alone: a start can succeed only at or after the due time in the record, so
-- cancel.lua and reschedule.lua, which rewrite the record, count a claim whose due time has
-- come by the server's TIME as possibly started, and one whose due time has not as unstarted
-- (they remove its record, so this check refuses it).
-- Returns {TIME seconds, TIME microseconds, result, ...}.
-- Bound: O(n log N) for n pairs (the client sends at most 512 a call): three redis calls.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = {}
for i = 4, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
local out = {tonumber(t[1]), tonumber(t[2])}
if #ids == 0 then return out end
local recs = redis.call('HMGET', KEYS[3], unpack(ids))
local leases = redis.call('ZMSCORE', KEYS[2], unpack(ids))
for k = 1, #ids do
  local rec, lease = recs[k], leases[k]
  local result = 0
  if rec and lease and tonumber(lease) > now then
    local held, at = string.match(rec, '^(%d+):(%-?%d+):%d+')
    if held == ARGV[3 + 2 * k] then
      if tonumber(at) > now then result = 2 else result = 1 end
    end
  end
  out[#out + 1] = result
end
return out
