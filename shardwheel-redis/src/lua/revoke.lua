-- revoke(lease, tok, held, id): if the job has a claim record (it is claimed), removes it,
-- so that start.lua refuses that claim from now on, marks its batch as revoked (so that
-- start.lua checks the batch's jobs one by one) and lets it go by one (held.lua, which
-- deletes the mark with the batch), and says whether a start of it may already have
-- passed: 2 if its start time (the record's: its due time, or earlier by the claiming
-- worker's check ahead, claim.lua) is still ahead by the server's TIME (start.lua passes
-- only at or after it: none passed), 4 if it has come (one may have). Returns nil,
-- changing nothing, if the job is not claimed.
-- Shared by cancel.lua and reschedule.lua (prepended after held.lua when loaded,
-- scripts.rs).
local function revoke(lease, tok, held, id)
  local rec = redis.call('HGET', tok, id)
  if not rec then return nil end
  redis.call('HDEL', tok, id)
  local token, at = string.match(rec, '^(%d+):([^:]*):')
  redis.call('HSET', held, 'x' .. token, 1)
  let_go(lease, held, token, 1)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if tonumber(at) > now then return 2 end
  return 4
end
