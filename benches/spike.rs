//! The spike of issue 7: resident memory before, with 10M timers pending, and once they
//! are all cancelled and the reapers have given the memory back.
//!
//! This benchmark runs on the system allocator, unlike the others (mimalloc): it measures
//! what the engine gives back, and glibc's allocator hands large freed blocks (the slabs'
//! chunks) straight back to the OS, so the resident size shows it. mimalloc keeps memory
//! freed from another thread cached in the heap of the thread that allocated it until that
//! thread allocates or collects again (here: 719 MB still resident after the engine had
//! freed everything; 27 MB with `MIMALLOC_PURGE_DELAY=0`).
//!
//! Run: `cargo bench --bench spike`.

mod common;

use common::{SplitMix64, load_average, status_bytes};
use shardwheel::{Timer, TimerHandle};
use std::alloc::System;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::thread;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: System = System;

const SPIKE_TIMERS: usize = 10_000_000;

/// Resident memory of this process, in bytes.
fn resident_bytes() -> u64 {
    status_bytes("VmRSS:")
}

/// Timers that ran although they were all cancelled (must stay 0).
static RAN: AtomicUsize = AtomicUsize::new(0);

fn main() {
    println!("# load average at start: {}", load_average());
    let timer = Timer::builder().build().expect("timer");
    let before = resident_bytes();
    let mut rng = SplitMix64(42);
    let armed: Vec<TimerHandle> = (0..SPIKE_TIMERS)
        .map(|_| {
            let delay = Duration::from_secs(rng.between(60, 600));
            let callback = || {
                RAN.fetch_add(1, Relaxed);
            };
            timer
                .schedule_at(Instant::now() + delay, callback)
                .expect("schedule")
        })
        .collect();
    thread::sleep(Duration::from_secs(1));
    let pending = resident_bytes();
    let cancelled = armed
        .into_iter()
        .filter(|&handle| timer.cancel(handle))
        .count();
    assert_eq!(cancelled, SPIKE_TIMERS);
    let start = Instant::now();
    while timer.stats().cancelled < SPIKE_TIMERS as u64 && start.elapsed() < Duration::from_secs(60)
    {
        thread::sleep(Duration::from_millis(10));
    }
    let cancelled_at = Instant::now();
    // The reapers give the memory back over their next passes: wait until the resident
    // size stops falling (no new low for 3 s), for at most 30 s.
    let (mut after, mut low_at) = (resident_bytes(), Instant::now());
    while low_at.elapsed() < Duration::from_secs(3)
        && cancelled_at.elapsed() < Duration::from_secs(30)
    {
        thread::sleep(Duration::from_millis(50));
        let now = resident_bytes();
        if now < after {
            (after, low_at) = (now, Instant::now());
        }
    }
    // The slots kept still serve: a second, smaller wave is scheduled and cancelled.
    let wave: Vec<TimerHandle> = (0..100_000)
        .map(|_| {
            let callback = || {
                RAN.fetch_add(1, Relaxed);
            };
            timer
                .schedule(Duration::from_secs(60), callback)
                .expect("schedule")
        })
        .collect();
    let cancelled = wave
        .into_iter()
        .filter(|&handle| timer.cancel(handle))
        .count();
    let mb = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    println!(
        "RESULT spike shardwheel rss_before_mb={:.1} rss_pending_mb={:.0} rss_after_cancel_mb={:.1} after_vs_before={:.2} settled_ms={} ran={} second_wave_cancelled={}",
        mb(before),
        mb(pending),
        mb(after),
        after as f64 / before as f64,
        low_at.duration_since(cancelled_at).as_millis(),
        RAN.load(Relaxed),
        cancelled,
    );
    timer.shutdown();
    println!("# load average at end: {}", load_average());
}
