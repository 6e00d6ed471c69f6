//! The cheapest clock a timer could read for a deadline: one `rdtsc` on x86_64 (shardwheel's
//! own counter clock reads the same), for the peers that stand for a timer's least cost
//! (the futures bench's `waker-and-clock` and `thread-wheel`, the engine bench's
//! `wheel-and-clock`). Its units are the counter's, taken for nanoseconds: the peers that
//! use it never fire, so a deadline only has to be as far off as a timer's would be.

use std::time::Duration;

/// A deadline `limit` after a reading of the cheapest clock (in its own units).
pub fn deadline(limit: Duration) -> u64 {
    read_clock().wrapping_add(limit.as_nanos() as u64)
}

#[cfg(target_arch = "x86_64")]
fn read_clock() -> u64 {
    // SAFETY: `rdtsc` reads the time-stamp counter, which every x86_64 processor has; it
    // touches no memory.
    unsafe { std::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
fn read_clock() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}
