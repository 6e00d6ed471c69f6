//! Where a job lives: its shard and the Redis keys of that shard.
//!
//! A queue `q` with `S` shards keeps, for each shard `s`, keys that all carry the hash tag
//! `{q:s}`, so that a shard's keys sit in one Redis Cluster slot and each Lua script touches
//! one slot only; shards spread over the cluster's nodes. A job's id is hashed once, by the
//! client (the function below; no script hashes an id, each is given the payload hash):
//! `h mod S` picks the shard, `(h / S) mod B` one of the shard's `B` payload hashes. Spreading
//! the payloads over many small hashes keeps each one in Redis's compact listpack encoding
//! (up to `hash-max-listpack-entries` fields, 512 by default, and values of up to
//! `hash-max-listpack-value` bytes, 64), which is what holds a pending job near 110 bytes of
//! server memory rather than 180 for one big hash per shard.

/// The id hash: `h * 31 + byte` modulo 2^32 over the id's bytes, then `h ^ (h >> 15)` so
/// that the low bits (the shard) depend on every byte.
pub(crate) fn hash(id: &[u8]) -> u32 {
    let mut h: u32 = 0;
    for &byte in id {
        h = h.wrapping_mul(31).wrapping_add(u32::from(byte));
    }
    h ^ (h >> 15)
}

/// The shard of an id in a queue of `shards` shards.
pub(crate) fn shard_of(id: &[u8], shards: u32) -> u32 {
    hash(id) % shards
}

/// The payload hash of an id (its number under the shard's prefix): the one definition, by
/// which the client names a job's payload hash to every script.
pub(crate) fn bucket_of(id: &[u8], shards: u32, buckets: u32) -> u32 {
    (hash(id) / shards) % buckets
}

/// The whole key of a payload hash (`{q:s}:j:<bucket>`), printed straight into a script's
/// argument (no `String` made of it).
pub(crate) struct PayloadKey<'a> {
    prefix: &'a str,
    bucket: u32,
}

impl std::fmt::Display for PayloadKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.prefix, self.bucket)
    }
}

impl redis::ToRedisArgs for PayloadKey<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        out.write_arg_fmt(self);
    }
}

/// One argument: a key of a command (`HGET`).
impl redis::ToSingleRedisArg for PayloadKey<'_> {}

/// The key names of one shard, in the order the scripts take them as `KEYS`.
#[derive(Clone, Debug)]
pub(crate) struct ShardKeys {
    /// Sorted set: id -> due time (Unix ms, server clock).
    pub due: String,
    /// Sorted set: token -> lease expiry (Unix ms, server clock) of a claimed batch: one
    /// entry a claim, not a job (`claim.lua`).
    pub lease: String,
    /// Hash: id -> "token:due:attempt" of a claimed job; a job is claimed exactly while it
    /// has a record here.
    pub tok: String,
    /// Sorted set: id -> time it was dead-lettered.
    pub dead: String,
    /// Counter of the shard's fencing tokens.
    pub seq: String,
    /// Hash: id -> attempts made, for jobs tried and not acknowledged.
    pub att: String,
    /// Hash: token -> how many jobs of that claimed batch still have their record, and
    /// `x<token>` -> 1 once a job of it was revoked (`lua/revoke.lua`); the batch's ids are
    /// the list `<held>:<token>` (`claim.lua`, `lua/held.lua`).
    pub held: String,
    /// Prefix of the payload hashes (`{q:s}:j:<bucket>`).
    pub payload_prefix: String,
}

impl ShardKeys {
    pub(crate) fn new(queue: &str, shard: u32) -> Self {
        let tag = format!("{{{queue}:{shard}}}");
        ShardKeys {
            due: format!("{tag}:due"),
            lease: format!("{tag}:lease"),
            tok: format!("{tag}:tok"),
            dead: format!("{tag}:dead"),
            seq: format!("{tag}:seq"),
            att: format!("{tag}:att"),
            held: format!("{tag}:held"),
            payload_prefix: format!("{tag}:j:"),
        }
    }

    /// The key of payload hash `bucket` of this shard (see [`bucket_of`]).
    pub(crate) fn payload(&self, bucket: u32) -> PayloadKey<'_> {
        PayloadKey {
            prefix: &self.payload_prefix,
            bucket,
        }
    }

    /// The `KEYS` of `claim.lua`, in its order: all of the shard's keys but its payload
    /// hashes.
    pub(crate) fn claim_keys(&self) -> [&str; 7] {
        [
            &self.due,
            &self.lease,
            &self.tok,
            &self.dead,
            &self.seq,
            &self.att,
            &self.held,
        ]
        .map(String::as_str)
    }

    /// A call of `script` with the `KEYS` the scripts that settle or change jobs
    /// take: due, lease, tok, dead, att, held (`claim` takes `seq` among its keys, and
    /// builds its own).
    pub(crate) fn invoke(&self, script: &'static redis::Script) -> crate::scripts::Call {
        let keys = [
            &self.due,
            &self.lease,
            &self.tok,
            &self.dead,
            &self.att,
            &self.held,
        ];
        crate::scripts::Call::new(script, &keys.map(String::as_str))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_mixes_high_bits_into_the_shard() {
        // Java's string hash of "ab" is 97 * 31 + 98 = 3105 (< 2^15: the xor changes nothing).
        assert_eq!(hash(b"ab"), 3105);
        let long = hash(b"a long id, longer than a few bytes");
        let java = b"a long id, longer than a few bytes"
            .iter()
            .fold(0u32, |h, &b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
        assert_eq!(long, java ^ (java >> 15));
        assert_eq!(hash(b""), 0);
        // Sequential ids spread over 16 shards: none gets less than half its share.
        let mut counts = [0u32; 16];
        for i in 0..16_000u32 {
            counts[shard_of(i.to_string().as_bytes(), 16) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 500), "{counts:?}");
    }

    #[test]
    fn keys_share_the_shard_hash_tag() {
        let keys = ShardKeys::new("mail", 3);
        for key in keys.claim_keys() {
            assert!(key.starts_with("{mail:3}:"), "{key}");
        }
        assert_eq!(keys.payload_prefix, "{mail:3}:j:");
        assert_eq!(keys.payload(12).to_string(), "{mail:3}:j:12");
    }
}
