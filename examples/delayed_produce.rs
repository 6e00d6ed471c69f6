//! Kafka's DelayedProduce on shardwheel's purgatory: a produce request appends to a
//! partition's log and waits until the partition's replicas have acknowledged it (its high
//! watermark has reached the request's offset), or times out.
//!
//! Replica threads advance the high watermarks and announce it with `check_and_complete`;
//! one partition's replica stalls halfway, so its later requests time out.
//!
//! `cargo run --release --example delayed_produce`

use shardwheel::Timer;
use shardwheel::purgatory::{DelayedOperation, Purgatory};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

const PARTITIONS: usize = 4;
const REQUESTS: u64 = 20_000;
const STALLED: usize = 3;
const TIMEOUT: Duration = Duration::from_millis(50);

/// A partition: its log end offset and its high watermark (what every replica has).
#[derive(Default)]
struct Partition {
    log_end: AtomicU64,
    high_watermark: AtomicU64,
}

#[derive(Debug, PartialEq)]
enum Response {
    Acknowledged,
    TimedOut,
}

struct DelayedProduce {
    partition: Arc<Partition>,
    /// The high watermark that acknowledges this request's record.
    required: u64,
    reply: mpsc::Sender<Response>,
}

impl DelayedOperation for DelayedProduce {
    fn delay(&self) -> Duration {
        TIMEOUT
    }

    fn try_complete(&self) -> bool {
        self.partition.high_watermark.load(Ordering::Acquire) >= self.required
    }

    fn on_complete(&self) {
        // Runs before `on_expiration` when it expires: look again rather than guess.
        let response = if self.try_complete() {
            Response::Acknowledged
        } else {
            Response::TimedOut
        };
        let _ = self.reply.send(response);
    }
}

fn main() {
    let partitions: Arc<Vec<Arc<Partition>>> =
        Arc::new((0..PARTITIONS).map(|_| Arc::default()).collect());
    let purgatory: Arc<Purgatory<usize, DelayedProduce>> =
        Arc::new(Purgatory::new(Timer::builder()).expect("purgatory"));
    let (reply, responses) = mpsc::channel();
    let done = Arc::new(AtomicBool::new(false));

    // Replicas: copy each log up to its end every 200 us, then say so.
    let replicas: Vec<_> = (0..PARTITIONS)
        .map(|index| {
            let (partitions, purgatory, done) = (
                Arc::clone(&partitions),
                Arc::clone(&purgatory),
                Arc::clone(&done),
            );
            thread::spawn(move || {
                let partition = &partitions[index];
                while !done.load(Ordering::Relaxed) {
                    let end = partition.log_end.load(Ordering::Acquire);
                    let stalled = index == STALLED && end > REQUESTS / PARTITIONS as u64 / 2;
                    if !stalled {
                        partition.high_watermark.store(end, Ordering::Release);
                        purgatory.check_and_complete(&index);
                    }
                    thread::sleep(Duration::from_micros(200));
                }
            })
        })
        .collect();

    for request in 0..REQUESTS {
        let index = request as usize % PARTITIONS;
        let partition = Arc::clone(&partitions[index]);
        let required = partition.log_end.fetch_add(1, Ordering::AcqRel) + 1;
        let produce = DelayedProduce {
            partition,
            required,
            reply: reply.clone(),
        };
        purgatory
            .try_complete_else_watch(produce, [index])
            .expect("timer running, no max_pending");
    }
    drop(reply);

    let (mut acknowledged, mut timed_out) = (0, 0);
    for response in responses.iter().take(REQUESTS as usize) {
        match response {
            Response::Acknowledged => acknowledged += 1,
            Response::TimedOut => timed_out += 1,
        }
    }
    done.store(true, Ordering::Relaxed);
    for replica in replicas {
        replica.join().expect("replica");
    }
    println!(
        "{REQUESTS} produce requests: {acknowledged} acknowledged, {timed_out} timed out \
         (partition {STALLED}'s replica stalled halfway); waiting now: {}, in watcher lists: {}",
        purgatory.delayed(),
        purgatory.watched()
    );
    assert_eq!(acknowledged + timed_out, REQUESTS);
    assert!(timed_out > 0 && timed_out <= REQUESTS / PARTITIONS as u64);
}
