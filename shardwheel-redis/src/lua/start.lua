#!lua flags=no-writes
-- start.lua: the fenced start of claimed jobs that came due at a worker, from one shard or
-- several.
--
-- KEYS pairs, one per shard of the call: the shard's tok hash, its lease zset (token ->
-- expiry of a claimed batch)
-- ARGV[1] lease ms the jobs were claimed with (claim.lua's ARGV[2])
-- ARGV[2] the earliest and ARGV[3] the latest due time (Unix ms) among the jobs below
-- ARGV[4..] for each shard in KEYS' order: its job count n, then n pairs: id, the claim's
-- record of it ("token:due:attempt", as claim.lua wrote it and returned its parts)
--
-- Contract: with now = the server's TIME, a job starts only if it is still the same job
-- under a live lease: its record in its shard's tok hash is the given one (so it was not
-- cancelled, rescheduled, settled or taken back since that claim: a token names one claim),
-- its lease has not expired (lease expiry > now), and its due time is at or before now. Per
-- job, in the call's order, the result is 1 start (also on a repeated call), 0 revoked (do
-- not run), 2 not yet due by the server's clock (try again at its due time).
-- Read only (the flag above: the server refuses a write here). It writes nothing, so it is
-- not propagated to the AOF or replicas and costs no fsync. What makes a run "started" is
-- the due time alone: a start can succeed only at or after the due time in the record, so
-- cancel.lua and reschedule.lua, which rewrite the record, count a claim whose due time has
-- come by the server's TIME as possibly started, and one whose due time has not as unstarted
-- (they remove its record, so this check refuses it).
-- A lease ends no sooner than ARGV[1] after its job's due time (claim.lua: max(latest due
-- of the batch, now) + lease; extend.lua only moves it later), and a record exists exactly
-- while its batch's lease is in the lease set. So when every job of the call is due (latest
-- <= now) and was due less than a lease ago (now < earliest + lease), which is every call
-- of a worker whose timer fires on time, a job's result is whether its record is the given
-- one: one string comparison (Lua's strings are interned) where reading the due time out of
-- the record with a pattern cost about a microsecond a job, most of the per-job time.
-- Otherwise each record's due time is read and the lease set consulted (ZMSCORE of the
-- records' tokens, whose scores Redis 7.0 prints with '%.17g') only for the jobs due
-- ARGV[1] or more before now.
-- The bounds are the caller's: a worker computes them from the due times it puts in the
-- records (`claim::Record`), and a record that is the given one has that due time.
-- Several shards in one call (a single server; a cluster refuses keys of several slots):
-- a call costs the server about 20 us beside its jobs' 2 us each, and a worker's instant
-- usually holds a few jobs spread over many shards.
-- Returns {TIME seconds, TIME microseconds, result, ...}.
-- Bound: O(n log N) for n jobs (the client sends at most 512 a call): one HMGET per shard,
-- one ZMSCORE more for a shard with jobs due a lease or more ago.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local fast = tonumber(ARGV[3]) <= now and now < tonumber(ARGV[2]) + lease
local out = {tonumber(t[1]), tonumber(t[2])}
local o = 2
local a = 4
for g = 2, #KEYS, 2 do
  local n = tonumber(ARGV[a])
  a = a + 1
  if n > 0 then
    local ids = {}
    for k = 1, n do ids[k] = ARGV[a + 2 * k - 2] end
    local recs = redis.call('HMGET', KEYS[g - 1], unpack(ids))
    if fast then
      for k = 1, n do
        if recs[k] == ARGV[a + 2 * k - 1] then out[o + k] = 1 else out[o + k] = 0 end
      end
    else
      -- Jobs due long enough ago that their lease may have ended: positions and tokens.
      local old, old_tokens = {}, {}
      for k = 1, n do
        local rec = recs[k]
        local result = 0
        if rec == ARGV[a + 2 * k - 1] then
          local token, at = string.match(rec, '^(%d+):([^:]*):')
          at = tonumber(at)
          if at > now then
            result = 2
          elseif now < at + lease then
            result = 1
          else
            old[#old + 1] = o + k
            old_tokens[#old_tokens + 1] = token
          end
        end
        out[o + k] = result
      end
      if #old > 0 then
        local expiries = redis.call('ZMSCORE', KEYS[g], unpack(old_tokens))
        for j = 1, #old do
          local expiry = expiries[j]
          if expiry and tonumber(expiry) > now then out[old[j]] = 1 end
        end
      end
    end
    o = o + n
    a = a + 2 * n
  end
end
return out
