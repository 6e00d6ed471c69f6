//! Slot reuse with generations: a handle of a timer that already fired, used while another
//! thread schedules a new timer into the same slot, cancels nothing; the new timer fires.
#![cfg(loom)]

mod support;

use loom::thread;
use shardwheel::loom_api::Due;
use support::Harness;

#[test]
fn a_stale_handle_cannot_cancel_the_slots_next_timer() {
    loom::model(|| {
        let h = Harness::new();
        let mut due = Due::new();
        let (slot, generation) = h.shard.schedule(0, h.payload(1)).unwrap();
        h.pass(&mut due, 0);
        assert_eq!(h.fired(), 1);
        let scheduler = {
            let h = h.clone();
            thread::spawn(move || h.shard.schedule(0, h.payload(10)).unwrap())
        };
        let stale = {
            let h = h.clone();
            thread::spawn(move || h.shard.cancel(slot, generation))
        };
        let (new_slot, new_generation) = scheduler.join().unwrap();
        assert!(!stale.join().unwrap(), "stale handle cancelled something");
        assert_eq!(new_slot, slot, "the freed slot is reused");
        assert_ne!(new_generation, generation);
        h.pass(&mut due, 0);
        assert_eq!(h.fired(), 2);
        assert_eq!(
            h.fired_values.load(loom::sync::atomic::Ordering::SeqCst),
            11
        );
        assert_eq!(h.drops(), 2, "each payload dropped once");
    });
}
