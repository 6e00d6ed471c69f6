//! Settling: the outcomes of runs, batched per shard into `settle.lua` calls.
//!
//! Every outcome (ack, fail, release) names the job's fencing token, and the script applies
//! it only if that token is still the job's live lease: a worker whose lease expired, or
//! whose job was cancelled or rescheduled meanwhile, is refused and counted as such. The
//! settler gathers outcomes for up to `LINGER` after the first (or until 16 script batches
//! are queued), groups them by shard and sends the shards' calls concurrently, so an ack
//! costs a small share of one script call: the fixed cost of a call (parsing, the script's
//! setup, its `TIME` and lookups) is paid per batch, not per job. A failed call is retried once (fenced steps are safe to repeat); after
//! that the lease is left to expire and the job runs again.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::queue::BATCH;
use crate::scripts::SCRIPTS;
use crate::stats::Counters;
use crate::worker::{Shared, ms};

/// How long the settler gathers outcomes after the first of a batch before sending them.
/// At D1's rate (about 17,000 outcomes a second over 16 shards) sending what was queued at
/// once made a script call per one or two jobs, 458,580 calls for 1,000,000 acks, and those
/// calls were most of the server's work; with 50 ms a call carries about 25. An ack
/// reaching Redis 50 ms later only keeps the lease (30 s by default) that much longer.
const LINGER: Duration = Duration::from_millis(50);

/// What happened to a run, for `settle.lua`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Ack,
    Fail,
    Release,
}

pub(crate) struct Settle {
    pub(crate) shard: u32,
    pub(crate) id: String,
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
        let mut taken = 1;
        // Outcomes come one at a time as jobs come due: wait up to LINGER for more, so that
        // each shard's call carries many of them rather than one or two.
        let linger = tokio::time::sleep(LINGER);
        tokio::pin!(linger);
        while taken < 16 * BATCH {
            if let Ok(settle) = settle_rx.try_recv() {
                pending[settle.shard as usize].push(settle);
                taken += 1;
                continue;
            }
            tokio::select! {
                settle = settle_rx.recv() => match settle {
                    Some(settle) => {
                        pending[settle.shard as usize].push(settle);
                        taken += 1;
                    }
                    // Closed (the worker stops): settle what is here; the outer loop ends.
                    None => break,
                },
                () = &mut linger => break,
            }
        }
        let mut calls = Vec::new();
        for (shard, settles) in pending.iter_mut().enumerate() {
            if settles.is_empty() {
                continue;
            }
            let batch = std::mem::take(settles);
            let keys = queue.keys(shard as u32);
            let mut conn = queue.conn();
            calls.push(async move {
                for chunk in batch.chunks(BATCH) {
                    let mut invocation =
                        keys.invoke(&SCRIPTS.settle, queue.shards(), queue.buckets());
                    invocation
                        .arg(config.max_attempts)
                        .arg(ms(config.backoff))
                        .arg(ms(config.backoff_cap));
                    for settle in chunk {
                        let action = match settle.action {
                            Action::Ack => "a",
                            Action::Fail => "f",
                            Action::Release => "r",
                        };
                        invocation.arg(&settle.id).arg(settle.token).arg(action);
                    }
                    let mut results: Option<Vec<i64>> = None;
                    // One retry: a settle is fenced, so repeating it is harmless.
                    for _ in 0..2 {
                        match invocation.invoke_async::<Vec<i64>>(&mut conn).await {
                            Ok(ok) => {
                                results = Some(ok);
                                break;
                            }
                            Err(_) => {
                                Counters::add(&counters.errors, 1);
                                tokio::time::sleep(Duration::from_millis(100)).await;
                            }
                        }
                    }
                    let Some(results) = results else { continue };
                    for (settle, result) in chunk.iter().zip(results) {
                        let counter = match (settle.action, result) {
                            (_, 0) => &counters.refused,
                            (Action::Ack, _) => &counters.acked,
                            (Action::Fail, 2) => &counters.dead_lettered,
                            (Action::Fail, _) => &counters.retried,
                            (Action::Release, _) => &counters.released,
                        };
                        Counters::add(counter, 1);
                    }
                }
            });
        }
        futures_util::future::join_all(calls).await;
    }
}
