//! Claiming: `claim.lua` on each shard in turn, its reply turned into local timers.
//!
//! The claim reply carries the server's `TIME`; the request left at local instant `sent`
//! and the reply came back at `received`, so the server read its clock somewhere in
//! between. Each reply tightens the worker's bounds on the server's clock (`clock`), and a
//! job goes into the local `Timer` at the first instant at which the server's clock has
//! certainly reached its due time: no job starts early, whatever this machine's wall clock
//! says (it is never read). A round asks every shard, `IN_FLIGHT` calls at a time: a server
//! runs every command it has read from a connection before it serves the next one, so a
//! round of all the shards' claims pipelined at once (up to 16 calls of a thousand jobs,
//! about 8 µs of server time a job) held every other client, the workers' start checks
//! among them, for up to about 130 ms; with `IN_FLIGHT` calls, a check waits behind at most
//! that many (about 30 ms). When a shard filled its batch the next round starts
//! at once, otherwise the claimer sleeps `poll`, or less if stopped or woken by a hint
//! (`hint`). Claims pause while the local timer holds `max_held` jobs.
//!
//! A claim names each job (id, due time, attempt) but not its payload: the worker reads
//! the payloads of a claim's jobs right after it, with plain reads pipelined in one round
//! trip (an `HMGET` a payload hash: one for a claim in a queue of one hash a shard, about
//! one a job among many small hashes), from the payload hashes it computes
//! (`keys::bucket_of`), so no script hashes an id. Under callgrind (redis-server 7.0.15,
//! 32,000 jobs over 16 shards, plain `HGET`s then) a claim costs the server 29.8k
//! instructions a job and the `HGET`s 4.4k, against 54.1k for a claim that hashed each id
//! in Lua and read its payload there. Returning the payloads from
//! the start check instead (a `redis.call` a started job) made that check 12.2k a job
//! against 6.4k, on the path of every start, and D2's burst took 8.6-10.1 s against
//! 5.6-7.3 (load 2.3-4.1). The read need not be atomic with the claim: a payload changes
//! or goes only with a reschedule or a cancel, which revokes the claim, so a job whose
//! start check passes has the payload read here (a payload missing, which only another
//! client can cause, is an empty one, as the claim used to give it). If the read fails, the
//! claim's jobs are released at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use futures_util::StreamExt;
use redis::Value;
use shardwheel::Timer;
use tokio::sync::mpsc;

use crate::conn::Conn;
use crate::keys::bucket_of;
use crate::queue::Queue;
use crate::scripts::{Call, SCRIPTS};
use crate::settle::{Action, Settle};
use crate::stats::Counters;
use crate::worker::{Job, Shared, ms};

/// Most claim calls a worker has in flight. All 16 shards' at once made the server's
/// response time p99 129 ms over D1 (a probe's trivial command) and the D2 burst 6.1 s; 4
/// at a time, 97 ms and 5.7 s, and the jobs due after scheduling ended p99 116 -> 58 ms late
/// (one run each, load 1.4-1.8); one at a time delayed the claim of jobs due soon after
/// they were scheduled (D1's late_max 0.45 -> 1.56 s).
const IN_FLIGHT: usize = 4;

/// A claimed job in the local timer.
pub(crate) struct Claimed {
    pub(crate) shard: u32,
    pub(crate) token: u64,
    pub(crate) due_ms: i64,
    /// Its start check passed ahead of its due time: it runs when the timer fires it again.
    pub(crate) checked: bool,
    pub(crate) job: Job,
}

/// The server's clock at a claim (Unix ns), bracketed by the local instants of request and
/// reply.
#[derive(Clone, Copy)]
pub(crate) struct ClaimBase {
    pub(crate) server_ns: i128,
    pub(crate) sent: Instant,
    pub(crate) received: Instant,
}

fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
        _ => None,
    }
}

/// A number the server sent as text, if it is the text the number prints as: digits, after
/// a '-' for a negative one, with no leading zero (so no '+', fraction, exponent or "-0").
fn exact<T: std::str::FromStr>(value: &Value) -> Option<T> {
    let Value::BulkString(text) = value else {
        return None;
    };
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    let printed = match digits {
        [] => false,
        [b'0'] => digits.len() == text.len(),
        [first, ..] => *first != b'0' && digits.iter().all(u8::is_ascii_digit),
    };
    if !printed {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

fn bytes(value: Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Some(bytes),
        Value::SimpleString(text) => Some(text.into_bytes()),
        _ => None,
    }
}

/// The record `claim.lua` writes for a claimed job in the shard's tok hash,
/// "token:start:attempt", which `start.lua` compares whole with this one. The start time is
/// the due time less the check ahead (with none, the due time's text as the claim returned
/// it; with one, that number printed by Lua's `%d`), the attempt the text the claim
/// returned, and a row is kept only if its numbers print back as those texts
/// (`parse_claim`), so the two are the same string. Printed straight into a script's
/// argument, with `itoa` (a start check prints one a job: through `fmt` it was the
/// worker's costliest step in a burst after the allocations, perf).
pub(crate) struct Record {
    pub(crate) token: u64,
    pub(crate) start_ms: i64,
    pub(crate) attempt: u32,
}

impl redis::ToRedisArgs for Record {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        // Room for the longest: 20 + 1 + 20 + 1 + 10 bytes.
        let mut text = [0u8; 52];
        let mut end = 0;
        let (mut token, mut start, mut attempt) = (
            itoa::Buffer::new(),
            itoa::Buffer::new(),
            itoa::Buffer::new(),
        );
        let parts = [
            token.format(self.token).as_bytes(),
            b":",
            start.format(self.start_ms).as_bytes(),
            b":",
            attempt.format(self.attempt).as_bytes(),
        ];
        for part in parts {
            text[end..end + part.len()].copy_from_slice(part);
            end += part.len();
        }
        out.write_arg(&text[..end]);
    }
}

/// One claimed job as the claim script returns it: id, due ms, token, attempt.
pub(crate) type ClaimedRow = (String, i64, u64, u32);

/// A parsed claim reply.
pub(crate) struct ClaimReply {
    /// The server's clock when it ran the claim (Unix ns).
    pub(crate) server_ns: i128,
    pub(crate) jobs: Vec<ClaimedRow>,
    /// Claimed entries no handler can be given (written by another client): id, token and
    /// why.
    pub(crate) bad: Vec<(Vec<u8>, u64, &'static str)>,
    /// Jobs taken back from expired leases.
    pub(crate) reaped: u64,
}

/// Parses a claim reply: {now ms, token, {id, due, attempt, ...}, reaped, TIME
/// seconds, TIME microseconds} (the batch's jobs share its token). An entry whose id is not
/// UTF-8, or whose due time is not a whole number of milliseconds (a score another client
/// wrote), is set apart in `bad`, alone: the rest of the batch is parsed as usual. A row's
/// due time and attempt print back as the texts the claim returned, which its record is made
/// of (`record`).
pub(crate) fn parse_claim(reply: Value) -> Option<ClaimReply> {
    let Value::Array(mut parts) = reply else {
        return None;
    };
    if parts.len() != 6 {
        return None;
    }
    let token = u64::try_from(int(&parts[1])?).ok()?;
    let reaped = u64::try_from(int(&parts[3])?).ok()?;
    let server_ns =
        i128::from(int(&parts[4])?) * 1_000_000_000 + i128::from(int(&parts[5])?) * 1000;
    let Value::Array(flat) = std::mem::replace(&mut parts[2], Value::Nil) else {
        return None;
    };
    let mut jobs = Vec::with_capacity(flat.len() / 3);
    let mut bad = Vec::new();
    let mut items = flat.into_iter();
    while let Some(id) = items.next() {
        let id = bytes(id)?;
        let due = exact::<i64>(&items.next()?);
        let attempt = exact::<u32>(&items.next()?);
        match (String::from_utf8(id), due, attempt) {
            (Ok(id), Some(due), Some(attempt)) => jobs.push((id, due, token, attempt)),
            (Err(not_utf8), _, _) => {
                bad.push((not_utf8.into_bytes(), token, "its id is not UTF-8"))
            }
            (Ok(id), _, _) => bad.push((
                id.into_bytes(),
                token,
                "its due time is not a whole number of milliseconds",
            )),
        }
    }
    Some(ClaimReply {
        server_ns,
        jobs,
        bad,
        reaped,
    })
}

/// Server time a claim is given per job of a shard's backlog, times the shards (`claim.lua`'s
/// ARGV[7]): a shard holding n jobs due within h has its jobs due then claimed up to
/// `n * shards * CLAIM_US_PER_JOB` earlier than the lead, when that is more than h less the
/// lead (the claims of the jobs due before one could not all be made in the time left
/// before it otherwise: `claim.lua`'s horizons). About 1.4 times what claims took on
/// the 2-core machine of benches/README.md while a burst was being claimed (500,000 jobs in
/// about 7 s, 14 us each), so a burst's claims end before it comes due.
const CLAIM_US_PER_JOB: u64 = 20;

/// What one claim may take: jobs due within `lead_ms` (more with a backlog, see
/// `claim.lua`; never beyond `window_ms`), leased for `lease_ms`, at most `room` of them in
/// batches of `batch`; a job past `max_attempts` is dead-lettered.
pub(crate) struct ClaimLimits {
    pub(crate) window_ms: u64,
    pub(crate) lead_ms: u64,
    /// µs of lead per job due within the window (see [`CLAIM_US_PER_JOB`]).
    pub(crate) lead_per_job_us: u64,
    pub(crate) lease_ms: u64,
    pub(crate) room: usize,
    pub(crate) batch: usize,
    pub(crate) max_attempts: u32,
    /// How long before its due time a job's start is checked (`WorkerBuilder::check_ahead`).
    pub(crate) check_ahead_ms: u64,
}

/// The `claim` script's call on shard `shard` of `queue` (its `KEYS` and `ARGV` in the
/// order `lua/claim.lua` takes them).
pub(crate) fn claim_invocation(
    queue: &crate::queue::Queue,
    shard: u32,
    limits: &ClaimLimits,
) -> Call {
    let mut invocation = Call::new(&SCRIPTS.claim, &queue.keys(shard).claim_keys());
    invocation
        .arg(limits.window_ms)
        .arg(limits.lease_ms)
        .arg(limits.room)
        .arg(limits.batch)
        .arg(limits.max_attempts)
        .arg(limits.lead_ms)
        .arg(limits.lead_per_job_us)
        .arg(limits.check_ahead_ms);
    invocation
}

/// The payloads of `jobs`, claimed on shard `shard`, from the payload hashes the client
/// computes, pipelined (see the module doc): one `HMGET` a hash, which is one for the
/// claim in a queue of one hash a shard and about one a job among many small hashes;
/// `None` for a payload gone.
pub(crate) async fn payloads(
    queue: &Queue,
    conn: &mut Conn,
    shard: u32,
    jobs: &[ClaimedRow],
) -> Result<Vec<Option<Vec<u8>>>, crate::Error> {
    let keys = queue.keys(shard);
    let (shards, buckets) = (queue.shards(), queue.buckets());
    // The jobs' indices by payload hash.
    let mut by_hash: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (index, (id, ..)) in jobs.iter().enumerate() {
        let bucket = bucket_of(id.as_bytes(), shards, buckets);
        by_hash.entry(bucket).or_default().push(index);
    }
    let mut pipe = redis::pipe();
    for (bucket, indices) in &by_hash {
        let command = pipe.cmd("HMGET").arg(keys.payload(*bucket));
        for &index in indices {
            command.arg(&jobs[index].0);
        }
    }
    let replies: Vec<Vec<Option<Vec<u8>>>> = pipe.query_async(conn).await?;
    let mut payloads = vec![None; jobs.len()];
    let mut read = 0;
    for (indices, reply) in by_hash.values().zip(replies) {
        if reply.len() != indices.len() {
            break;
        }
        for (&index, payload) in indices.iter().zip(reply) {
            payloads[index] = payload;
            read += 1;
        }
    }
    if read != jobs.len() {
        return Err(crate::Error::Protocol(format!(
            "{read} payloads for {} jobs",
            jobs.len()
        )));
    }
    Ok(payloads)
}

/// One shard's claim: the shard, the room it was asked for, the server's clock around it,
/// the reply, and its jobs' payloads (or why they could not be read).
struct Claim {
    shard: u32,
    asked: usize,
    base: ClaimBase,
    reply: ClaimReply,
    payloads: Result<Vec<Option<Vec<u8>>>, crate::Error>,
}

/// One claim call on one shard, then its jobs' payloads.
async fn claim_shard(
    shared: &Shared,
    mut conn: Conn,
    shard: u32,
    room: usize,
) -> Result<Claim, crate::Error> {
    let queue = &shared.queue;
    let config = &shared.config;
    let limits = ClaimLimits {
        window_ms: ms(config.window),
        lead_ms: ms(config.lead),
        lead_per_job_us: CLAIM_US_PER_JOB * u64::from(queue.shards()),
        lease_ms: ms(config.lease),
        room,
        batch: config.batch,
        max_attempts: config.max_attempts,
        check_ahead_ms: ms(config.check_ahead),
    };
    let invocation = claim_invocation(queue, shard, &limits);
    let sent = Instant::now();
    let reply: Value = invocation.invoke_async(&mut conn).await?;
    let received = Instant::now();
    let reply = parse_claim(reply)
        .ok_or_else(|| crate::Error::Protocol("a claim reply of another shape".into()))?;
    let base = ClaimBase {
        server_ns: reply.server_ns,
        sent,
        received,
    };
    let payloads = if reply.jobs.is_empty() {
        Ok(Vec::new())
    } else {
        payloads(queue, &mut conn, shard, &reply.jobs).await
    };
    Ok(Claim {
        shard,
        asked: room,
        base,
        reply,
        payloads,
    })
}

/// Claims from every shard, `IN_FLIGHT` calls at a time, round after round, until stopped.
pub(crate) async fn claim_loop(
    shared: Arc<Shared>,
    timer: Arc<Timer<Claimed>>,
    settle_tx: mpsc::UnboundedSender<Settle>,
) {
    let counters = &shared.counters;
    let conn: Conn = shared.queue.conn();
    let shards = shared.queue.shards();
    loop {
        if shared.stopping.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        // The shards are asked `IN_FLIGHT` at a time (see the module doc), each for an equal
        // share of the room left in the local timer.
        let held = counters.held.load(std::sync::atomic::Ordering::Relaxed) as usize;
        let room = shared.config.max_held.saturating_sub(held);
        let share = room.div_ceil(shards as usize).min(shared.config.batch);
        let mut full = false;
        if share > 0 {
            let calls = (0..shards).map(|shard| claim_shard(&shared, conn.clone(), shard, share));
            let outcomes: Vec<_> = futures_util::stream::iter(calls)
                .buffered(IN_FLIGHT)
                .collect()
                .await;
            // Every reply tightens the bounds on the server's clock before any job of the
            // round is placed.
            {
                let mut clock = shared.lock_clock();
                for Claim { base, .. } in outcomes.iter().flatten() {
                    clock.observe(base.sent, base.received, base.server_ns);
                }
            }
            for outcome in outcomes {
                let Claim {
                    shard,
                    asked,
                    base,
                    reply,
                    payloads,
                } = match outcome {
                    Ok(outcome) => outcome,
                    Err(error) => {
                        counters.error("claim", &error);
                        continue;
                    }
                };
                Counters::add(&counters.reaped, reply.reaped);
                Counters::add(&counters.claimed, reply.jobs.len() as u64);
                full |= reply.jobs.len() + reply.bad.len() == asked;
                match payloads {
                    Ok(payloads) => {
                        for (row, payload) in reply.jobs.into_iter().zip(payloads) {
                            let payload = payload.unwrap_or_default();
                            hold(&shared, &timer, &settle_tx, shard, base, row, payload);
                        }
                    }
                    Err(error) => {
                        counters.error("payload read", &error);
                        for (id, _, token, _) in reply.jobs {
                            release(&settle_tx, shard, id, token);
                        }
                    }
                }
                for (id, token, why) in reply.bad {
                    bury(&shared, &settle_tx, shard, id, token, why);
                }
            }
        }
        if !full {
            tokio::select! {
                () = tokio::time::sleep(shared.config.poll) => {}
                () = shared.wake.notified() => {}
                () = shared.stop.notified() => return,
            }
        }
    }
}

/// Sends a claimed entry no handler can be given (`why`: see `parse_claim`) to the
/// dead-letter set at once, fenced by its claim's token like any settle, and reports it.
fn bury(
    shared: &Shared,
    settle_tx: &mpsc::UnboundedSender<Settle>,
    shard: u32,
    id: Vec<u8>,
    token: u64,
    why: &'static str,
) {
    tracing::error!(
        queue = shared.queue.name(),
        shard,
        id = %String::from_utf8_lossy(&id),
        "shardwheel-redis worker: a claimed job cannot be run ({why}); \
         it goes to the dead-letter set"
    );
    let _ = settle_tx.send(Settle {
        shard,
        id,
        token,
        action: Action::Bury,
    });
}

/// Puts one claimed job into the local timer at the instant its start time (its due time
/// less the check ahead) comes by the server's clock, or gives it back at once if the timer
/// refuses it.
fn hold(
    shared: &Shared,
    timer: &Timer<Claimed>,
    settle_tx: &mpsc::UnboundedSender<Settle>,
    shard: u32,
    base: ClaimBase,
    (id, due_ms, token, attempt): ClaimedRow,
    payload: Vec<u8>,
) {
    let counters = &shared.counters;
    let start_ns = i128::from(shared.config.start_ms(due_ms)) * 1_000_000;
    let at = certainly_at(shared, base, start_ns);
    let claimed = Claimed {
        shard,
        token,
        due_ms,
        checked: false,
        job: Job {
            id,
            payload,
            due: UNIX_EPOCH + Duration::from_millis(due_ms.max(0) as u64),
            attempt,
        },
    };
    insert(counters, timer, settle_tx, at, claimed);
}

/// The first local instant at which the server's clock has certainly reached `ns` (Unix ns):
/// by the worker's clock bounds, or, where they do not reach it (not yet observed), by
/// `base`, a reply that was: the server read its clock before the reply came back.
pub(crate) fn certainly_at(shared: &Shared, base: ClaimBase, ns: i128) -> Instant {
    shared.lock_clock().deadline(ns).unwrap_or_else(|| {
        let ahead = (ns - base.server_ns).max(0);
        base.received + Duration::from_nanos(u64::try_from(ahead).unwrap_or(u64::MAX))
    })
}

/// Puts a claimed job into the local timer to fire at `at`, or gives it back at once if the
/// timer refuses it (it is shutting down).
pub(crate) fn insert(
    counters: &Counters,
    timer: &Timer<Claimed>,
    settle_tx: &mpsc::UnboundedSender<Settle>,
    at: Instant,
    claimed: Claimed,
) {
    Counters::add(&counters.held, 1);
    if let Err(refused) = timer.insert_at(at, claimed) {
        Counters::add(&counters.held, 0u64.wrapping_sub(1));
        let claimed = refused.into_inner();
        release(settle_tx, claimed.shard, claimed.job.id, claimed.token);
    }
}

/// Gives a claimed job back unrun (back to due at its due time, the attempt not counted).
fn release(settle_tx: &mpsc::UnboundedSender<Settle>, shard: u32, id: String, token: u64) {
    let _ = settle_tx.send(Settle {
        shard,
        id: id.into_bytes(),
        token,
        action: Action::Release,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_record_prints_as_claim_lua_writes_it() {
        use redis::ToRedisArgs;
        for (record, text) in [
            ((7, 1795937999000, 1), "7:1795937999000:1"),
            ((0, -5, 0), "0:-5:0"),
            (
                (u64::MAX, i64::MIN, u32::MAX),
                "18446744073709551615:-9223372036854775808:4294967295",
            ),
        ] {
            let (token, start_ms, attempt) = record;
            let args = Record {
                token,
                start_ms,
                attempt,
            }
            .to_redis_args();
            assert_eq!(args, [text.as_bytes()]);
        }
    }

    #[test]
    fn exact_takes_only_the_text_a_number_prints_as() {
        for (s, n) in [
            ("0", 0),
            ("7", 7),
            ("-5", -5),
            ("1795937999000", 1795937999000),
        ] {
            assert_eq!(exact::<i64>(&text(s)), Some(n), "{s}");
            assert_eq!(n.to_string(), s);
        }
        for s in [
            "",
            "-",
            "-0",
            "007",
            "+5",
            "1.5",
            "1e3",
            "--5",
            "9223372036854775808",
        ] {
            assert_eq!(exact::<i64>(&text(s)), None, "{s}");
        }
        assert_eq!(exact::<u32>(&text("-1")), None);
        assert_eq!(exact::<i64>(&Value::Int(5)), None);
    }
}
