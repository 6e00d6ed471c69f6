//! Owned (`'static`) futures and the manual clock: a `Sleep` and a `Timeout` kept in a
//! struct across `.await`s in a spawned task; the rule for when a deadline is fixed; a
//! manual timer's `Instant`-based calls, which follow its own time and not the real one.

mod common;

use shardwheel::{Sleep, Timeout, TimeoutError, Timer};
use std::future::{Future, Pending, pending};
use std::pin::Pin;
use std::sync::mpsc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn manual() -> Timer {
    Timer::builder().shards(1).manual().build().unwrap()
}

fn poll<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

/// A connection as a server keeps one: its idle timer and a request's timeout, owned.
struct Connection {
    idle: Sleep,
    request: Pin<Box<Timeout<Pending<u32>>>>,
}

#[test]
fn a_sleep_and_a_timeout_live_in_a_struct_across_awaits_in_a_spawned_task() {
    fn send_sync_static<T: Send + Sync + 'static>(_: &T) {}
    let runtime = common::tokio_runtime();
    let timer = Timer::builder().shards(2).build().unwrap();
    let connection = Connection {
        idle: timer.sleep(ms(30)),
        request: Box::pin(timer.timeout(ms(10), pending())),
    };
    send_sync_static(&connection.idle);
    send_sync_static(&connection.request);
    let task = runtime.spawn({
        let timer = timer.clone();
        async move {
            let mut connection = connection;
            let start = Instant::now();
            // Another await between the two: the struct lives across it.
            tokio::task::yield_now().await;
            let timed_out = (&mut connection.request).await;
            tokio::task::yield_now().await;
            (&mut connection.idle).await.unwrap();
            let idle_at = start.elapsed();
            // Reused: the idle timer moved on, as after a message.
            connection.idle.reset(timer.now() + ms(5));
            (&mut connection.idle).await.unwrap();
            (timed_out, idle_at, connection.idle.is_elapsed())
        }
    });
    drop(timer); // the task's clone keeps the engine
    let (timed_out, idle_at, elapsed) = runtime.block_on(task).unwrap();
    assert_eq!(timed_out, Err(TimeoutError::Elapsed));
    assert!(idle_at >= ms(30), "never early: {idle_at:?}");
    assert!(elapsed);
}

#[test]
fn a_delay_counts_from_the_first_poll_and_an_instant_is_fixed() {
    let timer = manual();
    let delayed = timer.sleep(ms(10));
    let until = timer.sleep_until(timer.now() + ms(10));
    let timeout = timer.timeout(ms(10), pending::<()>());
    assert_eq!(delayed.deadline(), None);
    assert_eq!(timeout.deadline(), None);
    timer.advance(ms(5)).unwrap();
    let (mut delayed, mut until, mut timeout) = (delayed, until, Box::pin(timeout));
    assert!(poll(&mut delayed).is_pending());
    assert!(poll(&mut until).is_pending());
    assert!(poll(&mut timeout).is_pending());
    let fixed = timer.now() + ms(10);
    assert_eq!(
        delayed.deadline(),
        Some(fixed),
        "10 ms after the first poll"
    );
    assert_eq!(timeout.deadline(), Some(fixed));
    assert_eq!(until.deadline(), Some(fixed - ms(5)), "as given");
    timer.advance(ms(5)).unwrap();
    assert_eq!(poll(&mut until), Poll::Ready(Ok(())));
    assert!(poll(&mut delayed).is_pending());
    assert!(poll(&mut timeout).is_pending());
    timer.advance(ms(5)).unwrap();
    assert_eq!(poll(&mut delayed), Poll::Ready(Ok(())));
    assert_eq!(poll(&mut timeout), Poll::Ready(Err(TimeoutError::Elapsed)));
}

#[test]
fn a_timeout_gives_its_future_back_and_moves_its_deadline() {
    let timer = manual();
    let mut timeout = Box::pin(timer.timeout(ms(10), pending::<()>()));
    assert!(poll(&mut timeout).is_pending());
    timeout.as_mut().reset(timer.now() + ms(50));
    timer.advance(ms(49)).unwrap();
    assert!(poll(&mut timeout).is_pending(), "not at the old deadline");
    timer.advance(ms(1)).unwrap();
    assert_eq!(poll(&mut timeout), Poll::Ready(Err(TimeoutError::Elapsed)));

    let mut unfinished = timer.timeout(ms(10), std::future::ready(3));
    assert_eq!(unfinished.get_ref().clone().into_inner(), 3);
    *unfinished.get_mut() = std::future::ready(4);
    assert_eq!(futures::executor::block_on(unfinished.into_inner()), 4);
    assert_eq!(
        timer.pending(),
        0,
        "the first timeout's timer fired, none left"
    );
}

// The manual clock ignores real time: with 100 ms of real sleep inside, every deadline
// given as an `Instant` still falls where the manual time says.
#[test]
fn a_manual_timers_instants_follow_its_own_time_not_the_real_one() {
    let timer = manual();
    let start = timer.now();
    let (fired, rx) = mpsc::channel();
    timer
        .schedule_at(start + ms(60), move || fired.send(()).unwrap())
        .unwrap();
    std::thread::sleep(ms(100));
    assert_eq!(timer.now(), start, "real time did not move it");
    let mut sleep = timer.sleep_until(start + ms(50));
    let mut passed = timer.sleep_until(start - ms(1));
    assert_eq!(poll(&mut passed), Poll::Ready(Ok(())));
    assert!(poll(&mut sleep).is_pending());
    assert_eq!(
        timer.pending(),
        2,
        "schedule_at's and the sleep's; none for the passed one"
    );
    timer.advance(ms(49)).unwrap();
    assert!(poll(&mut sleep).is_pending());
    timer.advance(ms(1)).unwrap();
    assert_eq!(poll(&mut sleep), Poll::Ready(Ok(())));
    assert!(
        rx.try_recv().is_err(),
        "schedule_at's callback is not due yet"
    );
    timer.advance(ms(10)).unwrap();
    rx.try_recv().unwrap();
    assert_eq!(timer.now(), start + ms(60));
    assert_eq!(
        timer.stats().scheduled,
        2,
        "the passed sleep needed no timer"
    );
}

#[test]
fn reset_at_follows_the_manual_time() {
    let timer = manual();
    let (fired, rx) = mpsc::channel();
    let handle = timer
        .schedule(ms(10), move || fired.send(()).unwrap())
        .unwrap();
    std::thread::sleep(ms(100));
    timer.reset_at(handle, timer.now() + ms(30)).unwrap();
    timer.advance(ms(29)).unwrap();
    assert!(rx.try_recv().is_err());
    timer.advance(ms(1)).unwrap();
    rx.try_recv().unwrap();
}

#[test]
fn a_future_keeps_its_engine_running_after_the_timer_is_dropped() {
    let timer = Timer::builder().shards(1).build().unwrap();
    let sleep = timer.sleep(ms(5));
    let timeout = timer.timeout(ms(5), pending::<()>());
    drop(timer);
    assert_eq!(futures::executor::block_on(sleep), Ok(()));
    assert_eq!(
        futures::executor::block_on(timeout),
        Err(TimeoutError::Elapsed)
    );
}

#[test]
fn the_process_wide_timer_is_one_engine_for_the_free_functions() {
    let timer = Timer::global();
    assert!(std::ptr::eq(timer, Timer::global()));
    let sleep = timer.sleep(ms(1));
    let owned = std::thread::spawn(move || futures::executor::block_on(sleep));
    owned.join().unwrap().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let start = Instant::now();
    let (slept, stuck, quick) = runtime.block_on(async {
        let slept = tokio::spawn(shardwheel::sleep(ms(5))).await.unwrap();
        let stuck = shardwheel::timeout(ms(5), pending::<()>()).await;
        let quick = shardwheel::timeout_at(timer.now() + ms(60_000), async { 1 }).await;
        (slept, stuck, quick)
    });
    assert_eq!(
        (slept, stuck, quick),
        (Ok(()), Err(TimeoutError::Elapsed), Ok(1))
    );
    assert!(start.elapsed() >= ms(10), "never early");
    futures::executor::block_on(shardwheel::sleep_until(timer.now() + ms(1))).unwrap();
}

// tokio's `Instant` converts into std's (tokio's own `From`): the `Instant`-taking calls of
// the futures, the queue and the interval take either.
#[test]
fn tokio_instants_are_deadlines_too() {
    let timer = Timer::builder().shards(1).build().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let deadline = tokio::time::Instant::now() + ms(5);
        timer.sleep_until(deadline).await.unwrap();
        assert!(tokio::time::Instant::now() >= deadline);
        let stuck = timer.timeout_at(tokio::time::Instant::now() + ms(1), pending::<()>());
        assert_eq!(stuck.await, Err(TimeoutError::Elapsed));
        let mut queue = shardwheel::delay_queue::DelayQueue::with_timer(&timer);
        queue.insert_at('q', tokio::time::Instant::now() + ms(1));
        assert_eq!(queue.next_expired().await.unwrap().into_inner(), 'q');
    });
}
