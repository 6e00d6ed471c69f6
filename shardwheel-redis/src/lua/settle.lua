-- settle.lua: acks, fails or releases claimed jobs, each fenced by its token.
--
-- KEYS[1] due zset   KEYS[2] lease zset (token -> expiry)   KEYS[3] tok hash
-- KEYS[4] dead zset   KEYS[5] att hash   KEYS[6] held hash (token -> records left)
-- ARGV[1] payload hash prefix   ARGV[2] attempts before the dead-letter set
-- ARGV[3] backoff base ms   ARGV[4] backoff cap ms
-- ARGV[5] the claiming worker's check ahead ms (claim.lua's ARGV[8])
-- ARGV[6..] quadruples: id, token, action ('a' ack, 'f' failed, 'r' release unrun, 'd'
-- dead-letter now: an entry the worker cannot hand to a handler), the
-- id's payload hash (its number under the prefix, from `keys::bucket_of`)
--
-- Contract: an action applies only if the job's current token (tok hash) equals the one
-- given, i.e. the caller's lease is still the live one: a worker whose lease expired and was
-- reaped, or whose job was cancelled or rescheduled meanwhile, is refused (result 0).
-- ack: the job is deleted everywhere, result 1. failed: back to due at now + min(base *
-- 2^(attempt-1), cap) by the server's TIME, result 1, or to the dead set once it used its
-- attempts, result 2. release: back to due at its own due time, the attempt not counted,
-- result 1 (the record holds its start time: its due time less the check ahead).
-- dead-letter now: to the dead set, result 2.
-- Each settled job's record goes; its batch is let go by one (held.lua: one HINCRBY a
-- batch of the call, not a job, and the batch's lease entry and list go with its last job).
-- Bound: O(n log N) for n quadruples (the client sends at most 512 a call); an ack costs one
-- redis call (its payload) plus a few per batch, and no id hashing in Lua; of its record it
-- reads the token only (no number made of the due time or the attempt). When every job of
-- the call names one payload hash (a queue of one hash a shard), the acked payloads go with
-- one HDEL for them all.
-- let_go and one_hash are prepended from held.lua and one_hash.lua (scripts.rs).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix = ARGV[1]
local max_attempts, base, cap = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local check_ahead = tonumber(ARGV[5])
local ids = {}
for i = 6, #ARGV, 4 do ids[#ids + 1] = ARGV[i] end
local out = {}
if #ids == 0 then return out end
local recs = redis.call('HMGET', KEYS[3], unpack(ids))
local has_att = redis.call('EXISTS', KEYS[5]) == 1
local settled, seen, batches = {}, {}, {}
-- The acked jobs' payloads, if they are all in one hash: then they go with one HDEL.
local shared = one_hash(9)
local acked = {}
for k = 1, #ids do
  local i = 6 + (k - 1) * 4
  local id, token, action = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local rec = recs[k]
  local result = 0
  if rec and not seen[id] and string.match(rec, '^(%d+):') == token then
    seen[id] = true
    settled[#settled + 1] = id
    batches[token] = (batches[token] or 0) + 1
    if action == 'a' then
      if has_att then redis.call('HDEL', KEYS[5], id) end
      if shared then
        acked[#acked + 1] = id
      else
        redis.call('HDEL', prefix .. ARGV[i + 3], id)
      end
      result = 1
    else
      -- The record's start time (text, as claim.lua wrote it) and attempt.
      local at, attempt = string.match(rec, '^%d+:([^:]*):(%d+)')
      attempt = tonumber(attempt)
      if action == 'f' or action == 'd' then
        redis.call('HSET', KEYS[5], id, attempt)
        if action == 'd' or attempt >= max_attempts then
          redis.call('ZADD', KEYS[4], now, id)
          result = 2
        else
          redis.call('ZADD', KEYS[1], now + math.min(base * 2 ^ (attempt - 1), cap), id)
          result = 1
        end
      else
        if attempt <= 1 then
          if has_att then redis.call('HDEL', KEYS[5], id) end
        else
          redis.call('HSET', KEYS[5], id, attempt - 1)
        end
        if check_ahead > 0 then at = tonumber(at) + check_ahead end
        redis.call('ZADD', KEYS[1], at, id)
        result = 1
      end
    end
  end
  out[#out + 1] = result
end
if #acked > 0 then redis.call('HDEL', prefix .. ARGV[9], unpack(acked)) end
-- The settled records go together: one call; then one let_go a batch.
if #settled > 0 then
  redis.call('HDEL', KEYS[3], unpack(settled))
  for token, k in pairs(batches) do let_go(KEYS[2], KEYS[6], token, k) end
end
return out
