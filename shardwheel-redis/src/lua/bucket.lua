-- The payload hash that holds an id: the same function as `keys::hash` in Rust (h*31 + byte
-- mod 2^32, then h xor h>>15), shard = h mod shards, bucket = floor(h / shards) mod buckets.
-- The library functions are locals: the claim calls this once per claimed job. The number
-- is joined as text made with '%d': joining a Lua number prints it with '%.14g', glibc's
-- exact float printing, several times the cost.
local byte, floor, bxor, rshift, format = string.byte, math.floor, bit.bxor, bit.rshift, string.format
local function bucket(prefix, id, shards, buckets)
  local h = 0
  for i = 1, #id do h = (h * 31 + byte(id, i)) % 4294967296 end
  h = bxor(h, rshift(h, 15))
  if h < 0 then h = h + 4294967296 end
  return prefix .. format('%d', floor(h / shards) % buckets)
end
