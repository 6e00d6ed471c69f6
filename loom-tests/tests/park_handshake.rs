//! The park handshake: a timer scheduled, or a cancel made, while the reaper decides to go
//! to sleep still gets handled. A lost wake-up leaves the reaper parked for ever, which loom
//! reports as a deadlock.
#![cfg(loom)]

mod support;

use loom::thread;
use shardwheel::Wheel;
use support::Harness;

#[test]
fn a_timer_scheduled_while_the_reaper_parks_still_fires() {
    loom::model(|| {
        let h = Harness::new();
        let reaper = {
            let h = h.clone();
            thread::spawn(move || {
                h.shard.register_reaper();
                let mut wheel = Wheel::new();
                loop {
                    h.pass(&mut wheel, 0);
                    if h.fired() == 1 {
                        break;
                    }
                    // Nothing pending: the reaper would sleep until woken.
                    if h.shard.may_sleep(u64::MAX) {
                        thread::park();
                    }
                }
            })
        };
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
        let reaper = {
            let h = h.clone();
            thread::spawn(move || {
                h.shard.register_reaper();
                let mut wheel = Wheel::new();
                loop {
                    h.pass(&mut wheel, 0);
                    // Memory comes back only when the reaper frees the cancelled slot.
                    if h.drops() == 1 {
                        break;
                    }
                    if h.shard.may_sleep(100) {
                        thread::park();
                    }
                }
            })
        };
        assert!(h.shard.cancel(slot, generation));
        reaper.join().unwrap();
        assert_eq!(h.fired(), 0);
        assert_eq!(h.shard.pending(), 0);
    });
}
