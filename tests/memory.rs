//! Memory comes back after a spike whatever the global allocator. This test binary runs on
//! mimalloc, which keeps memory that one thread frees cached for the thread that allocated
//! it: chunks taken from it stayed resident after the engine gave them back.

use shardwheel::Timer;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Resident memory of this process, in bytes.
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Polls `done` every 10 ms for up to 60 s; whether it came true.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > Duration::from_secs(60) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

#[test]
#[cfg(target_os = "linux")]
fn a_spike_leaves_the_process_under_mimalloc() {
    const SPIKE: u64 = 1_000_000;
    let timer = Timer::builder().shards(1).build().unwrap();
    let before = resident_bytes();
    let handles: Vec<_> = (0..SPIKE)
        .map(|_| timer.schedule(Duration::from_secs(600), || {}).unwrap())
        .collect();
    assert!(eventually(|| timer.stats().scheduled == SPIKE), "taken in");
    let grown = resident_bytes().saturating_sub(before);
    for handle in handles {
        assert!(timer.cancel(handle));
    }
    // The shard keeps six chunks (4,032 slots) and gives the rest back.
    assert!(eventually(|| timer.stats().slots <= 4_032), "given back");
    // What is left of the spike: the chunks' frees may wait a moment for the epoch; the
    // list of handles (16 MB) may stay in mimalloc's cache.
    let left = || resident_bytes().saturating_sub(before);
    assert!(
        eventually(|| left() < grown / 4),
        "{} MB of the spike's {} MB still resident",
        left() >> 20,
        grown >> 20
    );
}
