-- The payload hash that holds an id: the same function as `keys::hash` in Rust (h*31 + byte
-- mod 2^32, then h xor h>>15), shard = h mod shards, bucket = floor(h / shards) mod buckets.
-- The library functions are locals: the claim calls this once per claimed job.
local byte, floor, bxor, rshift = string.byte, math.floor, bit.bxor, bit.rshift
local function bucket(prefix, id, shards, buckets)
  local h = 0
  for i = 1, #id do h = (h * 31 + byte(id, i)) % 4294967296 end
  h = bxor(h, rshift(h, 15))
  if h < 0 then h = h + 4294967296 end
  return prefix .. (floor(h / shards) % buckets)
end
