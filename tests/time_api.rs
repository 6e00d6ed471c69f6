//! `shardwheel::time` without tokio's test clock: tokio's shapes and behaviour on the
//! engine, where they differ from the engine's own API (outputs, deadlines fixed at the
//! call, panics where tokio panics).

use shardwheel::time::{self, Duration, Instant, MissedTickBehavior};
use std::task::{Context, Poll, Waker};

#[test]
#[should_panic(expected = "`period` must be non-zero.")]
fn an_interval_of_zero_period_panics_as_tokios() {
    let _ = time::interval(Duration::ZERO);
}

#[test]
#[should_panic(expected = "`period` must be non-zero.")]
fn an_interval_at_of_zero_period_panics_as_tokios() {
    let _ = time::interval_at(Instant::now(), Duration::ZERO);
}

#[test]
fn a_sleeps_deadline_counts_from_the_call_and_is_known_before_the_first_poll() {
    let before = Instant::now();
    let sleep = time::sleep(Duration::from_millis(30));
    let after = Instant::now();
    let deadline = sleep.deadline();
    assert!(deadline >= before + Duration::from_millis(30));
    assert!(deadline <= after + Duration::from_millis(30));
    std::thread::sleep(Duration::from_millis(40)); // made, not polled: its time runs
    assert_eq!(sleep.deadline(), deadline);
    let mut sleep = std::pin::pin!(sleep);
    let mut cx = Context::from_waker(Waker::noop());
    assert_eq!(
        sleep.as_mut().poll(&mut cx),
        Poll::Ready(()),
        "due at its first poll"
    );
    assert!(sleep.is_elapsed());
}

#[test]
fn a_duration_too_long_for_the_clock_sleeps_about_thirty_years_as_tokios() {
    let sleep = time::sleep(Duration::MAX);
    let years = sleep.deadline() - Instant::now();
    assert!(years > Duration::from_secs(86_400 * 365 * 29), "{years:?}");
    assert!(years <= Duration::from_secs(86_400 * 365 * 30), "{years:?}");
}

#[test]
fn reset_moves_a_sleep_and_its_deadline() {
    futures::executor::block_on(async {
        let mut sleep = std::pin::pin!(time::sleep(Duration::from_secs(3600)));
        let soon = Instant::now() + Duration::from_millis(2);
        sleep.as_mut().reset(soon);
        assert_eq!(sleep.deadline(), soon);
        sleep.as_mut().await;
        assert!(Instant::now() >= soon);
    });
}

#[test]
fn a_timeout_ends_with_elapsed_that_converts_into_a_timed_out_io_error() {
    futures::executor::block_on(async {
        let stuck = time::timeout(Duration::from_millis(2), std::future::pending::<()>());
        let elapsed = stuck.await.unwrap_err();
        assert_eq!(elapsed.to_string(), "deadline has elapsed");
        let io = std::io::Error::from(elapsed);
        assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);
        let deadline = Instant::now() + Duration::from_millis(2);
        let stuck = time::timeout_at(deadline, std::future::pending::<()>());
        assert!(stuck.await.is_err());
        assert!(Instant::now() >= deadline);
    });
}

#[test]
fn interval_ticks_give_time_instants_and_resets_move_the_next_tick() {
    futures::executor::block_on(async {
        let start = Instant::now() + Duration::from_millis(2);
        let mut interval = time::interval_at(start, Duration::from_millis(2));
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        assert_eq!(interval.tick().await, start);
        assert_eq!(interval.tick().await, start + Duration::from_millis(2));
        let at = Instant::now() + Duration::from_millis(5);
        interval.reset_at(at);
        assert_eq!(interval.tick().await, at);
        interval.reset_immediately();
        assert!(interval.tick().await <= Instant::now());
        let mut cx = Context::from_waker(Waker::noop());
        interval.reset_after(Duration::from_secs(3600));
        assert!(interval.poll_tick(&mut cx).is_pending());
        interval.reset();
        assert!(
            interval.poll_tick(&mut cx).is_pending(),
            "a period from now"
        );
        assert_eq!(interval.period(), Duration::from_millis(2));
    });
}

#[test]
fn instants_convert_to_and_from_std_losslessly_and_subtract_saturating() {
    let now = Instant::now();
    let std: std::time::Instant = now.into();
    assert_eq!(Instant::from(std), now);
    assert_eq!(now - (now + Duration::from_secs(1)), Duration::ZERO);
    let mut later = now;
    later += Duration::from_secs(2);
    later -= Duration::from_secs(1);
    assert_eq!(later.duration_since(now), Duration::from_secs(1));
    assert_eq!(now.checked_duration_since(later), None);
}
