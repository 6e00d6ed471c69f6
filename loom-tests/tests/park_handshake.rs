//! The park handshake: a timer scheduled, or a cancel made, while the reaper decides to go
//! to sleep still gets handled, and so does a reset while a tidying reaper goes to sleep
//! with changes waiting. A lost wake-up leaves the reaper parked for ever, which loom
//! reports as a deadlock (it does when the handshake's fences are removed, or when the
//! tidying reaper ignores the resetter's flag).
#![cfg(loom)]

mod support;

use support::{Harness, spawn_reaper, spawn_reaper_tidying};

#[test]
fn a_timer_scheduled_while_the_reaper_parks_still_fires() {
    loom::model(|| {
        let h = Harness::new();
        // Nothing pending: the reaper sleeps until woken.
        let reaper = spawn_reaper(&h, u64::MAX, |h| h.fired() == 1);
        h.shard.schedule(0, h.payload(1)).unwrap();
        reaper.join().unwrap();
        assert_eq!(h.fired(), 1);
    });
}

#[test]
fn a_cancel_wakes_a_reaper_sleeping_until_a_far_deadline() {
    loom::model(|| {
        let h = Harness::new();
        let (slot, generation) = h.shard.schedule(100, h.payload(1)).unwrap();
        // Memory comes back only when the reaper frees the cancelled slot.
        let reaper = spawn_reaper(&h, 100, |h| h.drops() == 1);
        assert!(h.shard.cancel(slot, generation));
        reaper.join().unwrap();
        assert_eq!(h.fired(), 0);
        assert_eq!(h.shard.pending(), 0);
    });
}

#[test]
fn a_reset_to_an_earlier_deadline_wakes_a_tidying_reaper() {
    loom::model(|| {
        let h = Harness::new();
        let (slot, generation) = h.shard.schedule(100, h.payload(1)).unwrap();
        // Tidying, the reaper may sleep with changes waiting, but not with a reset's: it
        // must fire the timer at its new deadline, long before the one it plans for.
        let reaper = spawn_reaper_tidying(&h, 100, true, |h| h.fired() == 1);
        assert!(h.shard.reset(slot, generation, 0));
        reaper.join().unwrap();
        assert_eq!(h.fired(), 1);
    });
}
