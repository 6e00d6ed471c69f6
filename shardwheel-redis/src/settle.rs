//! Settling: the outcomes of runs, batched per shard into `settle.lua` calls.
//!
//! Every outcome (ack, fail, release, or dead-letter for a claimed entry no handler can be
//! given, see `claim::parse_claim`) names the job's fencing token, and the script applies
//! it only if that token is still the job's live lease: a worker whose lease expired, or
//! whose job was cancelled or rescheduled meanwhile, is refused and counted as such.
//!
//! The settler takes whatever outcomes are queued, keeps each shard's in the order they
//! came and sends calls of up to 512 (`BATCH`) of one shard's, taking the shards in turn, so
//! acks cost a fraction of a round trip each under load. One call at a time: a server runs
//! every command it has read from a connection before it serves the next one, so the
//! shards' calls pipelined at once (up to 16 of 512 acks) held the workers' start checks
//! behind them; one at a time, a check waits behind at most one. While the dispatcher has
//! all its start checks out (jobs fire faster than their checks come back: a burst), an
//! outcome waits, up to `HOLD_MAX` (1 s, at most a tenth of the lease), so that the server's
//! thread goes to the checks that start jobs rather than to the acks of jobs already run;
//! this is looked at again before every call, so a hold that ends for the outcomes of one
//! moment does not send the ones that came after it. In one window of the 2-core machine
//! (one run each, load 1.0-2.2), D2's burst was all delivered in 2.57 s against 4.55 s with
//! the shards' calls at once and no hold (2.89 s with one call at a time alone), and D1
//! scheduled 44,358 a second against 36,396 (floors 77-94k). When the hold was looked at
//! once a round (every outcome queued then sent, outcomes coming meanwhile with them), the
//! acks of a burst's first second went out during its later checks: D2's burst took 1.5-5.4
//! s, median 4.4 (ten runs), against 1.4-4.5 s, median 2.5 (seven runs), looked at before
//! every call (alternating, load 2.3-3.9).
//! Otherwise it does not wait for more: gathering outcomes for 50 ms made the calls 20
//! times fewer in D1 (1,000,000 acks in about 24,000 calls instead of 458,580) but raised
//! the p99 lateness of its jobs from about 6 ms to 27-36 ms on the 2-core machine, and did
//! not raise its schedule rate. A failed call is retried once (fenced steps are safe to
//! repeat); after that the lease is left to expire and the job runs again.

use std::collections::VecDeque;
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
    let hold = HOLD_MAX.min(shared.config.lease / 10);
    let mut outbox = Outbox::new(shared.queue.shards() as usize);
    while let Some(first) = settle_rx.recv().await {
        outbox.push(Instant::now(), first);
        loop {
            let now = Instant::now();
            for _ in 0..16 * BATCH {
                match settle_rx.try_recv() {
                    Ok(settle) => outbox.push(now, settle),
                    Err(_) => break,
                }
            }
            // Relaxed: a hint.
            let burst = shared.checks_full.load(Ordering::Relaxed);
            match outbox.next_call(now, burst.then_some(hold)) {
                Some((shard, chunk)) => settle_chunk(&shared, shard, &chunk).await,
                None if outbox.is_empty() => break,
                None => tokio::time::sleep(HOLD_STEP).await,
            }
        }
    }
}

/// The outcomes waiting for their call: each shard's in the order they came, with when the
/// settler took them.
struct Outbox {
    pending: Vec<VecDeque<(Instant, Settle)>>,
    /// The shard whose call goes next, round the shards (one shard's outcomes arriving
    /// without end must not keep the others' waiting).
    next: usize,
}

impl Outbox {
    fn new(shards: usize) -> Self {
        Outbox {
            pending: (0..shards).map(|_| VecDeque::new()).collect(),
            next: 0,
        }
    }

    fn push(&mut self, now: Instant, settle: Settle) {
        self.pending[settle.shard as usize].push_back((now, settle));
    }

    fn is_empty(&self) -> bool {
        self.pending.iter().all(VecDeque::is_empty)
    }

    /// The next call to make, up to `BATCH` outcomes of one shard, taking the shards in
    /// turn; during a burst (`hold` given) only a shard whose oldest outcome has waited
    /// `hold` has one, so that the server goes to the start checks (see the module doc).
    fn next_call(&mut self, now: Instant, hold: Option<Duration>) -> Option<(u32, Vec<Settle>)> {
        let shards = self.pending.len();
        let shard = (0..shards)
            .map(|k| (self.next + k) % shards)
            .find(|&shard| {
                self.pending[shard]
                    .front()
                    .is_some_and(|(at, _)| hold.is_none_or(|hold| now.duration_since(*at) >= hold))
            })?;
        let queue = &mut self.pending[shard];
        let count = queue.len().min(BATCH);
        let chunk = queue.drain(..count).map(|(_, settle)| settle).collect();
        self.next = (shard + 1) % shards;
        Some((shard as u32, chunk))
    }
}

/// One `settle.lua` call of up to `BATCH` outcomes of `shard`, retried once; counts each
/// outcome's result.
async fn settle_chunk(shared: &Shared, shard: u32, chunk: &[Settle]) {
    let queue = &shared.queue;
    let config = &shared.config;
    let counters = &shared.counters;
    let keys = queue.keys(shard);
    let mut conn = queue.conn();
    let mut invocation = keys.invoke(&SCRIPTS.settle);
    invocation
        .arg(&keys.payload_prefix)
        .arg(config.max_attempts)
        .arg(ms(config.backoff))
        .arg(ms(config.backoff_cap))
        .arg(ms(config.check_ahead));
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
    // One retry: a settle is fenced, so repeating it is harmless.
    for attempt in 0..2 {
        match invocation.invoke_async::<Vec<i64>>(&mut conn).await {
            Ok(results) => {
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
                return;
            }
            Err(error) => {
                counters.error("settle", &error);
                if attempt == 0 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(shard: u32, id: u32) -> Settle {
        Settle {
            shard,
            id: id.to_string().into_bytes(),
            token: 1,
            action: Action::Ack,
        }
    }

    fn ids(chunk: &[Settle]) -> Vec<String> {
        chunk
            .iter()
            .map(|settle| String::from_utf8(settle.id.clone()).unwrap())
            .collect()
    }

    #[test]
    fn outside_a_burst_every_outcome_goes_at_once_a_shard_a_call_in_turn() {
        let mut outbox = Outbox::new(3);
        let now = Instant::now();
        for (shard, id) in [(2, 1), (0, 2), (2, 3), (1, 4), (0, 5)] {
            outbox.push(now, ack(shard, id));
        }
        let mut calls = Vec::new();
        while let Some((shard, chunk)) = outbox.next_call(now, None) {
            calls.push((shard, ids(&chunk)));
        }
        assert!(outbox.is_empty());
        let strings = |ids: &[&str]| ids.iter().map(|id| id.to_string()).collect::<Vec<_>>();
        assert_eq!(
            calls,
            [
                (0, strings(&["2", "5"])),
                (1, strings(&["4"])),
                (2, strings(&["1", "3"]))
            ]
        );
    }

    #[test]
    fn a_call_takes_at_most_a_batch_and_the_next_shard_goes_before_the_rest() {
        let mut outbox = Outbox::new(2);
        let now = Instant::now();
        for id in 0..BATCH as u32 + 1 {
            outbox.push(now, ack(0, id));
        }
        outbox.push(now, ack(1, 9_999));
        let (shard, chunk) = outbox.next_call(now, None).unwrap();
        assert_eq!((shard, chunk.len()), (0, BATCH));
        assert_eq!(ids(&chunk[..1]), ["0"], "oldest first");
        // Shard 0 has one more, but shard 1's turn comes first.
        assert_eq!(outbox.next_call(now, None).unwrap().0, 1);
        let (shard, chunk) = outbox.next_call(now, None).unwrap();
        assert_eq!((shard, ids(&chunk)), (0, vec![BATCH.to_string()]));
        assert!(outbox.next_call(now, None).is_none());
    }

    #[test]
    fn during_a_burst_outcomes_wait_until_the_oldest_of_a_shard_waited_the_hold() {
        let hold = Duration::from_millis(100);
        let mut outbox = Outbox::new(2);
        let start = Instant::now();
        outbox.push(start, ack(0, 1));
        outbox.push(start + Duration::from_millis(60), ack(1, 2));
        outbox.push(start + Duration::from_millis(60), ack(0, 3));
        // Held: no outcome has waited the hold.
        let at = start + Duration::from_millis(99);
        assert!(outbox.next_call(at, Some(hold)).is_none());
        assert!(!outbox.is_empty());
        // Shard 0's oldest has: its call goes, with the younger one of the same shard.
        let at = start + hold;
        let (shard, chunk) = outbox.next_call(at, Some(hold)).unwrap();
        assert_eq!((shard, ids(&chunk)), (0, vec!["1".into(), "3".into()]));
        // Shard 1's came later: still held; the burst over, it goes at once.
        assert!(outbox.next_call(at, Some(hold)).is_none());
        let (shard, chunk) = outbox.next_call(at, None).unwrap();
        assert_eq!((shard, ids(&chunk)), (1, vec!["2".into()]));
        assert!(outbox.is_empty());
    }
}
