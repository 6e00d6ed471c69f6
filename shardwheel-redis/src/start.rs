//! The fenced start: a claimed job runs only if it is still the same job at its due time.
//!
//! A claim is a reservation, not a start: between a claim (up to `window` ahead) and the
//! job's due time the job may be cancelled or rescheduled, or its lease taken back. So when
//! the local timer fires jobs, the dispatcher takes every job fired since it last looked,
//! groups them by shard and sends them in `start.lua` calls of at most `BATCH` jobs, all at
//! once: one round trip per instant, not per job, while the checks of earlier instants may
//! still be in flight (`dispatch`). On a single server one call holds several shards' jobs:
//! a call costs the server about 20 us beside its jobs' 1-2 us each, and the few jobs of one
//! instant are spread over many shards (in D1, about 10 jobs an instant over the 16
//! shards); on a cluster a script touches one slot, so a call holds one shard's jobs. The
//! calls go on the queue's second connection, which nothing else uses: on the first, a
//! check would wait behind every claim and acknowledgement pipelined before it (a server
//! runs one connection's commands in order), and in D1 at a fifth of its scale (load 1-1.5)
//! the second connection halved the lateness (p50 14.2 -> 7.7 ms, p99 939 -> 466 ms). The
//! script compares each job's claim record (token, due time, attempt) with the one the
//! store holds, its lease expiry and its due time with the server's `TIME`, atomically, and
//! writes nothing; when every job of the call is due and was due less than a lease ago (a
//! worker on time), the record alone decides, one string comparison a job, and a claimed
//! batch none of whose jobs was revoked decides for all its jobs at once (its count and
//! revoke mark: `lua/start.lua`): the jobs of a burst, fired together by the hundred from
//! a few batches, are checked at half the server's instructions of reading every record.
//! A script that only reads is neither appended to the AOF (no fsync with `appendfsync
//! always`) nor replicated, so the check adds no write to the server's scheduling traffic.
//! A cancel or reschedule is applied wholly before or wholly after a check; it removes the
//! claim's record, so every later check refuses the job, and it tells whether an earlier
//! check may have passed from the claim's due time alone, since a check passes only at or
//! after it (see `lua/revoke.lua`). Per job:
//! - started: the handler runs (at its due time: see below);
//! - revoked (cancelled, rescheduled, settled or taken back since the claim, or its lease
//!   expired): dropped, counted in `revoked`; the store already holds whatever the job
//!   became (an expired lease is taken back by the next claim);
//! - not yet due by the server's clock (a server clock that stepped back): back into the
//!   local timer at the instant the reply shows its due time is certainly reached;
//! - the call failed: back into the timer, checked again `RETRY` later. Retrying is safe
//!   forever: once its lease is taken back, the token no longer matches.
//!
//! Each reply also carries the server's `TIME` and tightens the worker's clock bounds.
//!
//! With a check ahead (`WorkerBuilder::check_ahead`), a claim's record holds the job's
//! start time, its due time less the check ahead, and "due time" above means that time:
//! the timer fires the job then, and a job whose check passes before its due time goes
//! back into the timer until its due time is certainly reached by the server's clock, then
//! runs with no other check. A cancel or reschedule reaches it until its start time. The
//! check's round trip leaves the job's lateness whenever the server answers within the
//! check ahead, which a server busy with schedules may not do within milliseconds.

use std::time::{Duration, Instant};

use redis::Value;
use shardwheel::Timer;
use tokio::sync::mpsc;

use crate::claim::{ClaimBase, Claimed, Record, certainly_at, insert};
use crate::queue::{BATCH, Queue};
use crate::scripts::{Call, SCRIPTS};
use crate::settle::Settle;
use crate::stats::Counters;
use crate::worker::{Shared, ms};

/// How long after a failed start call its jobs are checked again.
const RETRY: Duration = Duration::from_millis(100);

/// Most jobs the dispatcher checks in one instant (16 calls of `BATCH`).
pub(crate) const MOST: usize = 16 * BATCH;

/// Checks the start of `fired` (jobs the timer fired), returns those that may run now and
/// puts the others back into the timer or drops them as above.
pub(crate) async fn check(
    shared: &Shared,
    timer: &Timer<Claimed>,
    settle_tx: &mpsc::UnboundedSender<Settle>,
    mut fired: Vec<Claimed>,
) -> Vec<Claimed> {
    // Stable: a batch's jobs stay in the order they fired, next to each other, and its
    // shard's batches next to each other.
    fired.sort_by_key(|claimed| (claimed.shard, claimed.token));
    // On a single server a call takes several shards' jobs; on a cluster one shard's.
    let several = !shared.queue.checks_conn().is_cluster();
    let mut chunks: Vec<Vec<Claimed>> = Vec::new();
    for claimed in fired {
        match chunks.last_mut() {
            Some(chunk) if chunk.len() < BATCH && (several || chunk[0].shard == claimed.shard) => {
                chunk.push(claimed);
            }
            _ => chunks.push(vec![claimed]),
        }
    }
    let replies =
        futures_util::future::join_all(chunks.iter().map(|chunk| call(shared, chunk))).await;
    let counters = &shared.counters;
    let mut start = Vec::new();
    for (chunk, reply) in chunks.into_iter().zip(replies) {
        let (base, results) = match reply {
            Ok(reply) => reply,
            Err(error) => {
                counters.error("start check", &error);
                for claimed in chunk {
                    insert(counters, timer, settle_tx, Instant::now() + RETRY, claimed);
                }
                continue;
            }
        };
        shared
            .lock_clock()
            .observe(base.sent, base.received, base.server_ns);
        for (mut claimed, result) in chunk.into_iter().zip(results) {
            match result {
                1 => {
                    // Checked ahead of its due time: held until that comes by the server's
                    // clock, never started before it.
                    let due_ns = i128::from(claimed.due_ms) * 1_000_000;
                    if due_ns > base.server_ns {
                        claimed.checked = true;
                        let at = certainly_at(shared, base, due_ns);
                        insert(counters, timer, settle_tx, at, claimed);
                    } else {
                        start.push(claimed);
                    }
                }
                2 => {
                    let start_ns = i128::from(shared.config.start_ms(claimed.due_ms)) * 1_000_000;
                    let ahead = u64::try_from(start_ns - base.server_ns).unwrap_or(0);
                    let at = base.received + Duration::from_nanos(ahead);
                    insert(counters, timer, settle_tx, at, claimed);
                }
                _ => Counters::add(&counters.revoked, 1),
            }
        }
    }
    start
}

/// A claimed job as a start check names it: shard, id, token, start ms (its claim
/// record's: the due time less the check ahead), attempt.
pub(crate) type StartRow<'a> = (u32, &'a str, u64, i64, u32);

/// Fewest jobs a batch, on average over a shard's batches in a call, for which the call
/// names the shard's batches (`start.lua` then reads one count and one mark a batch instead
/// of every job's record). Below it the batches' reads cost more than the jobs' own: the
/// held hash is small and kept as a list the server scans (Redis's listpack), a lookup of
/// a missing mark scanning all of it. By the server's instructions a job (callgrind, one
/// shard's 62 live batches, 16 shards a call): 4 jobs a batch cost 11.7k against 10.2k job
/// by job, 8 cost 7.5k against 8.3k, 16 cost 5.2k against 7.2k, and a burst's calls of 512
/// jobs of one batch 3.3k against 6.2k.
const WHOLE: usize = 8;

/// The `start.lua` call for `jobs`, claimed with leases of `lease_ms`: each shard's keys,
/// the due times' bounds, then per shard, for jobs next to each other, either its job count
/// and each job's id and the record its claim wrote (`claim::Record`, from the same due
/// times), or, for [`WHOLE`] jobs a batch or more, its count of batches negated, each batch's
/// token and job count, then the jobs' pairs. A shard or batch whose jobs are not next to
/// each other is sent as several. The results come in the order of `jobs`.
pub(crate) fn invocation(queue: &Queue, lease_ms: u64, jobs: &[StartRow<'_>]) -> Call {
    // Each group: its shard's jobs next to each other, and whether it goes by batch.
    let groups = jobs.chunk_by(|a, b| a.0 == b.0).map(|group| {
        let batches = group.chunk_by(|a, b| a.2 == b.2);
        let count = batches.clone().count();
        (group, batches, count, group.len() >= WHOLE * count)
    });
    let mut names = Vec::new();
    for (group, _, _, whole) in groups.clone() {
        let keys = queue.keys(group[0].0);
        names.extend([keys.tok.as_str(), keys.lease.as_str()]);
        if whole {
            names.push(keys.held.as_str());
        }
    }
    let mut invocation = Call::new(&SCRIPTS.start, &names);
    let starts = jobs.iter().map(|&(_, _, _, start_ms, _)| start_ms);
    let earliest = starts.clone().min().unwrap_or(0);
    let latest = starts.max().unwrap_or(0);
    invocation.arg(lease_ms).arg(earliest).arg(latest);
    for (group, batches, count, whole) in groups {
        if whole {
            invocation.arg(-(count as i64));
            for batch in batches {
                invocation.arg(batch[0].2).arg(batch.len());
            }
        } else {
            invocation.arg(group.len());
        }
        for &(_, id, token, start_ms, attempt) in group {
            let record = Record {
                token,
                start_ms,
                attempt,
            };
            invocation.arg(id).arg(record);
        }
    }
    invocation
}

/// One `start.lua` call for `jobs`: the server's clock and one result per job.
async fn call(shared: &Shared, jobs: &[Claimed]) -> Result<(ClaimBase, Vec<i64>), crate::Error> {
    let queue = &shared.queue;
    let rows: Vec<StartRow> = jobs
        .iter()
        .map(|claimed| {
            let job = &claimed.job;
            let (shard, token) = (claimed.shard, claimed.token);
            let start_ms = shared.config.start_ms(claimed.due_ms);
            (shard, job.id.as_str(), token, start_ms, job.attempt)
        })
        .collect();
    let invocation = invocation(queue, ms(shared.config.lease), &rows);
    let sent = Instant::now();
    let reply: Vec<Value> = invocation.invoke_async(&mut queue.checks_conn()).await?;
    let received = Instant::now();
    parse(reply, jobs.len())
        .map(|(server_ns, results)| {
            let base = ClaimBase {
                server_ns,
                sent,
                received,
            };
            (base, results)
        })
        .ok_or_else(|| crate::Error::Protocol("a start reply of another shape".into()))
}

/// {TIME seconds, TIME microseconds, result per job} -> (server ns, results).
fn parse(reply: Vec<Value>, jobs: usize) -> Option<(i128, Vec<i64>)> {
    let ints: Vec<i64> = reply
        .iter()
        .map(|value| match value {
            Value::Int(n) => Some(*n),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let (time, results) = ints.split_at_checked(2)?;
    if results.len() != jobs {
        return None;
    }
    let server_ns = i128::from(time[0]) * 1_000_000_000 + i128::from(time[1]) * 1000;
    Some((server_ns, results.to_vec()))
}
