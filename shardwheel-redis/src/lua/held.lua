-- let_go(lease, held, token, k): k records of claimed batch `token` were just removed (its
-- jobs settled, cancelled or rescheduled). A batch's lease is one entry of the lease set
-- (token -> expiry), its ids the list <held>:<token>, and the held hash counts its records
-- still in the tok hash; when the count reaches 0 the batch is gone: its entry, list and
-- count are deleted, so nothing of it waits for the lease to expire. While the count is
-- positive, the lease's reaper (claim.lua) finds the batch's remaining jobs by its list,
-- each checked against its record (a job revoked and claimed again has another token).
-- Shared by settle.lua, cancel.lua and reschedule.lua (prepended when loaded, scripts.rs).
-- Bound: O(1) calls; O(batch) once, when the batch's list is deleted.
local function let_go(lease, held, token, k)
  if redis.call('HINCRBY', held, token, -k) <= 0 then
    redis.call('HDEL', held, token)
    redis.call('DEL', held .. ':' .. token)
    redis.call('ZREM', lease, token)
  end
end
