//! The edges of a timer's life at shutdown: cancels and resets that come after the reaper
//! stopped taking them, a timer shut down or dropped on one of its own reapers, and the
//! bounds and names that must hold over a timer's whole life.

mod common;

use shardwheel::{Period, ScheduleError, Timer};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

fn manual() -> Timer {
    Timer::builder().shards(1).manual().build().unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Runs a closure when dropped: a callback that owns one runs it when the callback is
/// dropped unrun (cancelled, or handed back).
struct OnDrop<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// A callback that counts its drops in `drops` (run or not).
fn counted(drops: &Arc<AtomicUsize>) -> impl FnOnce() + Send + 'static {
    let counter = OnDrop({
        let drops = Arc::clone(drops);
        move || {
            drops.fetch_add(1, Ordering::SeqCst);
        }
    });
    move || drop(counter)
}

/// Schedules a timer and cancels it before any pass, so that its payload is dropped by the
/// shutdown's wind-up, after the reaper closed its lists: `on_drop` runs there.
fn cancelled_during_wind_up(timer: &Timer, on_drop: impl FnMut() + Send + 'static) {
    let hook = OnDrop(on_drop);
    let handle = timer.schedule(ms(60_000), move || drop(hook)).unwrap();
    assert!(timer.cancel(handle));
}

// A series cancelled during the wind-up used to keep its run in its slot: the run owns the
// series, which owns the timer's shards, which own the slot, so nothing was ever freed and
// the user's closure (here, a channel's sender) lived for ever.
#[test]
fn a_series_cancelled_during_shutdown_is_dropped() {
    let timer = manual();
    let (tx, rx) = mpsc::channel::<()>();
    let series = timer
        .schedule_periodic(ms(10), Period::FixedRate(ms(10)), move || {
            let _ = tx.send(());
        })
        .unwrap();
    cancelled_during_wind_up(&timer, move || assert!(series.cancel()));
    assert!(timer.shutdown().is_empty());
    drop(timer);
    assert_eq!(
        rx.try_recv(),
        Err(mpsc::TryRecvError::Disconnected),
        "the series' closure was dropped"
    );
}

// A reset refused by the closed list left its slot marked as queued for a change, so a
// cancel after it queued nothing and the payload waited for the shards' drop.
#[test]
fn a_timer_reset_then_cancelled_during_shutdown_is_dropped_once_by_then() {
    let timer = Arc::new(manual());
    let drops = Arc::new(AtomicUsize::new(0));
    let target = timer.schedule(ms(10_000), counted(&drops)).unwrap();
    let weak = Arc::downgrade(&timer);
    cancelled_during_wind_up(&timer, move || {
        let timer = weak.upgrade().expect("the test holds the timer");
        assert!(timer.reset(target, ms(5)).is_ok(), "still pending");
        assert!(timer.cancel(target));
    });
    assert!(timer.shutdown().is_empty(), "the target was cancelled");
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "dropped when shutdown returns"
    );
    drop(timer);
    assert_eq!(drops.load(Ordering::SeqCst), 1, "and not again");
}

/// Timers `pending_on_every_shard` schedules.
const SPREAD: usize = 64;

/// Schedules `SPREAD` timers from as many threads, each counting its drop in `drops`: a
/// producer thread keeps to one shard, and new threads are handed out to the shards in
/// turn, so every shard gets some (all on one of two shards: a chance of 2^-63).
fn pending_on_every_shard(timer: &Arc<Timer>, drops: &Arc<AtomicUsize>) {
    for _ in 0..SPREAD {
        let (timer, drops) = (Arc::clone(timer), Arc::clone(drops));
        std::thread::spawn(move || timer.schedule(ms(600_000), counted(&drops)).unwrap())
            .join()
            .unwrap();
    }
}

/// Waits up to ten seconds for `count` to reach `expected`.
fn wait_for(count: &AtomicUsize, expected: usize) -> usize {
    for _ in 0..10_000 {
        if count.load(Ordering::SeqCst) == expected {
            break;
        }
        std::thread::sleep(ms(1));
    }
    count.load(Ordering::SeqCst)
}

// The last `Arc<Timer>` dropped inside one of its callbacks made the shutdown join its own
// reaper: std panicked ("failed to join thread: Resource deadlock avoided") inside the
// callback, and the callback never got past the drop.
#[test]
fn a_timer_dropped_in_its_own_callback_winds_up_every_shard() {
    let timer = Arc::new(Timer::builder().shards(2).build().unwrap());
    let drops = Arc::new(AtomicUsize::new(0));
    pending_on_every_shard(&timer, &drops);
    let (done, finished) = mpsc::channel();
    let owner = Arc::clone(&timer);
    timer
        .schedule(ms(1), move || {
            drop(owner);
            done.send(()).unwrap();
        })
        .unwrap();
    drop(timer);
    finished
        .recv_timeout(Duration::from_secs(10))
        .expect("the callback went on after the timer was dropped");
    assert_eq!(
        wait_for(&drops, SPREAD),
        SPREAD,
        "both shards' pending timers dropped unrun"
    );
}

#[test]
fn a_timer_shut_down_in_its_own_callback_hands_back_the_other_shards_timers() {
    let timer = Arc::new(Timer::builder().shards(2).build().unwrap());
    let drops = Arc::new(AtomicUsize::new(0));
    pending_on_every_shard(&timer, &drops);
    let (done, finished) = mpsc::channel();
    let weak = Arc::downgrade(&timer);
    timer
        .schedule(ms(1), move || {
            let timer = weak.upgrade().unwrap();
            done.send(timer.shutdown().len()).unwrap();
        })
        .unwrap();
    let handed_back = finished.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        (1..SPREAD).contains(&handed_back),
        "the other shard's timers, not this one's: {handed_back}"
    );
    assert_eq!(wait_for(&drops, SPREAD), SPREAD, "this shard's dropped");
    assert!(timer.schedule(ms(1), || {}).is_err(), "shut down");
}

// A manual timer shut down from a callback inside `advance` waited for the lock `advance`
// held.
#[test]
fn a_manual_timer_shut_down_inside_advance_winds_up_after_it() {
    let timer = Arc::new(manual());
    let drops = Arc::new(AtomicUsize::new(0));
    timer.schedule(ms(600_000), counted(&drops)).unwrap();
    let weak = Arc::downgrade(&timer);
    timer
        .schedule(ms(1), move || {
            let timer = weak.upgrade().unwrap();
            assert!(timer.shutdown().is_empty(), "wound up after the passes");
        })
        .unwrap();
    timer.advance(ms(1)).unwrap();
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "dropped unrun once advance returned"
    );
    assert_eq!(timer.pending(), 0);
    assert_eq!(timer.panicked(), 0);
    assert!(timer.schedule(ms(1), || {}).is_err(), "shut down");
    assert!(timer.shutdown().is_empty());
}

// The bound was split evenly over the shards while a producer thread keeps to one:
// `shards(2).max_pending(1000)` took 500 timers from one thread, then said `Full`.
#[test]
fn max_pending_bounds_the_whole_timer_whichever_threads_schedule() {
    let timer = Arc::new(
        Timer::builder()
            .shards(2)
            .manual()
            .max_pending(1_000)
            .build()
            .unwrap(),
    );
    let from_another_thread = |timer: &Arc<Timer>| {
        let timer = Arc::clone(timer);
        std::thread::spawn(move || timer.schedule(ms(1), || {}).is_ok())
            .join()
            .unwrap()
    };
    let handles: Vec<_> = (0..1_000)
        .map(|_| timer.schedule(ms(1_000), || {}).expect("within the bound"))
        .collect();
    assert!(matches!(
        timer.schedule(ms(1), || {}),
        Err(ScheduleError::Full(_))
    ));
    assert!(!from_another_thread(&timer), "full on every shard");
    assert!(timer.cancel(handles[0]));
    assert!(
        from_another_thread(&timer),
        "a cancel makes room, for any thread"
    );
    assert!(timer.schedule(ms(1), || {}).is_err());
    timer.advance(ms(1_000)).unwrap();
    assert_eq!(timer.pending(), 0);
    assert!(
        timer.schedule(ms(1), || {}).is_ok(),
        "and so do fired timers"
    );
}

/// A shutdown ends every pending sleep and timeout itself: tasks awaiting them wake with
/// `SleepError::Shutdown` (a timeout's future runs on) while the caller still holds what
/// the shutdown handed back, which is the user's closures alone.
#[test]
fn a_shutdown_ends_pending_sleeps_and_timeouts_and_hands_back_only_closures() {
    const TASKS: usize = 1_000;
    let runtime = common::tokio_runtime();
    let timer = Timer::builder().shards(2).build().unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    timer.schedule(ms(60_000), counted(&drops)).unwrap();
    let (polled, first_polls) = mpsc::channel();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (timer, polled) = (timer.clone(), polled.clone());
            runtime.spawn(async move {
                let mut sleep = std::pin::pin!(timer.sleep(ms(60_000)));
                let mut timeout =
                    std::pin::pin!(timer.timeout(ms(60_000), std::future::pending::<()>()));
                std::future::poll_fn(|context| {
                    assert!(sleep.as_mut().poll(context).is_pending());
                    assert!(timeout.as_mut().poll(context).is_pending());
                    std::task::Poll::Ready(())
                })
                .await;
                polled.send(task).unwrap();
                (sleep.await, timeout.await.map(drop))
            })
        })
        .collect();
    for _ in 0..TASKS {
        first_polls.recv_timeout(Duration::from_secs(30)).unwrap();
    }

    let handed_back = timer.shutdown();
    assert_eq!(handed_back.len(), 1, "the closure alone");
    let ended = runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), async {
            let mut ended = Vec::new();
            for task in tasks {
                ended.push(task.await.unwrap());
            }
            ended
        })
        .await
    });
    let ended = ended.expect("every sleep and timeout ended while the closures were held");
    assert!(ended.iter().all(|(sleep, timeout)| {
        *sleep == Err(shardwheel::SleepError::Shutdown) && timeout.is_err()
    }));
    assert_eq!(
        drops.load(Ordering::SeqCst),
        0,
        "the closure was handed back unrun"
    );
    drop(handed_back);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}
