//! The edges of a timer's life at shutdown: cancels and resets that come after the reaper
//! stopped taking them, a timer shut down or dropped on one of its own reapers, and the
//! bounds and names that must hold over a timer's whole life.

use shardwheel::{Period, Timer};
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
