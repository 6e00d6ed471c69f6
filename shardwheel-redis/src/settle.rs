//! Settling: the outcomes of runs, batched per shard into `settle.lua` calls.
//!
//! Every outcome (ack, fail, release, or dead-letter for a claimed entry no handler can be
//! given, see `claim::parse_claim`) names the job's fencing token, and the script applies
//! it only if that token is still the job's live lease: a worker whose lease expired, or
//! whose job was cancelled or rescheduled meanwhile, is refused and counted as such.
//!
//! The settler takes whatever outcomes are queued (up to 16 script batches), groups them by
//! shard and sends the shards' calls one after the other, so acks cost a fraction of a
//! round trip each under load. One call at a time: a server runs every command it has read
//! from a connection before it serves the next one, so the shards' calls pipelined at once
//! (up to 16 of 512 acks) held the workers' start checks behind them; one at a time, a
//! check waits behind at most one. While the dispatcher has all its start checks out (jobs
//! fire faster than their checks come back: a burst), the settler holds its outcomes back,
//! up to `HOLD_MAX` (1 s, at most a tenth of the lease), so that the server's thread goes to
//! the checks that start jobs rather than to the acks of jobs already run. In one window
//! of the 2-core machine (one run each, load 1.0-2.2), D2's burst was all delivered in
//! 2.57 s against 4.55 s with the shards' calls at once and no hold (2.89 s with one call
//! at a time alone), and D1 scheduled 44,358 a second against 36,396 (floors 77-94k).
//! Otherwise it does not wait for more: gathering outcomes for 50 ms made the calls 20
//! times fewer in D1 (1,000,000 acks in about 24,000 calls instead of 458,580) but raised
//! the p99 lateness of its jobs from about 6 ms to 27-36 ms on the 2-core machine, and did
//! not raise its schedule rate. A failed call is retried once (fenced steps are safe to
//! repeat); after that the lease is left to expire and the job runs again.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::keys::bucket_of;
use crate::queue::BATCH;
use crate::scripts::SCRIPTS;
use crate::stats::Counters;
use crate::worker::{Shared, ms};

/// Longest the settler holds outcomes back while the worker's start checks are all out (and
/// never more than a tenth of the lease).
const HOLD_MAX: Duration = Duration::from_secs(1);
/// How often it looks again meanwhile.
const HOLD_STEP: Duration = Duration::from_millis(5);

/// What happened to a run, for `settle.lua`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Ack,
    Fail,
    Release,
    /// To the dead-letter set at once: a claimed entry no handler can be given.
    Bury,
}

pub(crate) struct Settle {
    pub(crate) shard: u32,
    /// The job's id (UTF-8 unless buried).
    pub(crate) id: Vec<u8>,
    pub(crate) token: u64,
    pub(crate) action: Action,
}

pub(crate) async fn settle_loop(
    shared: Arc<Shared>,
    mut settle_rx: mpsc::UnboundedReceiver<Settle>,
) {
    let queue = &shared.queue;
    let config = &shared.config;
    let counters = &shared.counters;
    let shards = queue.shards() as usize;
    let mut pending: Vec<Vec<Settle>> = (0..shards).map(|_| Vec::new()).collect();
    while let Some(first) = settle_rx.recv().await {
        pending[first.shard as usize].push(first);
        let first_at = Instant::now();
        let hold = HOLD_MAX.min(config.lease / 10);
        let mut taken = 1;
        loop {
            while taken < 16 * BATCH {
                match settle_rx.try_recv() {
                    Ok(settle) => {
                        pending[settle.shard as usize].push(settle);
                        taken += 1;
                    }
                    Err(_) => break,
                }
            }
            // During a burst the acks wait (see the module doc); Relaxed: a hint.
            if !shared.checks_full.load(Ordering::Relaxed) || first_at.elapsed() >= hold {
                break;
            }
            tokio::time::sleep(HOLD_STEP).await;
            taken = 0;
        }
        // The shards' calls one at a time (see the module doc).
        for (shard, settles) in pending.iter_mut().enumerate() {
            if settles.is_empty() {
                continue;
            }
            let batch = std::mem::take(settles);
            let keys = queue.keys(shard as u32);
            let mut conn = queue.conn();
            for chunk in batch.chunks(BATCH) {
                let mut invocation = keys.invoke(&SCRIPTS.settle);
                invocation
                    .arg(&keys.payload_prefix)
                    .arg(config.max_attempts)
                    .arg(ms(config.backoff))
                    .arg(ms(config.backoff_cap));
                for settle in chunk {
                    let action = match settle.action {
                        Action::Ack => "a",
                        Action::Fail => "f",
                        Action::Release => "r",
                        Action::Bury => "d",
                    };
                    let bucket = bucket_of(&settle.id, queue.shards(), queue.buckets());
                    invocation
                        .arg(&settle.id)
                        .arg(settle.token)
                        .arg(action)
                        .arg(bucket);
                }
                let mut results: Option<Vec<i64>> = None;
                // One retry: a settle is fenced, so repeating it is harmless.
                for _ in 0..2 {
                    match invocation.invoke_async::<Vec<i64>>(&mut conn).await {
                        Ok(ok) => {
                            results = Some(ok);
                            break;
                        }
                        Err(error) => {
                            counters.error("settle", &error);
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
                let Some(results) = results else { continue };
                for (settle, result) in chunk.iter().zip(results) {
                    let counter = match (settle.action, result) {
                        (_, 0) => &counters.refused,
                        (Action::Ack, _) => &counters.acked,
                        (Action::Fail | Action::Bury, 2) => &counters.dead_lettered,
                        (Action::Fail | Action::Bury, _) => &counters.retried,
                        (Action::Release, _) => &counters.released,
                    };
                    Counters::add(counter, 1);
                }
            }
        }
    }
}
