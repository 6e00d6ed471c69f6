-- extend.lua: extends the lease of one claimed job's batch, fenced by the job's token.
--
-- KEYS[1] due zset   KEYS[2] lease zset (token -> expiry)   KEYS[3] tok hash
-- KEYS[4] dead zset   KEYS[5] att hash   KEYS[6] held hash (token -> records left)
-- ARGV[1] id   ARGV[2] token   ARGV[3] lease ms
--
-- Contract: if the job's current token (tok hash) is ARGV[2], i.e. the caller's lease is
-- still the live one, the lease expiry of its batch (one entry a claim, token -> expiry)
-- becomes max(expiry, now + ARGV[3]) by the server's TIME and the result is 1; otherwise
-- (reaped, cancelled, rescheduled, settled) nothing changes and the result is 0. It never
-- revives a lease that was taken back. The batch's other jobs, held by the same worker,
-- keep the longer lease too: a live worker's jobs are not taken back sooner for it, and if
-- that worker dies they come back when the extended lease ends.
-- Bound: O(log N), four redis calls.
local id = ARGV[1]
local rec = redis.call('HGET', KEYS[3], id)
if not rec or string.match(rec, '^(%d+):') ~= ARGV[2] then return 0 end
local expiry = redis.call('ZSCORE', KEYS[2], ARGV[2])
if not expiry then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local until_ms = math.max(tonumber(expiry), now + tonumber(ARGV[3]))
redis.call('ZADD', KEYS[2], 'XX', string.format('%d', until_ms), ARGV[2])
return 1
