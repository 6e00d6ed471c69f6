//! A sleep's wake-up, through the allocation it shares with its timer's callback (the
//! alarm): the timer's fire racing the task's poll, with its waker or with one of another
//! task (the wake-up is never lost), and the
//! alarm's end, rung or dropped unrun, racing the sleep's drop (a dropped sleep wakes
//! nobody, the waker is dropped once, the allocation freed once, by the last end).
#![cfg(loom)]

use loom::thread;
use shardwheel::SleepError;
use shardwheel::loom_api::{alarm_pair, live_alarms};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};

/// A waker that counts its wake-ups; its `Arc`'s count tells how many copies live.
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting() -> (Arc<Count>, Waker) {
    let count = Arc::new(Count(AtomicUsize::new(0)));
    (Arc::clone(&count), Waker::from(count))
}

fn woken(count: &Count) -> usize {
    count.0.load(Ordering::SeqCst)
}

/// Checks what every model ends with: the waker dropped once, the allocation freed once.
fn all_let_go(count: &Arc<Count>, live_before: usize) {
    assert_eq!(
        Arc::strong_count(count),
        1,
        "the waker leaked or was dropped twice"
    );
    assert_eq!(
        live_alarms(),
        live_before,
        "the shared state leaked or was freed twice"
    );
}

#[test]
fn a_fire_racing_a_poll_is_never_lost() {
    loom::model(|| {
        let live = live_alarms();
        let (count, waker) = counting();
        let (listener, alarm) = alarm_pair(waker);
        let reaper = thread::spawn(move || alarm.ring());
        // A poll: a wait not yet ended returns pending, and the task waits for a wake-up.
        let polled = listener.ended();
        reaper.join().unwrap();
        assert!(
            polled == Some(Ok(())) || woken(&count) == 1,
            "the wake-up was lost"
        );
        assert_eq!(listener.leave(), Some(Ok(())));
        all_let_go(&count, live);
    });
}

#[test]
fn a_fire_racing_a_poll_with_a_new_waker_is_never_lost() {
    loom::model(|| {
        let live = live_alarms();
        let (first_count, first) = counting();
        let (mut listener, alarm) = alarm_pair(first);
        let reaper = thread::spawn(move || alarm.ring());
        // The task moved: its poll brings a waker of another task.
        let (second_count, second) = counting();
        let polled = listener.listen(&second);
        reaper.join().unwrap();
        // The task now listens on `second`: either this poll saw the fire, or the fire
        // woke `second`.
        assert!(
            polled == Some(Ok(())) || woken(&second_count) == 1,
            "the wake-up was lost"
        );
        assert!(woken(&first_count) + woken(&second_count) <= 1);
        assert_eq!(listener.leave(), Some(Ok(())));
        drop(second);
        all_let_go(&first_count, live);
        all_let_go(&second_count, live);
    });
}

/// The sleep dropped (a timeout whose work finished) as its timer fires, or as the timer
/// shuts down and drops its callback unrun.
fn sleep_dropped_as_the_alarm_ends(ring: bool) {
    loom::model(move || {
        let live = live_alarms();
        let (count, waker) = counting();
        let (listener, alarm) = alarm_pair(waker);
        let reaper = thread::spawn(move || {
            if ring {
                alarm.ring();
            } else {
                drop(alarm);
            }
        });
        let ended = listener.leave();
        reaper.join().unwrap();
        assert!(woken(&count) <= 1);
        if ended.is_none() {
            assert_eq!(woken(&count), 0, "a sleep that let go first was woken");
        } else {
            let how = if ring {
                Ok(())
            } else {
                Err(SleepError::Shutdown)
            };
            assert_eq!(ended, Some(how));
        }
        all_let_go(&count, live);
    });
}

#[test]
fn a_sleep_dropped_as_its_timer_fires_frees_once_and_is_woken_by_nobody_after() {
    sleep_dropped_as_the_alarm_ends(true);
}

#[test]
fn a_sleep_dropped_as_its_timer_shuts_down_frees_once_and_is_woken_by_nobody_after() {
    sleep_dropped_as_the_alarm_ends(false);
}
