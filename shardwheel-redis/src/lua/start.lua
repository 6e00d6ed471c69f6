#!lua flags=no-writes
-- start.lua: the fenced start of the claimed jobs of one shard that came due at a worker.
--
-- KEYS[1] due zset   KEYS[2] lease zset   KEYS[3] tok hash   KEYS[4] dead zset
-- KEYS[5] att hash
-- ARGV[1] payload hash prefix   ARGV[2] shards   ARGV[3] buckets (ARGV[1..3] are not used
-- here)   ARGV[4] lease ms the jobs were claimed with (claim.lua's ARGV[5])
-- ARGV[5] the earliest and ARGV[6] the latest due time (Unix ms) among the jobs below
-- ARGV[7..] pairs: id, the claim's record of it ("token:due:attempt", as claim.lua wrote
-- it and returned its parts)
--
-- Contract: with now = the server's TIME, a job starts only if it is still the same job
-- under a live lease: its record in the tok hash is the given one (so it was not
-- cancelled, rescheduled, settled or taken back since that claim: a token names one claim),
-- its lease has not expired (lease expiry > now), and its due time is at or before now. Per
-- job the result is 1 start (also on a repeated call), 0 revoked (do not run), 2 not yet due
-- by the server's clock (try again at its due time).
-- Read only (the flag above: the server refuses a write here). It writes nothing, so it is
-- not propagated to the AOF or replicas and costs no fsync. What makes a run "started" is
-- the due time alone: a start can succeed only at or after the due time in the record, so
-- cancel.lua and reschedule.lua, which rewrite the record, count a claim whose due time has
-- come by the server's TIME as possibly started, and one whose due time has not as unstarted
-- (they remove its record, so this check refuses it).
-- A lease ends no sooner than ARGV[4] after its job's due time (claim.lua: max(latest due
-- of the batch, now) + lease; extend.lua only moves it later), and a record exists exactly
-- while its job is in the lease set. So when every job of the call is due (latest <= now)
-- and was due less than a lease ago (now < earliest + lease), which is every call of a
-- worker whose timer fires on time, a job's result is whether its record is the given one:
-- one string comparison (Lua's strings are interned) where reading the due time out of the
-- record with a pattern cost about a microsecond a job, most of this script's time.
-- Otherwise each record's due time is read and the lease set consulted (ZMSCORE, whose
-- scores Redis 7.0 prints with '%.17g') only for the jobs due ARGV[4] or more before now.
-- The bounds are the caller's: a worker computes them from the due times it puts in the
-- records (`claim::record`), and a record that is the given one has that due time.
-- Returns {TIME seconds, TIME microseconds, result, ...}.
-- Bound: O(n log N) for n pairs (the client sends at most 512 a call): two or three redis
-- calls.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[4])
local earliest, latest = tonumber(ARGV[5]), tonumber(ARGV[6])
local ids = {}
for i = 7, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
local out = {tonumber(t[1]), tonumber(t[2])}
if #ids == 0 then return out end
local recs = redis.call('HMGET', KEYS[3], unpack(ids))
if latest <= now and now < earliest + lease then
  for k = 1, #ids do
    if recs[k] == ARGV[6 + 2 * k] then out[2 + k] = 1 else out[2 + k] = 0 end
  end
  return out
end
-- Jobs due long enough ago that their lease may have ended: positions and ids.
local old, old_ids = {}, {}
for k = 1, #ids do
  local rec = recs[k]
  local result = 0
  if rec and rec == ARGV[6 + 2 * k] then
    local at = tonumber(string.match(rec, '^%d+:([^:]*):'))
    if at > now then
      result = 2
    elseif now < at + lease then
      result = 1
    else
      old[#old + 1] = k
      old_ids[#old_ids + 1] = ids[k]
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
