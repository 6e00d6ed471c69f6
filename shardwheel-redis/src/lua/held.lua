-- held.lua: how a claimed batch ends. A batch's lease is one entry of the lease set
-- (token -> expiry), its ids the list <held>:<token>, and the held hash counts its records
-- still in the tok hash (field token) and marks it once a job of it was revoked (field
-- "x" .. token, revoke.lua: start.lua then checks the batch's jobs one by one). While the
-- count is positive, the lease's reaper (claim.lua) finds the batch's remaining jobs by its
-- list, each checked against its record (a job revoked and claimed again has another
-- token).
-- Prepended whole when loaded (scripts.rs) to settle.lua, cancel.lua and reschedule.lua,
-- which call let_go, and to claim.lua, which calls drop_batch.
-- Bound: O(1) calls; O(batch) once, when the batch's list is deleted.

-- drop_batch(lease, held, token): deletes batch `token`'s lease entry, count, mark and
-- list; by let_go when its last record goes, by claim.lua's reaper once it took its jobs
-- back.
local function drop_batch(lease, held, token)
  redis.call('ZREM', lease, token)
  redis.call('HDEL', held, token, 'x' .. token)
  redis.call('DEL', held .. ':' .. token)
end

-- let_go(lease, held, token, k): k records of batch `token` were just removed (its jobs
-- settled, cancelled or rescheduled); when its count reaches 0 the batch is dropped, so
-- nothing of it waits for the lease to expire.
local function let_go(lease, held, token, k)
  if redis.call('HINCRBY', held, token, -k) <= 0 then drop_batch(lease, held, token) end
end
