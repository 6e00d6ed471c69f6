//! A sleep's wake-up: the timer's fire racing a poll that moves the task to a new waker
//! (the wake-up is never lost), and racing the sleep's drop (a dropped sleep wakes nobody).
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use shardwheel::loom_api::SleepShared;
use std::task::{Context, Poll, Wake, Waker};

/// A waker that counts its wake-ups.
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting() -> (std::sync::Arc<Count>, Waker) {
    let count = std::sync::Arc::new(Count(AtomicUsize::new(0)));
    (std::sync::Arc::clone(&count), Waker::from(count))
}

fn woken(count: &Count) -> usize {
    count.0.load(Ordering::SeqCst)
}

#[test]
fn a_fire_racing_a_poll_with_a_new_waker_is_never_lost() {
    loom::model(|| {
        let shared = Arc::new(SleepShared::default());
        let (_, first) = counting();
        assert!(shared.poll(&mut Context::from_waker(&first)).is_pending());
        let reaper = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || shared.fire())
        };
        let (second_count, second) = counting();
        let polled = shared.poll(&mut Context::from_waker(&second));
        reaper.join().unwrap();
        // The task now listens on `second`: either this poll saw the fire, or the fire
        // woke `second`.
        assert!(
            polled == Poll::Ready(Ok(())) || woken(&second_count) == 1,
            "the wake-up was lost"
        );
    });
}

#[test]
fn a_sleep_dropped_while_its_timer_fires_wakes_nobody_after() {
    loom::model(|| {
        let shared = Arc::new(SleepShared::default());
        let (count, waker) = counting();
        assert!(shared.poll(&mut Context::from_waker(&waker)).is_pending());
        let reaper = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || shared.fire())
        };
        drop(shared.abandon());
        reaper.join().unwrap();
        let (_, probe) = counting();
        let fired = shared.poll(&mut Context::from_waker(&probe)).is_ready();
        assert!(woken(&count) <= 1);
        if !fired {
            assert_eq!(woken(&count), 0, "an abandoned sleep was woken");
        }
    });
}
