-- revoke(tok, id): removes the claim record of a job just taken out of the lease set, so
-- that start.lua refuses that claim from now on, and says whether a start of it may
-- already have passed: 2 if its due time is still ahead by the server's TIME (start.lua
-- passes only at or after it: none passed), 4 if it has come (one may have).
-- Shared by cancel.lua and reschedule.lua (prepended when loaded, scripts.rs).
local function revoke(tok, id)
  local rec = redis.call('HGET', tok, id)
  if not rec then return 2 end
  redis.call('HDEL', tok, id)
  local at = tonumber(string.match(rec, '^%d+:([^:]*):'))
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if at and at > now then return 2 end
  return 4
end
