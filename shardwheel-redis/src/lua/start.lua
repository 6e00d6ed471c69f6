#!lua flags=no-writes
-- start.lua: the fenced start of the claimed jobs of one shard that came due at a worker.
--
-- KEYS[1] due zset   KEYS[2] lease zset   KEYS[3] tok hash   KEYS[4] dead zset
-- KEYS[5] att hash
-- ARGV[1] payload hash prefix   ARGV[2] shards   ARGV[3] buckets (ARGV[1..3] are not used
-- here)   ARGV[4] lease ms the jobs were claimed with (claim.lua's ARGV[5])
-- ARGV[5..] pairs: id, token
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
-- A lease ends no sooner than ARGV[4] after its job's due time (claim.lua: max(latest due
-- of the batch, now) + lease; extend.lua only moves it later), and a record exists exactly
-- while its job is in the lease set: so the lease set is read (ZMSCORE, whose scores
-- Redis 7.0 prints with '%.17g') only for the jobs due ARGV[4] or more before now: a check
-- costs 11.9k server instructions per job, against 19.5k reading it for every job (callgrind).
-- Returns {TIME seconds, TIME microseconds, result, ...}.
-- Bound: O(n log N) for n pairs (the client sends at most 512 a call): two or three redis
-- calls.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[4])
local ids = {}
for i = 5, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
local out = {tonumber(t[1]), tonumber(t[2])}
if #ids == 0 then return out end
local recs = redis.call('HMGET', KEYS[3], unpack(ids))
-- Jobs due long enough ago that their lease may have ended: positions and ids.
local old, old_ids = {}, {}
for k = 1, #ids do
  local rec = recs[k]
  local result = 0
  if rec then
    local held, at = string.match(rec, '^(%d+):(%-?%d+):')
    if held == ARGV[4 + 2 * k] then
      at = tonumber(at)
      if at > now then
        result = 2
      elseif now < at + lease then
        result = 1
      else
        old[#old + 1] = k
        old_ids[#old_ids + 1] = ids[k]
      end
    end
  end
  out[2 + k] = result
end
if #old > 0 then
  local expiries = redis.call('ZMSCORE', KEYS[2], unpack(old_ids))
  for j = 1, #old do
    local expiry = expiries[j]
    if expiry and tonumber(expiry) > now then out[2 + old[j]] = 1 end
  end
end
return out
