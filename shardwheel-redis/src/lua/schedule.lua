-- schedule.lua: schedules a batch of jobs of one shard, each idempotent on its id.
--
-- KEYS[1]  due sorted set of the shard ({queue:shard}:due; member id, score due ms)
-- ARGV[1]  prefix of the shard's payload hashes ({queue:shard}:j:), same hash slot
-- ARGV[2]  'd': the times below are delays in ms from the server's TIME;
--          'a': they are absolute due times in Unix ms
-- ARGV[3]  the queue's wake-up channel   ARGV[4] hint horizon ms
-- ARGV[5..] quadruples: id, delay or due ms, the id's payload hash (its number under the
--          prefix, from `keys::bucket_of`: the server never hashes an id), payload
--
-- Contract: for each job, if its id already has a payload (pending, claimed or dead), nothing
-- changes; otherwise the payload is stored and the id enters the due set at its due time.
-- Returns the positions (0-based, in the call's order) of the jobs not stored: an empty
-- array when all are new. Due times are computed from the server's clock only. If a stored
-- job is due within ARGV[4] ms, one message goes to the wake-up channel, a hint that lets a
-- waiting worker claim it before its next poll; nothing depends on it being heard, and a
-- refused PUBLISH (an ACL) does not fail the call.
-- Bound: O(n log N) for n jobs in the call (the client sends at most 512 a call). The work
-- per job is kept to its payload's store and a share of one ZADD: the client computes the
-- payload hash's number and sends the jobs sorted by time, the due times go to ZADD as text
-- made with '%d' (Redis 7.0 turns a Lua number argument into text with '%.17g', glibc's
-- exact float printing: a tenth of the script's server instructions under callgrind), and
-- the reply names only the repeated ids rather than one result per job. Jobs spread over
-- many hashes (the default: small hashes, listpacks) are stored with one HSETNX each, n + 2
-- redis calls, which per job costs the server about what a bare HSET + ZADD script does
-- (the bench's floor). Jobs that all name one hash (a queue of one hash a shard,
-- `QueueBuilder::buckets(1)`) are looked up with one HMGET and stored with one variadic
-- HSET, 4 redis calls: about three quarters of the server time a job (on a scratch
-- redis-server, a million jobs in calls of 512: 4.2-4.3 us of CPU a job against 5.9-6.1
-- with an HSETNX a job into 1,024 hashes a shard, and 5.6-5.7 for the floor).
-- one_hash is prepended from one_hash.lua when loaded (scripts.rs).
local call, format = redis.call, string.format
local t = call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix = ARGV[1]
local relative = ARGV[2] == 'd'
local soon = now + tonumber(ARGV[4])
local wake = false
local old = {}
local zadd = {}
local n = 0
-- The due time of the job at ARGV[i], stored: into the ZADD's arguments.
local function enter(i)
  local at = tonumber(ARGV[i + 1])
  if relative then at = now + at end
  if at <= soon then wake = true end
  zadd[n + 1] = format('%d', at)
  zadd[n + 2] = ARGV[i]
  n = n + 2
end
if one_hash(7) then
  local ids = {}
  for i = 5, #ARGV, 4 do ids[#ids + 1] = ARGV[i] end
  local key = prefix .. ARGV[7]
  local stored = call('HMGET', key, unpack(ids))
  local hset, seen = {}, {}
  for k = 1, #ids do
    local i = 4 * k + 1
    if stored[k] or seen[ids[k]] then
      old[#old + 1] = k - 1
    else
      seen[ids[k]] = true
      hset[#hset + 1] = ids[k]
      hset[#hset + 1] = ARGV[i + 3]
      enter(i)
    end
  end
  if n > 0 then call('HSET', key, unpack(hset)) end
else
  for i = 5, #ARGV, 4 do
    if call('HSETNX', prefix .. ARGV[i + 2], ARGV[i], ARGV[i + 3]) == 1 then
      enter(i)
    else
      old[#old + 1] = (i - 5) / 4
    end
  end
end
-- One variadic ZADD: fewer calls and a shorter AOF than one per job.
if n > 0 then call('ZADD', KEYS[1], unpack(zadd)) end
if wake then redis.pcall('PUBLISH', ARGV[3], KEYS[1]) end
return old
