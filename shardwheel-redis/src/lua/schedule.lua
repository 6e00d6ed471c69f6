-- schedule.lua: schedules a batch of jobs of one shard, each idempotent on its id.
--
-- KEYS[1]  due sorted set of the shard ({queue:shard}:due; member id, score due ms)
-- ARGV[1]  prefix of the shard's payload hashes ({queue:shard}:j:), same hash slot
-- ARGV[2]  shard count of the queue        ARGV[3]  payload hashes per shard
-- ARGV[4]  'd': the times below are delays in ms from the server's TIME;
--          'a': they are absolute due times in Unix ms
-- ARGV[5..] triples: id, delay or due ms, payload
--
-- Contract: for each job, if its id already has a payload (pending, claimed or dead), nothing
-- changes and its result is 0; otherwise the payload is stored and the id enters the due
-- set at its due time, result 1. Returns the results in order. Due times are computed from
-- the server's clock only.
-- Bound: O(n log N) for n jobs in the call (the client sends at most 512 a call), n + 2
-- redis calls.
-- bucket(prefix, id, shards, buckets) is prepended from bucket.lua when loaded (scripts.rs).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix, shards, buckets = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local relative = ARGV[4] == 'd'
local out = {}
local zadd = {}
for i = 5, #ARGV, 3 do
  local id = ARGV[i]
  local when = tonumber(ARGV[i + 1])
  if redis.call('HSETNX', bucket(prefix, id, shards, buckets), id, ARGV[i + 2]) == 1 then
    if relative then when = now + when end
    zadd[#zadd + 1] = when
    zadd[#zadd + 1] = id
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
-- One variadic ZADD: fewer calls and a shorter AOF than one per job.
if #zadd > 0 then redis.call('ZADD', KEYS[1], unpack(zadd)) end
return out
