//! `Interval` against a model of tokio's missed-tick behaviours on a manual timer (a task
//! that works a random while between ticks), then on real reapers under tokio and
//! `futures::executor`.

mod common;

use proptest::prelude::*;
use shardwheel::{MissedTickBehavior, Timer};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

fn behavior() -> impl Strategy<Value = MissedTickBehavior> {
    prop_oneof![
        Just(MissedTickBehavior::Burst),
        Just(MissedTickBehavior::Delay),
        Just(MissedTickBehavior::Skip),
    ]
}

/// The next tick as tokio documents it, after the tick due at `tick` came at `now`: on the
/// grid unless it came more than 5 ms late; then at once for each missed one (`Burst`), a
/// period after now (`Delay`), or at the first tick of the grid after now (`Skip`).
fn documented_next(
    behavior: MissedTickBehavior,
    tick: Duration,
    now: Duration,
    period: Duration,
) -> Duration {
    if now <= tick + Duration::from_millis(5) {
        return tick + period;
    }
    match behavior {
        MissedTickBehavior::Burst => tick + period,
        MissedTickBehavior::Delay => now + period,
        MissedTickBehavior::Skip => {
            let mut next = tick + period;
            while next <= now {
                next += period;
            }
            next
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn ticks_follow_the_documented_behaviours(
        period_ms in 1u64..30,
        behavior in behavior(),
        work_ms in prop::collection::vec(0u64..100, 1..40),
    ) {
        let period = Duration::from_millis(period_ms);
        let timer = Timer::builder().shards(1).manual().build().unwrap();
        let start = timer.now();
        let mut interval = timer.interval(period).unwrap();
        interval.set_missed_tick_behavior(behavior);
        let mut cx = Context::from_waker(Waker::noop());
        let (mut expected, mut ticks) = (Duration::ZERO, 0u32);
        for work in work_ms {
            // Wait for the next tick, a millisecond at a time.
            let tick = loop {
                match interval.poll_tick(&mut cx) {
                    Poll::Ready(tick) => break tick.unwrap() - start,
                    Poll::Pending => timer.advance(Duration::from_millis(1)).unwrap(),
                }
            };
            let now = timer.now() - start;
            prop_assert_eq!(tick, expected);
            prop_assert!(tick <= now, "never early");
            if behavior == MissedTickBehavior::Burst {
                prop_assert_eq!(tick, period * ticks, "on the grid, every one");
            }
            if behavior == MissedTickBehavior::Skip {
                prop_assert!((tick.as_nanos() % period.as_nanos()) == 0, "on the grid");
            }
            ticks += 1;
            expected = documented_next(behavior, tick, now, period);
            // The task's work before it asks for the next tick.
            timer.advance(Duration::from_millis(work)).unwrap();
        }
        prop_assert!(timer.pending() <= 1, "one timer at most, the next tick's");
    }
}

/// Five ticks of 2 ms, awaited: each due 2 ms after the last, and none before it is due.
async fn five_ticks(timer: Timer) {
    let mut interval = timer.interval(Duration::from_millis(2)).unwrap();
    let mut last = None;
    for _ in 0..5 {
        let tick = interval.tick().await.unwrap();
        assert!(Instant::now() >= tick, "never early");
        if let Some(last) = last {
            assert!(tick > last);
        }
        last = Some(tick);
    }
}

#[test]
fn on_tokio_and_on_futures_executor() {
    let timer = common::on_tokio_and_futures_executor(five_ticks);
    assert!(
        timer.pending() <= 1,
        "the dropped intervals cancelled their timers"
    );
}

#[cfg(feature = "stream")]
#[test]
fn an_interval_is_a_stream_of_ticks() {
    use futures::StreamExt;
    let timer = Timer::builder().shards(1).build().unwrap();
    let interval = timer.interval(Duration::from_millis(1)).unwrap();
    let ticks: Vec<_> = futures::executor::block_on(interval.take(3).collect());
    assert_eq!(ticks.len(), 3);
    assert!(
        ticks
            .windows(2)
            .all(|pair| pair[0].unwrap() < pair[1].unwrap())
    );
}

// A period past what an `Instant` holds used to put the next tick back at the first one,
// which then came again at every poll.
#[test]
fn a_huge_period_ticks_once_then_waits() {
    let timer = Timer::builder().shards(1).manual().build().unwrap();
    let mut interval = timer.interval(Duration::MAX).unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    assert!(interval.poll_tick(&mut cx).is_ready(), "the first, at once");
    assert!(interval.poll_tick(&mut cx).is_pending());
    interval.reset();
    assert!(interval.poll_tick(&mut cx).is_pending());
}
