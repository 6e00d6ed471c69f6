//! The park handshake: a timer scheduled, or a cancel made, while the reaper decides to go
//! to sleep still gets handled. A lost wake-up leaves the reaper parked for ever, which loom
//! reports as a deadlock (it does when the handshake's fences are removed).
#![cfg(loom)]

mod support;

use support::{Harness, spawn_reaper};

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
