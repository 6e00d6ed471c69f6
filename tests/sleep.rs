//! Futures on the engine: `sleep`, `sleep_until`, `timeout`, polled by hand on a manual
//! timer (so every step is exact), and awaited on two executors with real reapers.

mod common;

use common::{Count, counting, wait_for, wakes};
use shardwheel::{SleepError, TimeoutError, Timer};
use std::future::{Future, pending};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

fn manual() -> Timer {
    Timer::builder().shards(1).manual().build().unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn poll<F: Future + Unpin>(future: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(waker))
}

#[test]
fn a_sleep_ends_at_its_deadline_and_not_before() {
    let timer = manual();
    let (count, waker) = counting();
    let mut sleep = timer.sleep(ms(10));
    assert!(poll(&mut sleep, &waker).is_pending());
    assert_eq!(timer.pending(), 1);
    timer.advance(ms(9)).unwrap();
    assert_eq!(wakes(&count), 0);
    assert!(poll(&mut sleep, &waker).is_pending());
    timer.advance(ms(1)).unwrap();
    assert_eq!(wakes(&count), 1);
    assert!(sleep.is_elapsed());
    assert_eq!(poll(&mut sleep, &waker), Poll::Ready(Ok(())));
    assert!(sleep.is_elapsed());
    assert_eq!(
        poll(&mut sleep, &waker),
        Poll::Ready(Ok(())),
        "and stays ended"
    );
    assert_eq!(timer.stats().fired, 1);
}

#[test]
fn a_new_waker_takes_over_the_wait() {
    let timer = manual();
    let (first, first_waker) = counting();
    let (second, second_waker) = counting();
    let mut sleep = timer.sleep(ms(5));
    assert!(poll(&mut sleep, &first_waker).is_pending());
    assert!(poll(&mut sleep, &second_waker).is_pending());
    assert_eq!(Arc::strong_count(&first), 2, "the first waker is let go");
    timer.advance(ms(5)).unwrap();
    assert_eq!((wakes(&first), wakes(&second)), (0, 1));
    let stats = timer.stats();
    assert_eq!(
        (stats.scheduled, stats.cancelled),
        (2, 1),
        "the timer was moved to the new waker"
    );
    assert_eq!(poll(&mut sleep, &second_waker), Poll::Ready(Ok(())));
}

#[test]
fn dropping_a_sleep_cancels_its_timer_and_wakes_nobody() {
    let timer = manual();
    let (count, waker) = counting();
    let mut sleeps: Vec<_> = (1..=100).map(|i| timer.sleep(ms(i))).collect();
    for sleep in &mut sleeps {
        assert!(poll(sleep, &waker).is_pending());
    }
    assert_eq!(timer.pending(), 100);
    drop(sleeps);
    assert_eq!(timer.pending(), 0);
    timer.advance(ms(200)).unwrap();
    let stats = timer.stats();
    assert_eq!((stats.cancelled, stats.fired), (100, 0));
    assert_eq!(
        wakes(&count),
        0,
        "a cancelled timer's dropped callback wakes nobody"
    );
}

/// A sleep's timer taken back from its own thread's stage, dropped on another thread, or
/// reset first: each way it is cancelled once, fires never, wakes nobody and lets go of
/// its waker.
#[test]
fn a_sleep_dropped_on_its_thread_on_another_or_after_a_reset_lets_go_once() {
    for how in ["here", "elsewhere", "reset"] {
        let timer = manual();
        let (count, waker) = counting();
        let mut sleep = timer.sleep(ms(10));
        assert!(poll(&mut sleep, &waker).is_pending());
        assert_eq!(
            Arc::strong_count(&count),
            3,
            "{how}: the sleep holds a waker"
        );
        match how {
            "here" => drop(sleep),
            "elsewhere" => std::thread::spawn(move || drop(sleep)).join().unwrap(),
            _ => {
                sleep.reset(timer.now() + ms(20));
                drop(sleep);
            }
        }
        if how == "here" {
            // Taken back from the stage, never seen by the reaper.
            assert_eq!(Arc::strong_count(&count), 2, "{how}: the waker is let go");
        }
        timer.advance(ms(100)).unwrap();
        assert_eq!(Arc::strong_count(&count), 2, "{how}: the waker is let go");
        let stats = timer.stats();
        assert_eq!((stats.cancelled, stats.fired), (1, 0), "{how}");
        assert_eq!(timer.pending(), 0, "{how}");
        assert_eq!(wakes(&count), 0, "{how}: nobody is woken");
    }
}

/// A sleep whose timer fired, and whose slot's memory the shard has given back since
/// (past the chunks it keeps for ever), lets go without touching that memory: nothing is
/// cancelled, and the timer goes on working. (A take-back that followed the slot's old
/// addresses would read unmapped memory.)
#[test]
fn a_sleep_whose_slot_was_given_back_after_it_fired_lets_go_harmlessly() {
    const SLEEPS: u64 = 10_000;
    let timer = Timer::builder().shards(1).build().unwrap();
    // One deadline for all, far enough that none fires before all are armed.
    let at = timer.now() + ms(300);
    let mut sleeps: Vec<_> = (0..SLEEPS).map(|_| timer.sleep_until(at)).collect();
    for sleep in &mut sleeps {
        assert!(poll(sleep, Waker::noop()).is_pending());
    }
    assert!(timer.stats().slots > 4_032, "slots past the kept chunks");
    // All fire; the shard frees their slots and gives the chunks past the first six
    // (4,032 slots) back.
    assert!(
        wait_for(Duration::from_secs(60), || {
            let stats = timer.stats();
            stats.fired == SLEEPS && stats.slots <= 4_032
        }),
        "fired and given back: {:?}",
        timer.stats()
    );
    for sleep in &mut sleeps {
        assert_eq!(poll(sleep, Waker::noop()), Poll::Ready(Ok(())));
    }
    drop(sleeps);
    let stats = timer.stats();
    assert_eq!((stats.cancelled, timer.pending()), (0, 0));
    let (count, waker) = counting();
    let mut sleep = timer.sleep(ms(1));
    assert!(poll(&mut sleep, &waker).is_pending());
    assert!(wait_for(Duration::from_secs(10), || wakes(&count) == 1));
    assert_eq!(poll(&mut sleep, &waker), Poll::Ready(Ok(())));
}

#[test]
fn a_deadline_already_passed_needs_no_timer() {
    let timer = manual();
    let (_, waker) = counting();
    timer.advance(ms(50)).unwrap();
    let mut sleep = timer.sleep(Duration::ZERO);
    assert_eq!(poll(&mut sleep, &waker), Poll::Ready(Ok(())));
    let mut past = timer.sleep_until(timer.now() - ms(1));
    assert_eq!(poll(&mut past, &waker), Poll::Ready(Ok(())));
    assert_eq!(timer.stats().scheduled, 0);
}

#[test]
fn a_timeout_whose_future_is_ready_at_once_schedules_nothing() {
    let timer = manual();
    let (_, waker) = counting();
    let mut quick = Box::pin(timer.timeout(ms(100), async { 42 }));
    assert_eq!(
        quick.as_mut().poll(&mut Context::from_waker(&waker)),
        Poll::Ready(Ok(42))
    );
    timer.advance(ms(1)).unwrap();
    assert_eq!(timer.stats().scheduled, 0);
}

#[test]
fn a_timeout_elapses_or_gives_the_output_and_cancels_its_timer() {
    let timer = manual();
    let (count, waker) = counting();
    let mut cx = Context::from_waker(&waker);

    let mut stuck = Box::pin(timer.timeout(ms(10), pending::<()>()));
    assert!(stuck.as_mut().poll(&mut cx).is_pending());
    timer.advance(ms(10)).unwrap();
    assert_eq!(wakes(&count), 1);
    assert_eq!(
        stuck.as_mut().poll(&mut cx),
        Poll::Ready(Err(TimeoutError::Elapsed))
    );

    // The work finishes at its second poll, well before the deadline.
    let mut polls = 0;
    let work = std::future::poll_fn(|cx| {
        polls += 1;
        if polls == 2 {
            Poll::Ready("done")
        } else {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    });
    let mut finishing = Box::pin(timer.timeout(ms(1_000), work));
    assert!(finishing.as_mut().poll(&mut cx).is_pending());
    assert_eq!(timer.pending(), 1);
    assert_eq!(finishing.as_mut().poll(&mut cx), Poll::Ready(Ok("done")));
    drop(finishing);
    assert_eq!(
        timer.pending(),
        0,
        "the finished timeout's timer is cancelled"
    );
}

#[test]
fn reset_moves_a_pending_sleep_and_rearms_a_finished_one() {
    let timer = manual();
    let (count, waker) = counting();
    let start = timer.now();
    let mut sleep = timer.sleep(ms(10));
    assert!(poll(&mut sleep, &waker).is_pending());
    sleep.reset(start + ms(30));
    timer.advance(ms(20)).unwrap();
    assert_eq!(wakes(&count), 0, "not at the old deadline");
    assert!(poll(&mut sleep, &waker).is_pending());
    assert_eq!(timer.stats().scheduled, 1, "moved in place");
    timer.advance(ms(15)).unwrap();
    assert_eq!(poll(&mut sleep, &waker), Poll::Ready(Ok(())));

    // Finished: a reset makes it wait again, on a new timer.
    sleep.reset(start + ms(60));
    assert!(poll(&mut sleep, &waker).is_pending());
    timer.advance(ms(30)).unwrap();
    assert_eq!(poll(&mut sleep, &waker), Poll::Ready(Ok(())));
    assert_eq!(timer.stats().fired, 2);
}

#[test]
fn shutdown_ends_pending_sleeps_with_an_error_and_refuses_new_ones() {
    let timer = manual();
    let (count, waker) = counting();
    let mut sleep = timer.sleep(ms(10));
    assert!(poll(&mut sleep, &waker).is_pending());
    assert!(
        timer.shutdown().is_empty(),
        "a sleep's wake-up is not handed back"
    );
    assert_eq!(wakes(&count), 1, "the shutdown woke the task");
    assert_eq!(
        poll(&mut sleep, &waker),
        Poll::Ready(Err(SleepError::Shutdown))
    );
    let mut late = timer.sleep(ms(1));
    assert_eq!(
        poll(&mut late, &waker),
        Poll::Ready(Err(SleepError::Shutdown))
    );
}

#[test]
fn a_full_timer_is_an_error_not_a_hang() {
    let timer = Timer::builder()
        .shards(1)
        .manual()
        .max_pending(1)
        .build()
        .unwrap();
    let (_, waker) = counting();
    let mut first = timer.sleep(ms(10));
    assert!(poll(&mut first, &waker).is_pending());
    let mut second = timer.timeout(ms(10), pending::<()>());
    let mut second = Pin::new(&mut second);
    let polled = second.as_mut().poll(&mut Context::from_waker(&waker));
    assert_eq!(
        polled,
        Poll::Ready(Err(TimeoutError::Sleep(SleepError::Full)))
    );
}

#[test]
fn sleeps_and_timeouts_on_futures_block_on() {
    let timer = Timer::builder().shards(2).build().unwrap();
    futures::executor::block_on(async {
        let start = Instant::now();
        timer.sleep(ms(20)).await.unwrap();
        assert!(start.elapsed() >= ms(20));
        let stuck = timer.timeout(ms(5), pending::<()>()).await;
        assert_eq!(stuck, Err(TimeoutError::Elapsed));
        let quick = timer
            .timeout(Duration::from_secs(60), timer.sleep(ms(1)))
            .await;
        assert_eq!(quick, Ok(Ok(())));
    });
    assert_eq!(timer.pending(), 0);
}

#[test]
fn many_tokio_tasks_time_out_or_finish_and_leave_no_timer_behind() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let timer = Arc::new(Timer::builder().shards(2).build().unwrap());
    let early = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..2_000u64)
        .map(|i| {
            let (timer, early) = (Arc::clone(&timer), Arc::clone(&early));
            runtime.spawn(async move {
                let start = Instant::now();
                let limit = ms(5 + i % 20);
                if i % 10 == 0 {
                    // Never finishes: the timeout ends it, never before its deadline.
                    let outcome = timer.timeout(limit, pending::<()>()).await;
                    assert_eq!(outcome, Err(TimeoutError::Elapsed));
                    if start.elapsed() < limit {
                        early.fetch_add(1, Ordering::Relaxed);
                    }
                    return false;
                }
                // Finishes after a yield, long before its (far) deadline.
                let work = async {
                    tokio::task::yield_now().await;
                    i
                };
                timer.timeout(Duration::from_secs(600), work).await == Ok(i)
            })
        })
        .collect();
    let finished = runtime.block_on(async {
        let mut finished = 0;
        for task in tasks {
            finished += usize::from(task.await.unwrap());
        }
        finished
    });
    assert_eq!(finished, 1_800);
    assert_eq!(early.load(Ordering::Relaxed), 0, "no timeout fired early");
    assert_eq!(
        timer.pending(),
        0,
        "cancelled timeouts leave no timer behind"
    );
    assert!(timer.shutdown().is_empty());
}

#[test]
fn futures_can_move_between_threads() {
    fn send<T: Send>(_: &T) {}
    let timer = manual();
    send(&timer.sleep(ms(1)));
    send(&timer.timeout(ms(1), async {}));
}

/// What a sequence of sleeps does on a manual timer.
#[derive(Debug, Clone)]
enum Step {
    /// A sleep of this many ms, polled once (its timer waits in this thread's stage).
    Sleep(u64),
    /// Drops the n-th live sleep (modulo), here or on another thread.
    Drop(usize, bool),
    /// Moves the manual time on by this many ms.
    Advance(u64),
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        (1..40u64).prop_map(Step::Sleep),
        (any::<usize>(), any::<bool>()).prop_map(|(n, away)| Step::Drop(n, away)),
        (1..20u64).prop_map(Step::Advance),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// Sleeps made, dropped (on their thread, taking their timer back from its stage, or
    /// on another) and left to end, in any order: a sleep is woken once, at or after its
    /// deadline, unless it was dropped first; a dropped one is never woken; each timer is
    /// fired or cancelled once; and every waker is let go of in the end.
    #[test]
    fn sleeps_dropped_or_left_to_end_wake_once_and_let_go(
        steps in proptest::collection::vec(step(), 1..60),
    ) {
        let timer = manual();
        // Live sleeps: the sleep, its waker's count, and its deadline in manual ms.
        let mut live: Vec<(shardwheel::Sleep, Arc<Count>, u64)> = Vec::new();
        let mut counts = Vec::new();
        let (mut now, mut made, mut dropped) = (0, 0, 0);
        for step in steps {
            match step {
                Step::Sleep(delay) => {
                    let (count, waker) = counting();
                    let mut sleep = timer.sleep(ms(delay));
                    proptest::prop_assert!(poll(&mut sleep, &waker).is_pending());
                    counts.push(Arc::clone(&count));
                    live.push((sleep, count, now + delay));
                    made += 1;
                }
                Step::Drop(n, away) if !live.is_empty() => {
                    let (sleep, count, deadline) = live.swap_remove(n % live.len());
                    let woken = wakes(&count);
                    if away {
                        std::thread::spawn(move || drop(sleep)).join().unwrap();
                    } else {
                        drop(sleep);
                    }
                    if woken == 0 {
                        dropped += 1;
                    } else {
                        proptest::prop_assert!(deadline <= now, "woken before its deadline");
                    }
                    // A dropped sleep is woken by nobody, not even by its own drop.
                    counts.retain(|c| !Arc::ptr_eq(c, &count));
                    timer.advance(ms(0)).unwrap();
                    proptest::prop_assert_eq!(wakes(&count), woken, "woken as it was dropped");
                    if !away {
                        // Taken back from its thread's stage, or cancelled and discarded by
                        // the reaper. (A timer dropped on another thread while staged keeps
                        // its waker until the stage is collected: checked at the end.)
                        proptest::prop_assert_eq!(Arc::strong_count(&count), 1, "the waker is let go");
                    }
                }
                Step::Drop(..) => {}
                Step::Advance(by) => {
                    timer.advance(ms(by)).unwrap();
                    now += by;
                    for (_, count, deadline) in &live {
                        let expected = usize::from(*deadline <= now);
                        proptest::prop_assert_eq!(wakes(count), expected, "woken once, when due");
                    }
                }
            }
        }
        timer.advance(ms(100)).unwrap();
        for (_, count, _) in &live {
            proptest::prop_assert_eq!(wakes(count), 1, "a live sleep is woken once");
        }
        let stats = timer.stats();
        proptest::prop_assert_eq!(stats.fired + stats.cancelled, made);
        proptest::prop_assert_eq!(stats.cancelled, dropped);
        drop(live);
        for count in &counts {
            proptest::prop_assert_eq!(Arc::strong_count(count), 1, "every waker let go");
        }
    }
}
