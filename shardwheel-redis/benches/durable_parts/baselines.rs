//! The baselines the durable bench measures shardwheel-redis against, in the same run: the
//! naive poller many users write (its producer and its poller), the script poller careful
//! users write (the same producer; the poll is one atomic script) and the floor, the least
//! work per job a durable schedule can ask of Redis.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use shardwheel_redis::DEFAULT_BUCKETS;

use super::{PAYLOAD, PRODUCERS, Tally, cpu_seconds, fan_out, now_ms, raw_conn, support, unix_us};

/// The naive producer: ZADD with due = this client's clock + delay, member = id, pipelined.
pub(super) async fn produce_naive(
    server: &support::Server,
    key: &str,
    delays: &Arc<Vec<u64>>,
    at: Option<u64>,
) -> f64 {
    let (delays, key) = (Arc::clone(delays), key.to_owned());
    let connect = async || raw_conn(&server.url()).await;
    fan_out(delays.len(), connect, move |conn, chunk| {
        let (delays, key) = (Arc::clone(&delays), key.clone());
        async move {
            let base = at.unwrap_or_else(now_ms);
            let mut pipe = redis::pipe();
            for i in chunk {
                // The payload rides in the member, as naive queues do.
                let mut member = i.to_string().into_bytes();
                member.push(b':');
                member.extend_from_slice(PAYLOAD);
                pipe.zadd(&key, member, base + delays[i]).ignore();
            }
            pipe.query_async::<()>(&mut (*conn).clone()).await.unwrap();
        }
    })
    .await
}

/// The script poller's poll: the jobs due by the server's `TIME` (at most ARGV[1]) leave
/// the sorted set in the same atomic step that returns them, so two pollers never fetch one
/// job (a poller that dies after the call loses its jobs: at most once).
const POLL_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, ARGV[1])
local members = {}
for i = 1, #due, 2 do members[#members + 1] = due[i] end
if #members > 0 then redis.call('ZREM', KEYS[1], unpack(members)) end
return due
";

/// A poller: every 100 ms, the jobs due (at most 1000), delivered. The naive one
/// (`atomic` false) runs ZRANGEBYSCORE due <= now, then ZREM them, so two pollers race; the
/// script poller (`atomic` true) runs `POLL_SCRIPT`.
pub(super) async fn poller(
    url: String,
    key: String,
    atomic: bool,
    tally: Arc<Tally>,
    stop: Arc<AtomicU64>,
) {
    let mut conn = raw_conn(&url).await;
    let script = redis::Script::new(POLL_SCRIPT);
    while stop.load(Ordering::Relaxed) == 0 {
        let due: Vec<(Vec<u8>, f64)> = if atomic {
            let mut poll = script.key(&key);
            poll.arg(1000).invoke_async(&mut conn).await.unwrap()
        } else {
            redis::cmd("ZRANGEBYSCORE")
                .arg(&key)
                .arg("-inf")
                .arg(now_ms())
                .arg("WITHSCORES")
                .arg("LIMIT")
                .arg(0)
                .arg(1000)
                .query_async(&mut conn)
                .await
                .unwrap()
        };
        if !due.is_empty() {
            if !atomic {
                let members: Vec<&[u8]> = due.iter().map(|(m, _)| m.as_slice()).collect();
                redis::cmd("ZREM")
                    .arg(&key)
                    .arg(&members)
                    .query_async::<()>(&mut conn)
                    .await
                    .unwrap();
            }
            for (member, score) in &due {
                let now = unix_us(SystemTime::now());
                let id = member.split(|&b| b == b':').next().unwrap();
                let index: usize = std::str::from_utf8(id).unwrap().parse().unwrap();
                tally.record(index, *score as u64 * 1000, now);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The least a durable schedule can ask of Redis, for comparison with D1: the same jobs,
/// clients, batches and arguments (id, delay, payload hash, payload) through a script that
/// only stores each payload (`HSET` into one of the queue's default count of small hashes
/// per shard, `DEFAULT_BUCKETS`) and inserts its due time by the server's `TIME` (one
/// variadic `ZADD` per call), with no idempotency check, no hint and no workers running.
const FLOOR_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local zadd = {}
for i = 1, #ARGV, 4 do
  redis.call('HSET', KEYS[1] .. ':j:' .. ARGV[i + 2], ARGV[i], ARGV[i + 3])
  zadd[#zadd + 1] = now + ARGV[i + 1]
  zadd[#zadd + 1] = ARGV[i]
end
if #zadd > 0 then redis.call('ZADD', KEYS[1] .. ':due', unpack(zadd)) end
return #zadd / 2
";

/// Runs `schedule` (which returns its seconds) for `n` jobs on a fresh server with no
/// consumers: returns (jobs per second, redis-server CPU µs per job).
pub(super) async fn alone(
    n: usize,
    schedule: impl AsyncFnOnce(&support::Server) -> f64,
) -> (f64, f64) {
    let server = support::Server::start();
    let cpu_before = cpu_seconds(&server.url()).await;
    let seconds = schedule(&server).await;
    let cpu_after = cpu_seconds(&server.url()).await;
    let n = n as f64;
    (n / seconds, (cpu_after.1 - cpu_before.1) * 1e6 / n)
}

/// Schedules `delays` with [`FLOOR_SCRIPT`] on a fresh server (16 shards, as the queue's
/// default): returns (jobs per second, redis-server CPU µs per job).
///
/// `fan_out` hands producer p the indices p, p + PRODUCERS, ...: numbered by i / PRODUCERS,
/// each producer's batch spreads over all the shards, as ids do under the queue's hash, so a
/// call carries as many jobs as the queue's (about PRODUCER_BATCH / SHARDS). Numbered by i,
/// a batch would fill PRODUCERS times fewer shards with calls as many times larger.
pub(super) async fn floor(delays: &Arc<Vec<u64>>) -> (f64, f64) {
    const SHARDS: usize = 16;
    let place = |i: usize| {
        let k = i / PRODUCERS;
        (k % SHARDS, (k / SHARDS) % DEFAULT_BUCKETS as usize)
    };
    let script = redis::Script::new(FLOOR_SCRIPT);
    let shared = Arc::clone(delays);
    alone(delays.len(), async |server| {
        let connect = async || raw_conn(&server.url()).await;
        fan_out(shared.len(), connect, move |conn, chunk| {
            let (script, delays) = (script.clone(), Arc::clone(&shared));
            async move {
                let mut calls = Vec::new();
                for shard in 0..SHARDS {
                    let mut invocation = script.prepare_invoke();
                    invocation.key(format!("{{floor:{shard}}}"));
                    let mut jobs: Vec<usize> = chunk
                        .iter()
                        .copied()
                        .filter(|&i| place(i).0 == shard)
                        .collect();
                    jobs.sort_by_key(|&i| delays[i]);
                    for i in jobs {
                        invocation
                            .arg(i)
                            .arg(delays[i])
                            .arg(place(i).1)
                            .arg(&PAYLOAD[..]);
                    }
                    let mut conn = (*conn).clone();
                    calls.push(async move { invocation.invoke_async::<u64>(&mut conn).await });
                }
                for outcome in futures_util::future::join_all(calls).await {
                    outcome.unwrap();
                }
            }
        })
        .await
    })
    .await
}
