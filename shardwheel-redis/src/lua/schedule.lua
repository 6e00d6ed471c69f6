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
-- Bound: O(n log N) for n jobs in the call (the client sends at most 512 a call), n + 2
-- redis calls. The work per job is kept to the HSETNX and a share of one ZADD: the client
-- computes the payload hash's number and sends the jobs sorted by time, the due times go to
-- ZADD as text made with '%d' (Redis 7.0 turns a Lua number argument into text with
-- '%.17g', glibc's exact float printing: a tenth of the script's server instructions under
-- callgrind), and the reply names only the repeated ids rather than one result per job.
-- Per job it costs the server what a bare HSET + ZADD script costs (the bench's floor):
-- the same instructions under callgrind with Lua numbers, 4 % fewer with '%d'.
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
for i = 5, #ARGV, 4 do
  local id = ARGV[i]
  if call('HSETNX', prefix .. ARGV[i + 2], id, ARGV[i + 3]) == 1 then
    local at = tonumber(ARGV[i + 1])
    if relative then at = now + at end
    if at <= soon then wake = true end
    zadd[n + 1] = format('%d', at)
    zadd[n + 2] = id
    n = n + 2
  else
    old[#old + 1] = (i - 5) / 4
  end
end
-- One variadic ZADD: fewer calls and a shorter AOF than one per job.
if n > 0 then call('ZADD', KEYS[1], unpack(zadd)) end
if wake then redis.pcall('PUBLISH', ARGV[3], KEYS[1]) end
return old
