#!lua flags=no-writes
-- start.lua: the fenced start of claimed jobs that came due at a worker, from one shard or
-- several.
--
-- KEYS per shard of the call: the shard's tok hash, its lease zset (token -> expiry of a
-- claimed batch), then, if the shard's jobs come by batch (below), its held hash (token ->
-- the batch's records left; "x" .. token present once a job of the batch was revoked:
-- held.lua, revoke.lua)
-- ARGV[1] lease ms the jobs were claimed with (claim.lua's ARGV[2])
-- ARGV[2] the earliest and ARGV[3] the latest due time (Unix ms) among the jobs below
-- ARGV[4..] for each shard in KEYS' order, either its job count n >= 0, then n pairs: id,
-- the claim's record of it ("token:due:attempt", as claim.lua wrote it and returned its
-- parts); or by batch: minus its count of batches b, b pairs: a batch's token, its job
-- count, then the jobs' pairs, a batch's next to each other in the same order
--
-- A record's time is the job's start time (claim.lua): its due time, or earlier by the
-- claiming worker's check ahead, which then holds the job until its due time itself;
-- "due time" below means that start time.
-- Contract: with now = the server's TIME, a job starts only if it is still the same job
-- under a live lease: its record in its shard's tok hash is the given one (so it was not
-- cancelled, rescheduled, settled or taken back since that claim: a token names one claim),
-- its lease has not expired (lease expiry > now), and its due time is at or before now. Per
-- job, in the call's order, the result is 1 start (also on a repeated call), 0 revoked (do
-- not run), 2 not yet due by the server's clock (try again at its due time). The caller
-- passes only the ids and records its claims returned, and never a job it settled itself.
-- Read only (the flag above: the server refuses a write here). It writes nothing, so it is
-- not propagated to the AOF or replicas and costs no fsync. What makes a run "started" is
-- the due time alone: a start can succeed only at or after the due time in the record, so
-- cancel.lua and reschedule.lua, which rewrite the record, count a claim whose due time
-- has come by the server's TIME as possibly started, and one whose due time has not as
-- unstarted (they remove its record, so this check refuses it).
-- A lease ends no sooner than ARGV[1] after its job's due time (claim.lua: max(latest due
-- of the batch, now) + lease; extend.lua only moves it later), and a record exists exactly
-- while its batch's lease is in the lease set. So when every job of the call is due (latest
-- <= now) and was due less than a lease ago (now < earliest + lease), which is every call
-- of a worker whose timer fires on time, no lease of the call has expired or been reaped,
-- and a job's result is whether its record is the given one. Then a batch decides for all
-- its jobs at once: its records can go only by a revoke (which marks the batch), by the
-- holder's own settle (whose jobs the caller does not pass) or by the reaper (which drops
-- the batch's count), so a batch whose count is there and whose mark is not still holds
-- every record of its claim the caller passes: one HMGET of two fields a batch, where a
-- burst's calls (hundreds of jobs of a batch) cost the server half the instructions of
-- reading every job's record (the caller names batches only where that pays:
-- `start::WHOLE`). A batch that is marked or gone, and every shard's jobs not named by
-- batch or in a call not on time, are checked job by job: their records (one HMGET), where
-- on time a job's result is one string comparison (Lua's strings are interned); otherwise
-- each record's due time is read and the lease set consulted (ZMSCORE of the records'
-- tokens, whose scores Redis 7.0 prints with '%.17g') only for the jobs due ARGV[1] or more
-- before now.
-- The bounds are the caller's: a worker computes them from the due times it puts in the
-- records (`claim::Record`), and a record that is the given one has that due time.
-- Several shards in one call (a single server; a cluster refuses keys of several slots):
-- a call costs the server about 20 us beside its jobs', and a worker's instant usually
-- holds a few jobs spread over many shards.
-- Returns {TIME seconds, TIME microseconds, result, ...}.
-- Bound: O(n log N) for n jobs (the client sends at most 512 a call): one HMGET per shard,
-- one more a batch checked job by job, one ZMSCORE more for a shard with jobs due a lease
-- or more ago.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local fast = tonumber(ARGV[3]) <= now and now < tonumber(ARGV[2]) + lease
local out = {tonumber(t[1]), tonumber(t[2])}

-- Job by job: the n jobs whose pairs (id, record) start at ARGV[a], results from o + 1.
local function each(tok, lease_set, a, o, n)
  local ids = {}
  for k = 1, n do ids[k] = ARGV[a + 2 * k - 2] end
  local recs = redis.call('HMGET', tok, unpack(ids))
  if fast then
    for k = 1, n do
      if recs[k] == ARGV[a + 2 * k - 1] then out[o + k] = 1 else out[o + k] = 0 end
    end
    return
  end
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
    local expiries = redis.call('ZMSCORE', lease_set, unpack(old_tokens))
    for j = 1, #old do
      local expiry = expiries[j]
      if expiry and tonumber(expiry) > now then out[old[j]] = 1 end
    end
  end
end

local o = 2
local a = 4
local g = 1
local nkeys = #KEYS
while g <= nkeys do
  local tok, lease_set = KEYS[g], KEYS[g + 1]
  g = g + 2
  local h = tonumber(ARGV[a])
  a = a + 1
  if h >= 0 then
    if h > 0 then each(tok, lease_set, a, o, h) end
    o = o + h
    a = a + 2 * h
  else
    -- By batch: b (token, job count) pairs, then the jobs' pairs, a batch's together.
    local b = -h
    local held = KEYS[g]
    g = g + 1
    local fields, sizes = {}, {}
    local n = 0
    for i = 1, b do
      local token = ARGV[a + 2 * i - 2]
      fields[2 * i - 1] = token
      fields[2 * i] = 'x' .. token
      sizes[i] = tonumber(ARGV[a + 2 * i - 1])
      n = n + sizes[i]
    end
    a = a + 2 * b
    if fast then
      local marks = redis.call('HMGET', held, unpack(fields))
      for i = 1, b do
        local size = sizes[i]
        if marks[2 * i - 1] and not marks[2 * i] then
          for k = 1, size do out[o + k] = 1 end
        else
          each(tok, lease_set, a, o, size)
        end
        a = a + 2 * size
        o = o + size
      end
    else
      each(tok, lease_set, a, o, n)
      a = a + 2 * n
      o = o + n
    end
  end
end
return out
