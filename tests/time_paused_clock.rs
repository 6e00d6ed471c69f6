//! `shardwheel::time` under tokio's paused clock (feature `test-util`): a timer made while
//! tokio's clock is paused follows it (auto-advance, `advance`), one made on real time runs
//! on the engine; the same for a `DelayQueue` on the process-wide timer.

use shardwheel::Timer;
use shardwheel::time::{self, Duration, Instant};
use tokio::sync::Mutex;

/// The tests count the process-wide engine's timers: one at a time.
static ENGINE: Mutex<()> = Mutex::const_new(());

fn scheduled() -> u64 {
    Timer::global().stats().counts().scheduled
}

#[tokio::test(start_paused = true)]
async fn an_hour_of_sleep_under_start_paused_passes_at_once_on_tokios_clock() {
    let _one = ENGINE.lock().await;
    let (real, before) = (std::time::Instant::now(), scheduled());
    let start = Instant::now();
    time::sleep(Duration::from_secs(3600)).await;
    assert!(Instant::now() - start >= Duration::from_secs(3600));
    // One clock: tokio's, read through either type (feature `tokio`'s conversions).
    assert_eq!(Instant::from(tokio::time::Instant::now()), Instant::now());
    assert_eq!(
        tokio::time::Instant::from(Instant::now()),
        tokio::time::Instant::now()
    );
    // Without the paused clock it would take an hour; a generous bound, not a timing.
    assert!(real.elapsed() < Duration::from_secs(600));
    assert_eq!(
        scheduled(),
        before,
        "no engine timer for a paused-clock sleep"
    );
}

#[tokio::test]
async fn timeout_and_interval_made_after_pause_follow_advance() {
    time::pause();
    let start = Instant::now();
    let stuck = time::timeout(Duration::from_secs(60), std::future::pending::<()>());
    let mut interval = time::interval(Duration::from_secs(10));
    assert_eq!(interval.tick().await, start);
    assert!(stuck.await.is_err());
    assert!(Instant::now() - start >= Duration::from_secs(60));
    assert_eq!(interval.tick().await, start + Duration::from_secs(10));
}

#[tokio::test]
async fn after_resume_the_shifted_clock_still_serves_on_tokios_timer() {
    time::pause();
    time::advance(Duration::from_secs(3600)).await;
    time::resume();
    let deadline = Instant::now() + Duration::from_millis(5);
    time::sleep_until(deadline).await;
    assert!(Instant::now() >= deadline);
}

#[tokio::test]
async fn on_real_time_the_engine_serves() {
    let _one = ENGINE.lock().await;
    let before = scheduled();
    let sleep = time::sleep(Duration::from_millis(2));
    let deadline = sleep.deadline();
    sleep.await;
    assert!(std::time::Instant::now() >= deadline.into_std());
    assert!(scheduled() > before, "the sleep ran on the engine");
}

#[tokio::test(start_paused = true)]
async fn an_hour_in_a_delay_queue_under_start_paused_comes_out_at_once() {
    let _one = ENGINE.lock().await;
    let (real, before) = (std::time::Instant::now(), scheduled());
    let mut queue = time::DelayQueue::new();
    let start = Instant::now();
    let key = queue.insert("in an hour", Duration::from_secs(3600));
    // Its deadline is read from tokio's clock, and reads back as given.
    let deadline = start + Duration::from_secs(3600);
    assert_eq!(queue.deadline(&key), deadline.into_std());
    let expired = queue.next_expired().await.unwrap();
    assert_eq!(
        (expired.into_inner(), Instant::now() >= deadline),
        ("in an hour", true)
    );
    assert!(queue.next_expired().await.is_none());
    // Without the paused clock it would take an hour; a generous bound, not a timing.
    assert!(real.elapsed() < Duration::from_secs(600));
    assert_eq!(
        scheduled(),
        before,
        "no engine timer for a paused-clock queue"
    );
}

#[tokio::test]
async fn a_delay_queue_made_on_real_time_stays_on_the_engine_after_pause() {
    let _one = ENGINE.lock().await;
    let before = scheduled();
    let mut queue = time::DelayQueue::new();
    time::pause();
    queue.insert("soon", Duration::from_millis(2));
    let real = std::time::Instant::now();
    assert_eq!(queue.next_expired().await.unwrap().into_inner(), "soon");
    // The engine's sleep, on real time: tokio's paused clock did not move it.
    assert!(real.elapsed() >= Duration::from_millis(1));
    assert!(scheduled() > before, "the queue's sleep ran on the engine");
}
