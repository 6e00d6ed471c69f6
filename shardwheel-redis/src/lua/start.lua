-- start.lua: the fenced start of the claimed jobs of one shard that came due at a worker.
--
-- KEYS[1] due zset   KEYS[2] lease zset   KEYS[3] tok hash   KEYS[4] dead zset
-- KEYS[5] att hash
-- ARGV[1] payload hash prefix   ARGV[2] shards   ARGV[3] buckets (ARGV[1..3] are not used
-- here)   ARGV[4..] pairs: id, token
--
-- Contract: with now = the server's TIME, a job starts only if it is still the same job:
-- its record in the tok hash carries the given token (so it was not cancelled, rescheduled,
-- settled or taken back since that claim) and its due time is at or before now. A started
-- job's record is marked (":s" appended), which lets cancel and reschedule tell a run that
-- began from a claim that did not. Per job the result is 1 start (also if this token had
-- already started it: a repeated call), 0 revoked (do not run), 2 not yet due by the
-- server's clock (try again at its due time).
-- Returns {TIME seconds, TIME microseconds, result, ...}.
-- Bound: O(n) for n pairs (the client sends at most 512 a call): two redis calls.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = {}
for i = 4, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
local out = {tonumber(t[1]), tonumber(t[2])}
if #ids == 0 then return out end
local recs = redis.call('HMGET', KEYS[3], unpack(ids))
local marks = {}
for k = 1, #ids do
  local rec = recs[k]
  local result = 0
  if rec then
    local held, at = string.match(rec, '^(%d+):(%-?%d+):%d+')
    if held == ARGV[3 + 2 * k] then
      if tonumber(at) > now then
        result = 2
      else
        result = 1
        if string.sub(rec, -2) ~= ':s' then
          marks[#marks + 1] = ids[k]
          marks[#marks + 1] = rec .. ':s'
        end
      end
    end
  end
  out[#out + 1] = result
end
if #marks > 0 then redis.call('HSET', KEYS[3], unpack(marks)) end
return out
