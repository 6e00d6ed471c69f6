//! tokio's paused clock as these tests use it, on a manual shardwheel timer: `pause` makes
//! one for this thread (a `#[tokio::test]` runs on one), and a sleep advances it to its
//! deadline, as tokio's paused clock jumps there once every task waits.
//! (Each test binary that includes it uses part of it.)

#![allow(dead_code)]

use shardwheel::Timer;
use std::cell::RefCell;
use std::time::Duration;

thread_local! {
    static TIMER: RefCell<Option<Timer>> = const { RefCell::new(None) };
}

pub fn pause() {
    let timer = Timer::builder().shards(1).manual().build().unwrap();
    TIMER.set(Some(timer));
}

pub fn timer() -> Timer {
    TIMER.with_borrow(|timer| timer.clone().expect("time::pause() first"))
}

pub async fn advance(by: Duration) {
    timer().advance(by).unwrap();
}

pub async fn sleep(by: Duration) {
    advance(by).await;
}

pub async fn sleep_until(at: std::time::Instant) {
    let now = timer().now();
    advance(at.saturating_duration_since(now)).await;
}

/// `Instant::now()`: the manual timer's clock.
pub struct Instant;

impl Instant {
    pub fn now() -> std::time::Instant {
        timer().now()
    }
}
