//! What the engine's integration tests share: a timer on real threads, and a bounded wait.

#![allow(dead_code)] // each test binary uses part of it

use shardwheel::Timer;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

/// A timer with `shards` reaper threads.
pub fn timer(shards: usize) -> Timer {
    Timer::builder().shards(shards).build().expect("timer")
}

/// A tokio multi-thread runtime with 2 workers and tokio's own timer enabled (for tests
/// that put shardwheel's futures beside tokio's).
pub fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("tokio runtime")
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

/// Runs the task `task` makes of a timer twice on one 2-shard timer: spawned on a tokio
/// multi-thread runtime, then on `futures::executor`. Returns the timer.
pub fn on_tokio_and_futures_executor<F>(task: impl Fn(Timer) -> F) -> Timer
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let timer = timer(2);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let spawned = runtime.spawn(task(timer.clone()));
    runtime.block_on(spawned).unwrap();
    futures::executor::block_on(task(timer.clone()));
    timer
}

/// A waker that counts its wake-ups; its `Arc`'s count tells how many copies live.
#[derive(Default)]
pub struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// A counting waker, and its count.
pub fn counting() -> (Arc<Count>, Waker) {
    let count = Arc::new(Count::default());
    (Arc::clone(&count), Waker::from(count))
}

/// How often the waker of `count` woke its task.
pub fn wakes(count: &Count) -> usize {
    count.0.load(Ordering::Relaxed)
}
