//! Purgatory throughput: T threads each put operations in the purgatory with
//! `try_complete_else_watch` (one key of 1,024, a timeout of uniform [100 ms, 10 s]) and,
//! one operation later, announce the event that completes an operation put in 64
//! operations earlier with `check_and_complete` (the acknowledgement of a request in
//! flight). One operation in 100 never becomes ready and expires. A figure is operations
//! (a watch plus an event) per second, median of rounds.
//!
//! `cargo bench --bench purgatory`; prints RESULT lines.

mod common;

use common::{SplitMix64, load_average, median};
use mimalloc::MiMalloc;
use shardwheel::Timer;
use shardwheel::purgatory::{DelayedOperation, Purgatory};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

const OPS_PER_THREAD: u64 = 500_000;
const KEYS: u64 = 1_024;
const IN_FLIGHT: u64 = 64;
const ROUNDS: usize = 5;

struct Op {
    delay: Duration,
    ready: Arc<AtomicBool>,
    completed: Arc<AtomicU64>,
}

impl DelayedOperation for Op {
    fn delay(&self) -> Duration {
        self.delay
    }

    fn try_complete(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    fn on_complete(&self) {
        self.completed.fetch_add(1, Ordering::Relaxed);
    }
}

fn round(threads: u64) -> f64 {
    let purgatory: Arc<Purgatory<u64, Op>> =
        Arc::new(Purgatory::new(Timer::builder()).expect("purgatory"));
    let completed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|thread| {
            let (purgatory, completed) = (Arc::clone(&purgatory), Arc::clone(&completed));
            std::thread::spawn(move || {
                let mut random = SplitMix64(42 + thread);
                let mut flight = std::collections::VecDeque::new();
                let mut acknowledged_here = 0;
                for i in 0..OPS_PER_THREAD {
                    let key = random.between(0, KEYS - 1);
                    let ready = Arc::new(AtomicBool::new(false));
                    let op = Op {
                        delay: Duration::from_millis(random.between(100, 10_000)),
                        ready: Arc::clone(&ready),
                        completed: Arc::clone(&completed),
                    };
                    purgatory
                        .try_complete_else_watch(op, [key])
                        .expect("scheduled");
                    flight.push_back((key, ready, i % 100 != 99));
                    if flight.len() as u64 > IN_FLIGHT {
                        let (key, ready, acknowledged) = flight.pop_front().expect("in flight");
                        if acknowledged {
                            ready.store(true, Ordering::Release);
                            purgatory.check_and_complete(&key);
                            acknowledged_here += 1;
                        }
                    }
                }
                acknowledged_here
            })
        })
        .collect();
    let acknowledged: u64 = workers
        .into_iter()
        .map(|worker| worker.join().expect("worker"))
        .sum();
    let rate = (threads * OPS_PER_THREAD) as f64 / start.elapsed().as_secs_f64();
    // Every acknowledged operation was completed by its event, at once (expiries may add
    // to the count, never take from it).
    assert!(completed.load(Ordering::Relaxed) >= acknowledged);
    rate
}

fn main() {
    println!("# load average at start: {}", load_average());
    for threads in [1, 2] {
        let rates: Vec<f64> = (0..ROUNDS).map(|_| round(threads)).collect();
        println!(
            "RESULT purgatory T={threads} shardwheel ops_per_s={:.0}",
            median(rates)
        );
    }
    println!("# load average at end: {}", load_average());
}
