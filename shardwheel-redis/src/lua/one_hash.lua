-- one_hash.lua: whether the jobs of a call, more than one, all name one payload hash: the
-- hash numbers at ARGV[first], ARGV[first + 4], ... are one (always so in a queue of one
-- hash a shard, `QueueBuilder::buckets(1)`). Then a script takes their payloads with one
-- command for them all rather than one a job. Prepended to schedule.lua and settle.lua.
local function one_hash(first)
  if #ARGV < first + 4 then return false end
  for i = first + 4, #ARGV, 4 do
    if ARGV[i] ~= ARGV[first] then return false end
  end
  return true
end
