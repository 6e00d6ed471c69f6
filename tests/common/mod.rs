//! What the engine's integration tests share: a timer on real threads, and a bounded wait.

#![allow(dead_code)] // each test binary uses part of it

use shardwheel::Timer;
use std::thread;
use std::time::{Duration, Instant};

/// A timer with `shards` reaper threads.
pub fn timer(shards: usize) -> Timer {
    Timer::builder().shards(shards).build().expect("timer")
}

/// Waits until `done` holds, for at most `limit`; whether it did.
pub fn wait_for(limit: Duration, done: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > limit {
            return false;
        }
        thread::sleep(Duration::from_millis(1));
    }
    true
}
