-- The payload hash that holds an id: the same function as `keys::hash` in Rust (h*31 + byte
-- mod 2^32, then h xor h>>15), shard = h mod shards, bucket = floor(h / shards) mod buckets.
local function bucket(prefix, id, shards, buckets)
  local h = 0
  for i = 1, #id do h = (h * 31 + string.byte(id, i)) % 4294967296 end
  h = bit.bxor(h, bit.rshift(h, 15))
  if h < 0 then h = h + 4294967296 end
  return prefix .. (math.floor(h / shards) % buckets)
end
