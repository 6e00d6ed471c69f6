//! Per-timer slack: timers within each other's slack fire in one reaper pass, never before
//! their deadline nor after deadline + slack, beside timers that keep exact deadlines; and
//! the same for sleeps and timeouts. On manual timers, so that every step is exact.

use proptest::prelude::*;
use shardwheel::{TimeoutError, Timer};
use std::future::{Future, pending};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

fn manual() -> Timer {
    Timer::builder().shards(1).manual().build().unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What fired: each timer's name, the millisecond step it fired at, and the reaper passes
/// counted when it ran.
type Log = Arc<Mutex<Vec<(&'static str, u64, u64)>>>;

/// Advances `timer` one millisecond at a time for `steps`, `step` telling the callbacks
/// where it is.
fn step_through(timer: &Timer, step: &Mutex<u64>, steps: u64) {
    for at in 1..=steps {
        *step.lock().unwrap() = at;
        timer.advance(ms(1)).unwrap();
    }
}

/// Schedules a timer named `name`, due in `delay` ms with `slack` ms of slack, that logs
/// when it fired.
fn logged(
    timer: &Timer,
    log: &Log,
    step: &Arc<Mutex<u64>>,
    name: &'static str,
    delay: u64,
    slack: u64,
) {
    let (log, step, clone) = (Arc::clone(log), Arc::clone(step), timer.clone());
    timer
        .schedule_within(ms(delay), ms(slack), move || {
            let passes = clone.counts().passes;
            log.lock()
                .unwrap()
                .push((name, *step.lock().unwrap(), passes));
        })
        .unwrap();
}

#[test]
fn timers_within_each_others_slack_fire_in_one_pass_and_exact_ones_on_time() {
    let timer = manual();
    let (log, step) = (Log::default(), Arc::new(Mutex::new(0)));
    // 10 ms of slack on a 1 ms tick: deadlines round up to 8 ms steps.
    logged(&timer, &log, &step, "a", 3, 10);
    logged(&timer, &log, &step, "b", 6, 10);
    logged(&timer, &log, &step, "exact", 5, 0);
    logged(&timer, &log, &step, "next step", 9, 10);
    step_through(&timer, &step, 20);

    let log = log.lock().unwrap();
    let at = |name| log.iter().find(|(n, ..)| *n == name).copied().unwrap();
    assert_eq!(log.len(), 4, "{log:?}");
    assert_eq!(at("exact").1, 5, "no slack: its exact deadline");
    assert_eq!((at("a").1, at("b").1), (8, 8), "{log:?}");
    assert_eq!(at("a").2, at("b").2, "in one reaper pass");
    assert_eq!(at("next step").1, 16, "{log:?}");
}

#[test]
fn zero_slack_keeps_the_deadline_as_asked() {
    let timer = manual();
    let (log, step) = (Log::default(), Arc::new(Mutex::new(0)));
    logged(&timer, &log, &step, "a", 3, 0);
    logged(&timer, &log, &step, "b", 6, 0);
    step_through(&timer, &step, 10);
    let log = log.lock().unwrap();
    let steps: Vec<u64> = log.iter().map(|&(_, at, _)| at).collect();
    assert_eq!(steps, [3, 6]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_timer_with_slack_fires_neither_before_its_deadline_nor_after_the_slack(
        delay_us in 1u64..200_000,
        slack_us in 0u64..50_000,
        tick_us in 1u64..3_000,
    ) {
        let timer = Timer::builder()
            .shards(1)
            .tick(Duration::from_micros(tick_us))
            .manual()
            .build()
            .unwrap();
        let (delay, slack) = (Duration::from_micros(delay_us), Duration::from_micros(slack_us));
        timer.schedule_within(delay, slack, || {}).unwrap();
        timer.advance(delay - Duration::from_nanos(1)).unwrap();
        prop_assert_eq!(timer.pending(), 1, "fired before its deadline");
        timer.advance(slack + Duration::from_nanos(1)).unwrap();
        prop_assert_eq!(timer.pending(), 0, "not fired by deadline + slack");
    }
}

#[test]
fn inserts_and_resets_with_slack_round_alike() {
    let timer = Timer::builder()
        .shards(1)
        .manual()
        .build_with(|_: u8| {})
        .unwrap();
    let handle = timer.insert_within(ms(50), ms(10), 1).unwrap();
    timer
        .insert_at_within(timer.now() + ms(3), ms(10), 2)
        .unwrap();
    timer.reset_within(handle, ms(2), ms(10)).unwrap();
    timer.advance(ms(7)).unwrap();
    assert_eq!(timer.pending(), 2, "both wait for the 8 ms step");
    timer.advance(ms(1)).unwrap();
    assert_eq!(timer.pending(), 0);
}

fn poll<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn a_sleep_with_slack_ends_in_its_step_and_keeps_the_slack_when_reset() {
    let timer = manual();
    let mut sleep = timer.sleep_within(ms(3), ms(10));
    assert!(poll(&mut sleep).is_pending());
    assert_eq!(sleep.deadline(), Some(timer.now() + ms(3)), "as asked");
    timer.advance(ms(7)).unwrap();
    assert!(poll(&mut sleep).is_pending());
    timer.advance(ms(1)).unwrap();
    assert_eq!(poll(&mut sleep), Poll::Ready(Ok(())));

    // Reset to 9 ms from the start: the next step, 16 ms.
    sleep.reset(timer.now() + ms(1));
    assert!(poll(&mut sleep).is_pending());
    timer.advance(ms(7)).unwrap();
    assert!(poll(&mut sleep).is_pending());
    timer.advance(ms(1)).unwrap();
    assert_eq!(poll(&mut sleep), Poll::Ready(Ok(())));

    let mut until = timer.sleep_until_within(timer.now() + ms(1), ms(4));
    assert!(poll(&mut until).is_pending());
    timer.advance(ms(3)).unwrap();
    assert!(poll(&mut until).is_pending());
    timer.advance(ms(1)).unwrap();
    assert_eq!(poll(&mut until), Poll::Ready(Ok(())));
}

#[test]
fn a_timeout_with_slack_elapses_in_its_step() {
    let timer = manual();
    let mut timeout = Box::pin(timer.timeout_within(ms(3), ms(10), pending::<()>()));
    let mut at = Box::pin(timer.timeout_at_within(timer.now() + ms(5), ms(10), pending::<()>()));
    assert!(poll(&mut timeout).is_pending());
    assert!(poll(&mut at).is_pending());
    timer.advance(ms(7)).unwrap();
    assert!(poll(&mut timeout).is_pending());
    assert!(poll(&mut at).is_pending());
    timer.advance(ms(1)).unwrap();
    assert_eq!(poll(&mut timeout), Poll::Ready(Err(TimeoutError::Elapsed)));
    assert_eq!(poll(&mut at), Poll::Ready(Err(TimeoutError::Elapsed)));
}
